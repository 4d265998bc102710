"""A resumed session's first request is the very request the session would have made without the
restart (decision 0093): the same bytes, on every store, whichever turn the restart falls on."""

from __future__ import annotations

from typing import Any

import pytest

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.harness import request
from selfctx.adapters.harness.session import HarnessSession
from selfctx.application.policies import policy_by_name
from selfctx.application.service import ContextService
from selfctx.application.settings import Settings
from selfctx.domain import inline
from tests.conftest import StoreFactory
from tests.harness.conftest import (
    CONTAINER,
    bash,
    make_service,
    o_assistant,
    o_tool,
    o_user,
    open_harness,
)
from tests.support import CountingClock, CountingIds, WrappedStore

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


@pytest.mark.parametrize("restart_at", [3, 9, TURNS])
def test_the_first_request_after_a_resume_does_only_what_an_ordinary_one_does(
    store_factory: StoreFactory, ns: str, restart_at: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resume prepares the request as the state is (decision 0110): the first request after
    it renders, encodes and counts no more messages than the same request of the uninterrupted
    session does, and is the same bytes."""
    calls = {"rendered": 0, "encoded": 0, "counted": 0}

    def counting(name: str, function: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return function(*args, **kwargs)

        return counted

    listing = _listing()
    cuts = [i + 1 for i, m in enumerate(listing) if m["role"] == "tool"][:restart_at]
    straight = WrappedStore(store_factory.make(), namespace=f"{ns}a")
    broken = WrappedStore(store_factory.make(), namespace=f"{ns}b")
    try:
        one, two = _harness(straight), _harness(broken)
        for cut in cuts:
            one.ingest(listing[:cut])
            one.encoded_request()
            two.ingest(listing[:cut])
            two.encoded_request()
        # a message more, then its request: on the uninterrupted server, and on a new one that
        # resumed the session from the store alone in between
        more = [*listing[: cuts[-1]], o_user("Go on.")]
        one.ingest(more)
        two.ingest(more)
        tokenizer = type(two.service.tokenizer)
        monkeypatch.setattr(inline, "_render_message", counting("rendered", inline._render_message))
        monkeypatch.setattr(request, "_final_openai", counting("encoded", request._final_openai))
        monkeypatch.setattr(tokenizer, "count", counting("counted", tokenizer.count))
        two = _harness(broken)
        assert two.resumed is not None
        two.prepare()  # what the stdio server's session.open does on a resume
        before = dict(calls)
        expected = one.encoded_request().text
        ordinary = {k: calls[k] - before[k] for k in calls}
        before = dict(calls)
        assert two.encoded_request().text == expected
        first = {k: calls[k] - before[k] for k in calls}
        assert ordinary["rendered"] > 0  # the uninterrupted request rendered its new message
        for name in calls:
            assert first[name] <= ordinary[name], (name, first, ordinary)
    finally:
        straight.close()
        broken.close()


def test_the_resume_drops_what_the_first_request_would_drop(
    store_factory: StoreFactory, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resume's preparation renders every message with every tool call's metadata (decision
    0110); what an assembly ends with, dropping the metadata of the hollow calls beyond the
    budget (decision 0111) and the renderings beyond the rendering budget (decision 0117), is
    done by the preparation too, not left to the first request (decision 0129). That request is
    then the uninterrupted session's, byte for byte."""
    monkeypatch.setattr(request, "_STALE_RENDERINGS", 0)
    settings = Settings(policy=policy_by_name("relevance"), metadata_budget=2, rendering_budget=3)

    def service(store: WrappedStore) -> ContextService:
        return build_service(
            store=store,
            default_filesystem_id=CONTAINER,
            clock=CountingClock(),
            ids=CountingIds(),
            settings=settings,
        )

    listing = _listing()
    cuts = [i + 1 for i, m in enumerate(listing) if m["role"] == "tool"]
    straight = WrappedStore(store_factory.make(), namespace=f"{ns}a")
    broken = WrappedStore(store_factory.make(), namespace=f"{ns}b")
    try:
        one = open_harness(service(straight), session_id="s1")
        two = open_harness(service(broken), session_id="s1")
        for cut in cuts:
            one.ingest(listing[:cut])
            one.encoded_request()
            two.ingest(listing[:cut])
            two.encoded_request()
        two = open_harness(service(broken), session_id="s1")
        assert two.resumed is not None
        objects = two.service._open("s1").objects
        assert len(objects._warm) > settings.metadata_budget  # the resume read them all
        two.prepare()
        assert len(objects._warm) <= settings.metadata_budget
        assert len(two._requests._rendered) <= settings.rendering_budget
        assert two.encoded_request().text == one.encoded_request().text
    finally:
        straight.close()
        broken.close()
