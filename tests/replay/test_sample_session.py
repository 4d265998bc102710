"""The example session the project ships (``make demo`` replays it): it is what it claims to be —
mini-swe-agent's own loop over the shipped sample project, real outputs, more than 40 model calls
— and on it the default policy sends clearly fewer tokens than the harness, recall beside it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.cli import sample_session
from selfctx.adapters.harness.recognise import unwrap_output
from selfctx.adapters.harness.replay import ReplayReport, replay, replay_filesystem_id
from selfctx.adapters.harness.tokens import PromptCounter
from selfctx.adapters.harness.trajectories import OWN_FORMAT, Trajectory, load
from selfctx.adapters.memory import MemoryStore
from selfctx.adapters.tokenizer import EstimateTokenizer
from selfctx.application.policies import DEFAULT_POLICY, policy_by_name
from selfctx.application.service import ContextService
from selfctx.domain.identifiers import toolcall_object_id
from selfctx.domain.objects import FileObject, ToolcallObject
from tests.replay.checks import CallChecker

SAMPLE_TREE = sample_session.SAMPLE


def _replayed(policy: str = DEFAULT_POLICY) -> tuple[Trajectory, ContextService, ReplayReport]:
    (trajectory,) = load(sample_session.OUTPUT)
    service = build_service(
        store=MemoryStore(),
        workspace=str(SAMPLE_TREE),
        default_filesystem_id=replay_filesystem_id(trajectory),
    )
    checker = CallChecker(trajectory)
    report = replay(
        trajectory,
        service,
        PromptCounter(EstimateTokenizer()),
        observe=checker,
        policy=policy_by_name(policy),
    )
    return trajectory, service, report


def _commands(trajectory: Trajectory) -> dict[str, str]:
    return {
        c["id"]: json.loads(c["function"]["arguments"])["command"]
        for m in trajectory.messages
        for c in m.get("tool_calls") or ()
    }


def test_it_is_package_data_in_the_projects_own_format() -> None:
    data = json.loads(sample_session.OUTPUT.read_text(encoding="utf-8"))
    assert data["format"] == OWN_FORMAT and data["filesystem_id"] == sample_session.FILESYSTEM
    assert sample_session.OUTPUT.stat().st_size < 200_000
    (trajectory,) = load(sample_session.OUTPUT)
    assert trajectory.workspace == "/workspace" and len(trajectory.calls) >= 40
    # mini-swe-agent's own prompts, with the machine fixed, and its tool-call format
    system, task = trajectory.messages[0]["content"], trajectory.messages[1]["content"]
    assert "Context management" in system and "activate ID" in system
    assert task.startswith("Please solve this issue: ") and sample_session.TASK in task
    assert "Linux 6.1.0 #1 SMP x86_64" in task
    assert {c["function"]["name"] for c in _calls(trajectory)} == {"bash"}
    assert not any("selfctx-sample-" in json.dumps(m) for m in trajectory.messages)


def _calls(trajectory: Trajectory) -> list[dict[str, Any]]:
    return [c for m in trajectory.messages for c in m.get("tool_calls") or ()]


def test_what_the_agent_read_is_the_shipped_sample_tree() -> None:
    (trajectory,) = load(sample_session.OUTPUT)
    commands = _commands(trajectory)
    cats = 0
    for call_id, output in trajectory.tool_outputs().items():
        command = commands[call_id]
        if command.startswith("cat ") and "<<" not in command:
            text, code = unwrap_output(output)
            assert code == 0
            assert text == (SAMPLE_TREE / command[4:]).read_text(encoding="utf-8")
            cats += 1
    assert cats >= 4


def test_it_has_partial_views_edits_tests_a_traceback_and_a_context_tool() -> None:
    (trajectory,) = load(sample_session.OUTPUT)
    commands = list(_commands(trajectory).values())
    outputs = list(trajectory.tool_outputs().values())
    assert any(c.startswith("sed -n") for c in commands)
    assert any(c.startswith("nl -ba") for c in commands)
    assert any(c.startswith(("head -n", "tail -n")) for c in commands)
    assert any(c.startswith("grep -n") for c in commands)
    assert any(c.startswith("sed -i") for c in commands)
    assert any("unittest" in c for c in commands)
    assert any("Traceback (most recent call last)" in o and "KeyError" in o for o in outputs)
    assert [c for c in commands if c.startswith("activate ")] == ["activate #12"]


def test_it_replays_with_every_check_under_every_policy() -> None:
    for policy in ("ssot", "inline", "relevance"):
        trajectory, _, report = _replayed(policy)
        assert len(report.calls) == len(trajectory.calls)
        # the context tool ran on the replayed session: the first crash came back
        ((call_id, answer),) = report.context_answers
        assert call_id == "call_037" and answer.startswith("<returncode>0</returncode>\n")
        if policy == "ssot":  # the output is in the active section, the answer says so
            call_003 = toolcall_object_id(report.session_id, "call_003", 1)  # decision 0030
            assert f"tool call {call_003} (bash) is active" in answer
        else:  # the inline layouts append it where the agent asked
            assert "[#12 output of bash (fail)]" in answer and "KeyError: 'mean'" in answer


def test_the_default_policy_is_clearly_cheaper_and_keeps_what_is_used() -> None:
    _, service, report = _replayed()
    assert report.managed_tokens < 0.85 * report.naive_tokens
    assert report.peak_managed < 0.85 * report.peak_naive
    assert report.recall.used >= 3 and report.recall.recall == 1.0
    # a view whose file was edited since collapsed once answered, and says so in its line
    context = service.assemble(report.session_id).to_text()
    assert "changed its file since]" in context
    # everything collapsed is still retrievable byte for byte (checked at every call above),
    # and the file the agent read before editing it is one object with that content
    functions = service.object(
        report.session_id, service.object_id_for("/workspace/calc/functions.py")
    )
    assert isinstance(functions, FileObject)
    assert functions.content == (SAMPLE_TREE / "calc" / "functions.py").read_text()
    parser = service.object(report.session_id, toolcall_object_id(report.session_id, "call_018", 1))
    assert isinstance(parser, ToolcallObject) and parser.file_views
    assert [v.to_json()["ranges"] for v in parser.file_views] == [[[60, 70]]]


@pytest.mark.slow
def test_the_module_regenerates_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sample_session, "OUTPUT", tmp_path / "session.json")
    monkeypatch.setenv("MSWEA_GLOBAL_CONFIG_DIR", str(tmp_path / "mswea-config"))
    monkeypatch.setenv("MSWEA_SILENT_STARTUP", "1")
    assert sample_session.main() == 0
    fresh = json.loads((tmp_path / "session.json").read_text(encoding="utf-8"))
    shipped_file = Path(sample_session.__file__).with_name("sample_session.json")
    shipped = json.loads(shipped_file.read_text(encoding="utf-8"))
    # the same conversation; only test timings ("Ran 4 tests in 0.005s") may differ
    assert [m["role"] for m in fresh["messages"]] == [m["role"] for m in shipped["messages"]]
    for new, old in zip(fresh["messages"], shipped["messages"], strict=True):
        if "Ran " not in (old.get("content") or ""):
            assert new == old
    assert os.path.getsize(tmp_path / "session.json") == pytest.approx(
        shipped_file.stat().st_size, rel=0.01
    )
