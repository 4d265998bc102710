"""A resumed session's first request is the very request the session would have made without the
restart (decision 0093): the same bytes, on every store, whichever turn the restart falls on."""

from __future__ import annotations

from typing import Any

import pytest

from selfctx.adapters.harness.session import HarnessSession
from tests.conftest import StoreFactory
from tests.harness.conftest import bash, make_service, o_assistant, o_tool, o_user, open_harness
from tests.support import WrappedStore

TURNS = 14


def _listing() -> list[dict[str, Any]]:
    """A task of ``TURNS`` turns: file reads, a rewrite of one file, repeated and failing
    commands, each output a few hundred lines (enough for the relevance policy to collapse)."""
    messages: list[dict[str, Any]] = [o_user("Fix the failing parser test.")]
    for turn in range(TURNS):
        path = f"src/mod_{turn % 5}.py"
        call = f"c{turn}"
        if turn % 4 == 3:
            command = f"sed -i 's/old/new/' {path} && cat {path}"
        elif turn % 4 == 2:
            command = "pytest -q tests/test_parser.py"
        else:
            command = f"cat {path}"
        lines = [f"def f_{turn}_{n}(x):  # {path} line {n}\n    return x + {n}" for n in range(60)]
        output = "\n".join(lines)
        messages.append(o_assistant(f"Step {turn}: {command.split()[0]}.", bash(call, command)))
        messages.append(o_tool(call, output))
        if turn % 5 == 4:
            messages.append(o_user(f"Keep going ({turn})."))
    return messages


def _harness(store: WrappedStore) -> HarnessSession:
    return open_harness(make_service("relevance", store=store), session_id="s1")


@pytest.mark.parametrize("restart_at", [2, 5, 9, TURNS])
def test_the_first_request_after_a_resume_is_the_uninterrupted_one(
    store_factory: StoreFactory, ns: str, restart_at: int
) -> None:
    listing = _listing()
    cuts = [i + 1 for i, m in enumerate(listing) if m["role"] == "tool"]
    straight = WrappedStore(store_factory.make(), namespace=f"{ns}a")
    broken = WrappedStore(store_factory.make(), namespace=f"{ns}b")
    try:
        one, two = _harness(straight), _harness(broken)
        for turn, cut in enumerate(cuts, start=1):
            one.ingest(listing[:cut])
            expected = one.encoded_request().text
            if turn == restart_at:
                # the other server dies after recording the turn, before assembling it; a new
                # one resumes the session from the store alone
                two.ingest(listing[:cut])
                two = _harness(broken)
                assert two.resumed is not None
                assert two.ingest(listing[:cut]).consumed == 0
            else:
                two.ingest(listing[:cut])
            assert two.encoded_request().text == expected, f"turn {turn}"
        state = one.service.state("s1")
        assert len(state.pool) > len(state.active)  # the policy did collapse outputs
    finally:
        straight.close()
        broken.close()
