"""mini-swe-agent's own agent loop, with its deterministic test models, on a real git repository.

Every command runs for real in a temporary repository (mini-swe-agent's ``LocalEnvironment``);
the agent, its configuration files and its observation templates are mini-swe-agent's own. The
models are wrapped by :class:`ContextModel`, so what they receive is the managed request; a
recording subclass keeps every message list a model received.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.harness.minisweagent import (
    SHELL_TOOLS_PROMPT,
    ContextModel,
    attach,
    context_command,
)
from selfctx.application.policies import policy_by_name
from selfctx.application.service import ContextService
from selfctx.application.settings import Settings
from selfctx.domain.identifiers import toolcall_object_id
from selfctx.domain.objects import FileObject, ToolcallObject

DESIGN_LAYOUT = Settings(policy=policy_by_name("ssot"))
"""These runs check the ssot layout's requests (metadata lines, toolcall_ref lines)."""

CALC = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
TEST = (
    "from calc import add, mul\n\n"
    "assert add(2, 3) == 5, add(2, 3)\n"
    "assert mul(2, 3) == 6\n"
    "print('ok')\n"
)
README = "# calc\n\nTwo functions and a test.   \n"  # trailing spaces: kept byte for byte


@pytest.fixture
def mini(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Any]:
    """mini-swe-agent, imported quietly with its global config in a temporary folder."""
    monkeypatch.setenv("MSWEA_SILENT_STARTUP", "1")
    monkeypatch.setenv("MSWEA_GLOBAL_CONFIG_DIR", str(tmp_path / "mswea-config"))
    yield pytest.importorskip(
        "minisweagent", reason="mini-swe-agent is not installed: pip install -e '.[dev]'"
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A small git repository with a bug in calc.add."""
    root = (tmp_path / "repo").resolve()
    root.mkdir()
    (root / "calc.py").write_text(CALC)
    (root / "test_calc.py").write_text(TEST)
    (root / "README.md").write_text(README)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "calc"]):
        subprocess.run([*git, *args], cwd=root, check=True, capture_output=True)
    return root


def builtin_config(name: str) -> dict[str, Any]:
    import yaml
    from minisweagent.config import builtin_config_dir

    config: dict[str, Any] = yaml.safe_load((builtin_config_dir / name).read_text())
    return config


def recording(model_class: type) -> type:
    """``model_class`` keeping every message list it receives."""

    class Recording(model_class):  # type: ignore[misc]
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.received: list[list[dict[str, Any]]] = []

        def query(self, messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
            self.received.append(json.loads(json.dumps(messages)))
            result: dict[str, Any] = super().query(messages, **kwargs)
            return result

    return Recording


def tc(session_id: str, call_id: str) -> str:
    """The object id of a harness call (decision 0030)."""
    return toolcall_object_id(session_id, call_id, 1)


def active_ids(messages: list[dict[str, Any]]) -> list[str]:
    text = json.dumps(messages)
    return [part.split("\\n", 1)[0] for part in text.split("ACTIVE_CONTENT id=")[1:]]


def run_agent(
    mini: Any, config_name: str, model: Any, repo: Path, service: ContextService, sid: str
) -> tuple[Any, ContextModel, dict[str, Any]]:
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.environments.local import LocalEnvironment

    config = builtin_config(config_name)
    env = LocalEnvironment(cwd=str(repo), **config.get("environment", {}))
    managed, managed_env = attach(model, env, service, sid)
    agent_config = config["agent"] | {"step_limit": 30, "cost_limit": 0}
    # The wrappers' ``config`` is a read-only property (the wrapped object's); mini-swe-agent's
    # protocols declare a plain attribute, which its agent never assigns.
    agent = DefaultAgent(managed, managed_env, **agent_config)  # type: ignore[arg-type]
    result = agent.run("add(2, 3) returns -1. Fix calc.add.")
    managed.sync(agent.messages)  # the last observations, after the final query
    return agent, managed, result


def file_object(service: ContextService, sid: str, path: Path) -> FileObject:
    obj = service.object(sid, service.object_id_for(str(path)))
    assert isinstance(obj, FileObject)
    return obj


def check_objects(service: ContextService, sid: str, results: dict[str, str]) -> None:
    """Every tool call that has a result is a toolcall object holding exactly that result."""
    state = service.state(sid)
    toolcalls = [i for i in state.index if state.kinds[i] == "toolcall"]
    assert sorted(toolcalls) == sorted(toolcall_object_id(sid, i, 1) for i in results)
    for call_id, text in results.items():
        obj = service.object(sid, toolcall_object_id(sid, call_id, 1))
        assert isinstance(obj, ToolcallObject) and obj.content == text


def observation(code: int, output: str) -> str:
    return f"<returncode>{code}</returncode>\n<output>\n{output}</output>"


# -- tool-call mode: mini.yaml, the `mini` command's own configuration -----------------------


def toolcall_outputs(mini: Any, repo: Path, service: ContextService) -> list[dict[str, Any]]:
    from minisweagent.models.test_models import make_toolcall_output

    calc_id = service.object_id_for(str(repo / "calc.py"))
    commands = [
        ("Let me look around.", "ls"),
        ("The implementation.", "cat calc.py"),
        ("A marker.", "echo MARKER-$((40 + 2))"),
        ("Reproduce.", "python3 test_calc.py"),
        ("Fix the operator.", "sed -i 's/a - b/a + b/' calc.py"),
        ("Test again.", "python3 test_calc.py"),
        ("What changed.", "git diff --stat"),
        ("The readme.", "cat README.md"),
        ("I need the marker again.", "activate call_3"),
        ("calc.py is done.", f"deactivate {calc_id}"),
        ("Done.", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
    ]
    outputs = []
    for n, (text, command) in enumerate(commands, start=1):
        call_id = f"call_{n}"
        arguments = json.dumps({"command": command})
        call = {
            "id": call_id,
            "type": "function",
            "function": {"name": "bash", "arguments": arguments},
        }
        outputs.append(
            make_toolcall_output(text, [call], [{"command": command, "tool_call_id": call_id}])
        )
    return outputs


def test_mini_swe_agent_tool_calls_run_on_managed_requests(mini: Any, repo: Path) -> None:
    from minisweagent.models.test_models import DeterministicToolcallModel

    service = build_service(workspace=str(repo), settings=DESIGN_LAYOUT)
    sid = "mini-toolcalls"
    config = builtin_config("mini.yaml")["model"]
    model = recording(DeterministicToolcallModel)(
        outputs=toolcall_outputs(mini, repo, service),
        observation_template=config["observation_template"],  # JSON observations
    )
    agent, managed, result = run_agent(mini, "mini.yaml", model, repo, service, sid)

    assert result["exit_status"] == "Submitted"
    assert managed.requests == len(model.received) == 11
    assert (repo / "calc.py").read_text() == CALC.replace("a - b", "a + b")

    # Every tool call with a result became an object holding the exact output; the submission
    # ended the run before its result was handed over.
    outputs = {
        m["tool_call_id"]: observation(m["extra"]["returncode"], m["extra"]["raw_output"])
        for m in agent.messages
        if m.get("role") == "tool"
    }
    assert sorted(outputs) == sorted(f"call_{n}" for n in range(1, 11))
    check_objects(service, sid, outputs)
    call_4 = service.object(sid, tc(sid, "call_4"))
    assert isinstance(call_4, ToolcallObject)
    assert call_4.status == "fail"  # the test failed before the fix
    assert "MARKER-42" in outputs["call_3"] and '"output"' in agent.messages[7]["content"]

    # Files read with cat were indexed from the real disk content, byte for byte (the JSON
    # observation template is not what was recorded); the edit re-indexed calc.py from disk.
    calc = file_object(service, sid, repo / "calc.py")
    assert calc.content == (repo / "calc.py").read_text()
    versions = [v.document["content"] for v in service.history(calc.id)]
    assert versions == [None, CALC, calc.content]  # the ls stub, the cat, the sed -i
    assert file_object(service, sid, repo / "README.md").content == README
    assert file_object(service, sid, repo / "test_calc.py").file_hash is None  # listed by ls

    # What the model received: managed requests, never mini-swe-agent's raw history.
    for request in model.received:
        assert all(set(m) <= {"role", "content", "tool_calls", "tool_call_id"} for m in request)
        assert request[0]["role"] == "system" and SHELL_TOOLS_PROMPT in request[0]["content"]
    for request in model.received[1:]:  # once there are objects, the metadata pool is listed
        assert request[1]["content"].startswith("Objects in this session")
        assert not any(m["role"] == "tool" and "<returncode>" in m["content"] for m in request)
    calc_id = calc.id
    call_1, call_3 = tc(sid, "call_1"), tc(sid, "call_3")
    assert active_ids(model.received[2]) == [call_1, calc_id]  # the ls; the file, not the cat
    assert call_3 in active_ids(model.received[3]) and "MARKER-42" in json.dumps(model.received[3])
    # After eight calls in the turn, the third has left the window of the last five.
    eighth = json.dumps(model.received[8])
    assert f"toolcall_ref id={call_3} tool=bash status=ok" in eighth
    assert "MARKER-42" not in eighth and call_3 not in active_ids(model.received[8])
    # `activate call_3` (a command the environment answered) brought it back ...
    ninth = model.received[9]
    assert call_3 in active_ids(ninth) and "MARKER-42" in json.dumps(ninth)
    answer = service.object(sid, tc(sid, "call_9")).content or ""
    assert answer.startswith("<returncode>0</returncode>") and call_3 in answer
    # ... and `deactivate <calc.py's id>` collapsed the file.
    assert calc_id in active_ids(model.received[9])
    assert calc_id not in active_ids(model.received[10])
    assert agent.messages[-1]["role"] == "exit"
    assert "context_manager" in agent.serialize()["info"]


# -- text actions: default.yaml, the original mini-swe-agent format ---------------------------


def test_mini_swe_agent_text_actions_run_on_managed_requests(mini: Any, repo: Path) -> None:
    from minisweagent.models.test_models import DeterministicModel, make_output

    service = build_service(workspace=str(repo), settings=DESIGN_LAYOUT)
    sid = "mini-text"
    # Assistant message k is at position 2 + 2k of the history (system, task, then pairs).
    marker_id = f"mswea-{sid}-4-0"
    commands = ["cat calc.py", "echo MARKER-$((6 * 7))", "echo a", "echo b", "echo c"]
    commands += [f"pin {marker_id}", "echo d", "echo e", "cat README.md"]
    commands += ["echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]
    outputs = [
        make_output(f"Next.\n\n```mswea_bash_command\n{c}\n```", [{"command": c}]) for c in commands
    ]
    config = builtin_config("default.yaml")["model"]
    model = recording(DeterministicModel)(
        outputs=outputs,
        observation_template=config["observation_template"],  # strips trailing whitespace
    )
    agent, managed, result = run_agent(mini, "default.yaml", model, repo, service, sid)

    assert result["exit_status"] == "Submitted"
    assert managed.text_actions and managed.requests == len(commands)
    results = {
        f"mswea-{sid}-{2 + 2 * k}-0": observation(
            m["extra"]["returncode"], m["extra"]["raw_output"]
        )
        for k, m in enumerate(agent.messages[3:-1:2])
    }
    assert len(results) == len(commands) - 1
    check_objects(service, sid, results)
    assert file_object(service, sid, repo / "calc.py").content == CALC
    assert file_object(service, sid, repo / "README.md").content == README  # spaces and all

    for request in model.received:
        # Text form: no tool roles, no tool_calls; the command blocks are in the text.
        assert {m["role"] for m in request} <= {"system", "user", "assistant"}
        assert not any("tool_calls" in m for m in request)
    last = model.received[-1]
    refs = [m for m in last if m["content"].startswith("toolcall_ref id=")]
    assert len(refs) == len(commands) - 1
    assert any("```mswea_bash_command\ncat calc.py\n```" in m["content"] for m in last)
    # The marker was pinned while among the last five calls: it never collapsed.
    assert tc(sid, marker_id) in active_ids(last) and "MARKER-42" in json.dumps(last)
    assert tc(sid, f"mswea-{sid}-2-0") not in active_ids(last)  # the cat's: the file is active
    assert tc(sid, f"mswea-{sid}-6-0") not in active_ids(last)  # `echo a` left the window


def test_the_wrapper_resumes_without_recording_twice(mini: Any, repo: Path) -> None:
    """A second process (a new wrapper on the same store) hands over the same history."""
    from minisweagent.models.test_models import DeterministicModel, make_output

    service = build_service(workspace=str(repo), settings=DESIGN_LAYOUT)
    outputs = [make_output("x\n```mswea_bash_command\necho hi\n```", [{"command": "echo hi"}])] * 2
    done = make_output(
        "```mswea_bash_command\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```",
        [{"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}],
    )
    model = DeterministicModel(outputs=[*outputs, done])
    agent, managed, _ = run_agent(mini, "default.yaml", model, repo, service, "again")
    total = managed.session.ingestor.total
    service.close_session("again")
    fresh, _ = attach(DeterministicModel(outputs=[done]), agent.env.env, service, "again")
    assert fresh.session.resumed is not None
    assert fresh.sync(agent.messages).consumed == 0
    assert fresh.session.ingestor.total == total
    assert os.path.samefile(fresh.session.ingestor.cwd, repo)


# -- context commands under every policy -----------------------------------

MARKER_SHOWN = [
    # ssot: the output is active, in a block headed by its id
    re.compile(r"ACTIVE_CONTENT id=(\S+)\n(?:(?!ACTIVE_CONTENT id=).)*?MARKER-42", re.S),
    # inline: the output is in its tool message, labelled with its handle
    re.compile(r"\[(#[0-9]+)\]\n(?:(?!\[#).)*?MARKER-42", re.S),
]


def shown_marker(messages: list[dict[str, Any]]) -> str | None:
    """The id or handle under which the model was shown the marker's output."""
    text = "\n".join(str(m.get("content") or "") for m in messages)
    for pattern in MARKER_SHOWN:
        found = pattern.search(text)
        if found:
            return found[1]
    return None


def scripted(model_class: type) -> type:
    """``model_class`` whose next output names the marker's output as the model was shown it:
    ``{MARKER}`` in it becomes the id or handle found in the messages it receives."""

    class Scripted(model_class):  # type: ignore[misc]
        marker: str | None = None

        def query(self, messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
            self.marker = shown_marker(messages) or self.marker
            upcoming = self.config.outputs[self.current_index + 1]
            if self.marker is not None:
                text = json.dumps(upcoming).replace("{MARKER}", self.marker)
                self.config.outputs[self.current_index + 1] = json.loads(text)
            result: dict[str, Any] = super().query(messages, **kwargs)
            return result

    return Scripted


CONTEXT_STEPS = [
    "echo MARKER-$((6 * 7))",
    "pin {MARKER}",
    "deactivate {MARKER}",
    "activate '{MARKER}'",
    "unpin {MARKER}",
    "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT",
]


@pytest.mark.parametrize("mode", ["text", "toolcalls"])
@pytest.mark.parametrize("policy", ["ssot", "inline", "relevance"])
def test_context_commands_never_reach_the_environment(
    mini: Any, repo: Path, policy: str, mode: str
) -> None:
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models.test_models import (
        DeterministicModel,
        DeterministicToolcallModel,
        make_output,
        make_toolcall_output,
    )

    class RecordingEnvironment(LocalEnvironment):
        ran: list[str] = []

        def execute(self, action: dict[str, Any], cwd: str = "", **kwargs: Any) -> Any:
            type(self).ran = [*type(self).ran, action.get("command", "")]
            return super().execute(action, cwd, **kwargs)

    service = build_service(workspace=str(repo), settings=Settings(policy=policy_by_name(policy)))
    config_name = "default.yaml" if mode == "text" else "mini.yaml"
    config = builtin_config(config_name)
    if mode == "text":
        outputs = [
            make_output(f"Next.\n\n```mswea_bash_command\n{c}\n```", [{"command": c}])
            for c in CONTEXT_STEPS
        ]
        model = scripted(DeterministicModel)(
            outputs=outputs, observation_template=config["model"]["observation_template"]
        )
    else:
        outputs = []
        for n, command in enumerate(CONTEXT_STEPS, start=1):
            call = {
                "id": f"call_{n}",
                "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": command})},
            }
            action = {"command": command, "tool_call_id": f"call_{n}"}
            outputs.append(make_toolcall_output("Next.", [call], [action]))
        model = scripted(DeterministicToolcallModel)(
            outputs=outputs, observation_template=config["model"]["observation_template"]
        )
    env = RecordingEnvironment(cwd=str(repo), **config.get("environment", {}))
    managed, managed_env = attach(model, env, service, f"ctx-{policy}-{mode}")
    agent_config = config["agent"] | {"step_limit": 30, "cost_limit": 0}
    agent = DefaultAgent(managed, managed_env, **agent_config)  # type: ignore[arg-type]
    assert agent.run("Show me the marker.")["exit_status"] == "Submitted"

    assert service.state(managed.session.session_id).policy.name == policy
    # The model named the output as it was shown it: a handle under inline, an id under ssot.
    assert model.marker is not None
    assert model.marker.startswith("tc_" if policy == "ssot" else "#"), model.marker
    # Only the shell commands ran in the environment.
    assert RecordingEnvironment.ran == [CONTEXT_STEPS[0], CONTEXT_STEPS[-1]]
    answers = [
        m["extra"]["raw_output"]
        for m in agent.messages
        if isinstance(m.get("extra"), dict) and "raw_output" in m["extra"]
    ]
    assert [
        m["extra"]["returncode"] for m in agent.messages if "returncode" in (m.get("extra") or {})
    ][1:5] == [0] * 4
    assert "is pinned" in answers[1] and "is not pinned" in answers[4], answers


@pytest.mark.parametrize(
    ("command", "parsed"),
    [
        ("activate #3", ("activate", "#3")),
        ("pin '#12'", ("pin", "#12")),
        ('deactivate "tc_0123abc"', ("deactivate", "tc_0123abc")),
        ("  unpin   tc_x  ", ("unpin", "tc_x")),
        ("activate", ("activate", None)),  # a virtualenv's deactivate/activate never runs
        ("deactivate", ("deactivate", None)),
        ("activate #3 && ls", ("activate", None)),
        ("pin 'unbalanced", ("pin", None)),
        ("source venv/bin/activate", None),
        ("activated_thing --x", None),
        ("echo activate #3", None),
    ],
)
def test_context_commands_are_recognised_in_every_form(
    command: str, parsed: tuple[str, str | None] | None
) -> None:
    assert context_command(command) == parsed


def test_a_context_command_may_name_an_object_by_its_handle() -> None:
    """Under the inline layouts the model sees ``#n`` handles: ``activate #1`` is a context
    command, answered by the session, never run in the shell (where ``#`` starts a comment)."""
    from selfctx.adapters.harness import HarnessSession
    from selfctx.adapters.harness.minisweagent import ContextEnvironment

    class Shell:
        ran: list[str] = []

        def execute(self, action: dict[str, Any], cwd: str = "", **kwargs: Any) -> dict[str, Any]:
            self.ran.append(action["command"])
            return {"output": "", "returncode": 0, "exception_info": ""}

    service = build_service(settings=Settings(policy=policy_by_name("relevance")))
    session = HarnessSession(service, "handles", "openai")
    session.ingest(
        [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "bash", "arguments": '{"command": "echo hi"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "hi\n"},
        ]
    )
    shell = Shell()
    answer = ContextEnvironment(shell, session).execute({"command": "activate #1"})
    assert shell.ran == [] and answer["returncode"] == 0
    assert answer["output"] == "[#1 output of bash (ok)]\nhi\n\n"
