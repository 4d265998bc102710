"""Replays on a real XTDB node: the project's own recorded sessions and every trajectory of the
development set (when present), under every layout policy, with the per-call checks (the
byte-identity round trip on every 10th call and the last), and the context rebuilt from stored
versions compared with what the calls saw."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.harness.replay import replay, replay_filesystem_id, session_id_for
from selfctx.adapters.harness.tokens import PromptCounter
from selfctx.adapters.harness.trajectories import Trajectory
from selfctx.adapters.tokenizer import EstimateTokenizer
from selfctx.adapters.xtdb import XtdbNode, open_store
from selfctx.adapters.xtdb.store import XtdbStore
from selfctx.application.policies import POLICIES, policy_by_name
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
