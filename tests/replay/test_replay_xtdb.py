"""Replays on a real XTDB node: the project's own recorded sessions and every trajectory of the
development set (when present), under every layout policy, with the per-call checks (the
byte-identity round trip on every 10th call and the last), and the context rebuilt from stored
versions compared with what the calls saw."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.harness.replay import replay, replay_filesystem_id, session_id_for
from selfctx.adapters.harness.tokens import PromptCounter
from selfctx.adapters.harness.trajectories import Trajectory
from selfctx.adapters.tokenizer import EstimateTokenizer
from selfctx.adapters.xtdb import XtdbNode, open_store
from selfctx.adapters.xtdb.store import XtdbStore
from selfctx.application.policies import POLICIES, policy_by_name
from selfctx.application.settings import Settings
from tests.replay.checks import CallChecker
from tests.replay.data import trajectory_params

pytestmark = [pytest.mark.xtdb, pytest.mark.slow]


@pytest.fixture
def store(xtdb_node: XtdbNode) -> Iterator[XtdbStore]:
    store = open_store(xtdb_node.url, timeout=30.0)
    yield store
    store.close()


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("trajectory", trajectory_params())
def test_replay_on_xtdb(
    trajectory: Trajectory, policy: str, store: XtdbStore, tmp_path: Path
) -> None:
    # The node is shared by the whole run: the session and the filesystem get a namespace of this
    # test's own (except the sample's filesystem, which its file fixes: its files are the same
    # objects in every session, as they should be). Tool-call object ids belong to the session.
    ns = f"t{uuid.uuid4().hex[:8]}"
    filesystem = trajectory.filesystem_id or f"{ns}:{replay_filesystem_id(trajectory)}"
    service = build_service(store=store, workspace=str(tmp_path), default_filesystem_id=filesystem)
    checker = CallChecker(trajectory, activate_every=10)
    report = replay(
        trajectory,
        service,
        PromptCounter(EstimateTokenizer()),
        session_id=session_id_for(trajectory, ns),
        observe=checker,
        policy=policy_by_name(policy),
    )
    assert checker.calls_checked == len(trajectory.calls) == len(report.calls)
    last = len(trajectory.calls)
    checker.check_past(sorted({1, max(last // 2, 1), last}))


_CALL_ID = re.compile(r"\btc_[0-9a-f]{16,}\b")


def _prompts(trajectory: Trajectory, store: XtdbStore, tmp_path: Path, budget: int) -> list[str]:
    """Every prompt of a replay of ``trajectory`` by a service keeping ``budget`` characters of
    content, as JSON text, with the session's namespace written as ``NS``; with a tiny budget,
    no metadata of the tool calls whose content it dropped either (decision 0111)."""
    ns = f"t{uuid.uuid4().hex[:8]}"
    filesystem = trajectory.filesystem_id or f"{ns}:{replay_filesystem_id(trajectory)}"
    service = build_service(
        store=store,
        workspace=str(tmp_path),
        default_filesystem_id=filesystem,
        settings=Settings(content_budget=budget, metadata_budget=0 if budget < 1_000 else budget),
    )
    prompts: list[str] = []
    sid = session_id_for(trajectory, ns)
    names: dict[str, str] = {}  # the model's ids of tool calls derive from the session's ids

    def rename(match: re.Match[str]) -> str:
        return names.setdefault(match.group(0), f"call-{len(names)}")

    def keep(number: int, call: object, session: object, request: Mapping[str, Any]) -> None:
        text = json.dumps(request, sort_keys=True).replace(ns, "NS")
        prompts.append(_CALL_ID.sub(rename, text))
        if budget < 1_000:  # what the tiny cache keeps is bounded; the rest lives in the store
            cache = service._open(sid).objects
            # at most the one used last beyond the budget, and what the prompt shows whole
            largest = max(cache._whole.values(), default=0)
            assert cache.chars <= budget + largest + cache.held_chars()

    try:
        replay(
            trajectory,
            service,
            PromptCounter(EstimateTokenizer()),
            session_id=sid,
            observe=keep,
            policy=policy_by_name("relevance"),
        )
        if budget < 1_000:
            cache = service._open(sid).objects
            assert cache.loads > 0  # content was dropped, and read back from the store
    finally:
        service.close()
    return prompts


@pytest.mark.parametrize("trajectory", trajectory_params({"sample_session"}))
def test_a_tiny_content_cache_sends_the_same_prompts_as_an_unbounded_one(
    trajectory: Trajectory, store: XtdbStore, tmp_path: Path
) -> None:
    """Decisions 0086 and 0100: content that lives in the store is held in a bounded cache and
    read back on a miss; with a cache of one character every prompt of the recorded session is
    byte-identical to the prompts of a cache that never drops anything."""
    tiny = _prompts(trajectory, store, tmp_path / "tiny", 1)
    unbounded = _prompts(trajectory, store, tmp_path / "unbounded", 10**12)
    assert len(tiny) == len(unbounded) == len(trajectory.calls)
    for number, (a, b) in enumerate(zip(tiny, unbounded, strict=True), 1):
        assert a == b, f"call {number}"
