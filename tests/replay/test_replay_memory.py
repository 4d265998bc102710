"""Every recorded session (the project's own; the development set's when present), replayed end
to end on the in-memory store, with the full checks at every model call
(``checks.CallChecker``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.harness.replay import replay, replay_filesystem_id
from selfctx.adapters.harness.tokens import PromptCounter
from selfctx.adapters.harness.trajectories import Trajectory
from selfctx.adapters.memory import MemoryStore
from selfctx.adapters.tokenizer import EstimateTokenizer
from selfctx.application.policies import POLICIES, policy_by_name
from tests.replay.checks import CallChecker
from tests.replay.data import trajectory_params


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("trajectory", trajectory_params())
def test_replay_on_memory_checks_every_call(
    trajectory: Trajectory, policy: str, tmp_path: Path
) -> None:
    service = build_service(
        store=MemoryStore(),
        workspace=str(tmp_path),
        default_filesystem_id=replay_filesystem_id(trajectory),
        tokenizer=EstimateTokenizer(),
    )
    checker = CallChecker(trajectory)
    report = replay(
        trajectory,
        service,
        PromptCounter(EstimateTokenizer()),
        observe=checker,
        policy=policy_by_name(policy),
    )
    assert service.state(report.session_id).policy.name == policy

    assert checker.calls_checked == len(trajectory.calls) == len(report.calls)
    checker.check_past(range(1, len(trajectory.calls) + 1))
    assert [c.call for c in report.calls] == list(range(1, len(trajectory.calls) + 1))
    # after the replay the whole stream is stored: every answered call is an object
    state = service.state(report.session_id)
    assert checker.session is not None
    for call_id in trajectory.tool_outputs():
        assert state.in_index(checker.session.ids.answer(call_id) or call_id)
    assert report.naive_tokens > 0 and report.managed_tokens > 0
