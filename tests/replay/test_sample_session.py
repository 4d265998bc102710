"""The example session the project ships (``make demo`` replays it): it is what it claims to be."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.cli import sample_session
from selfctx.adapters.harness.recognise import unwrap_output
from selfctx.adapters.harness.replay import ReplayReport, replay, replay_filesystem_id
from selfctx.adapters.harness.tokens import PromptCounter
from selfctx.adapters.harness.trajectories import OWN_FORMAT, Trajectory, load
from selfctx.adapters.memory import MemoryStore
from selfctx.adapters.tokenizer import EstimateTokenizer
from selfctx.application.policies import policy_by_name
from selfctx.application.service import ContextService
from selfctx.application.settings import Settings
from selfctx.domain.objects import FileObject
from tests.replay.checks import CallChecker

SAMPLE_TREE = sample_session.SAMPLE


def _replayed() -> tuple[Trajectory, ContextService, ReplayReport]:
    (trajectory,) = load(sample_session.OUTPUT)
    service = build_service(
        store=MemoryStore(),
        workspace=str(SAMPLE_TREE),
        default_filesystem_id=replay_filesystem_id(trajectory),
        # The session was recorded with the SSOT's layout: its context tools' answers are those.
        settings=Settings(policy=policy_by_name("ssot")),
    )
    checker = CallChecker(trajectory)
    report = replay(trajectory, service, PromptCounter(EstimateTokenizer()), observe=checker)
    return trajectory, service, report


def test_it_is_package_data_in_the_projects_own_format() -> None:
    data = json.loads(sample_session.OUTPUT.read_text(encoding="utf-8"))
    assert data["format"] == OWN_FORMAT and data["filesystem_id"] == sample_session.FILESYSTEM
    (trajectory,) = load(sample_session.OUTPUT)
    assert trajectory.workspace == "/workspace" and len(trajectory.calls) >= 15
    users = [m for m in trajectory.messages if m["role"] == "user"]
    assert len(users) >= 4  # several turns, so `selfctx show --at-turn` has something to show


def test_what_the_agent_read_is_the_shipped_sample_tree() -> None:
    (trajectory,) = load(sample_session.OUTPUT)
    calls = {c["id"]: c for m in trajectory.messages for c in m.get("tool_calls") or ()}
    cats = 0
    for call_id, output in trajectory.tool_outputs().items():
        arguments = json.loads(calls[call_id]["function"]["arguments"])
        command = arguments.get("command", "")
        if isinstance(command, str) and command.startswith("cat "):
            text, code = unwrap_output(output)
            assert code == 0
            assert text == (SAMPLE_TREE / command[4:]).read_text(encoding="utf-8")
            cats += 1
    assert cats >= 2


def test_it_replays_with_every_check_and_the_same_context_tool_answers() -> None:
    trajectory, _, report = _replayed()
    outputs = trajectory.tool_outputs()
    answers = report.context_answers
    assert [a.rsplit(" is ", 1)[1].split(" (")[0] for _, a in answers] == [
        "pinned", "not pinned", "not active", "not active", "active"
    ]  # fmt: skip
    for call_id, answer in answers:
        assert answer == outputs[call_id]


def test_the_edit_is_a_new_version_of_the_file() -> None:
    _, service, report = _replayed()
    sid = report.session_id
    parser_id = service.object_id_for("/workspace/calc/parser.py")
    parser = service.object(sid, parser_id)
    assert isinstance(parser, FileObject)
    original = (SAMPLE_TREE / "calc" / "parser.py").read_text(encoding="utf-8")
    fixed = original.replace(
        "right = self.expression(PRECEDENCE[op])", "right = self.expression(PRECEDENCE[op] + 1)"
    )
    assert parser.content == fixed
    versions = service.history(parser_id)
    # seen in `find` output (a stub), viewed, edited
    assert [v.document["content"] for v in versions] == [None, original, fixed]


def test_the_module_regenerates_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sample_session, "OUTPUT", tmp_path / "session.json")
    assert sample_session.main() == 0
    fresh = json.loads((tmp_path / "session.json").read_text(encoding="utf-8"))
    shipped_file = Path(sample_session.__file__).with_name("sample_session.json")
    shipped = json.loads(shipped_file.read_text(encoding="utf-8"))
    # the same conversation; only test timings ("Ran 4 tests in 0.005s") may differ
    assert [m["role"] for m in fresh["messages"]] == [m["role"] for m in shipped["messages"]]
    for new, old in zip(fresh["messages"], shipped["messages"], strict=True):
        if "Ran " not in (old.get("content") or ""):
            assert new == old
