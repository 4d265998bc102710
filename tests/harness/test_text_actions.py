"""Text-action harnesses (adapters.harness.text_actions): observations that arrive as user
messages are recognised, recorded and collapsed like any tool output, the harness's own message
shapes are kept, and both recorded formats replay."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from selfctx.adapters.bench.context import replay_service_factory, run_context_bench
from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.harness import HarnessSession
from selfctx.adapters.harness.recall import used_lines
from selfctx.adapters.harness.replay import replay
from selfctx.adapters.harness.text_actions import observations, to_text, to_tool_calls
from selfctx.adapters.harness.tokens import PromptCounter
from selfctx.adapters.harness.trajectories import load
from selfctx.adapters.memory import MemoryStore
from selfctx.adapters.tokenizer import EstimateTokenizer
from selfctx.application.policies import policy_by_name
from selfctx.application.settings import Settings
from tests.harness.conftest import CONTAINER, CWD, ROOTS

BODY = "".join(
    f"def function_number_{n}(a, b):\n    return first_argument * second_argument + {n}\n"
    for n in range(60)
)
USED = "    return first_argument * second_argument + 30"
SWE_PROMPT = "\n(Open file: {f})\n(Current directory: /repo)\nbash-$"


def mini_text() -> list[dict[str, Any]]:
    """mini-swe-agent in text mode, as its own test trajectories are: a bare message list."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Please solve this issue: fix calc."},
    ]
    for command, output in [
        ("cat src/calc.py", BODY),
        ("pip install -r requirements.txt", "Collecting x\n" * 40),
        ("python3 -m pytest", "1 failed\n"),
        ("git status", "clean\n"),
    ]:
        messages += [
            {
                "role": "assistant",
                "content": f"THOUGHT: next.\n\n```mswea_bash_command\n{command}\n```",
            },
            {"role": "user", "content": f"<returncode>0</returncode>\n<output>\n{output}</output>"},
        ]
    messages.append({"role": "assistant", "content": f"This line:\n{USED}\nis the one to change."})
    return messages


def swe_agent_0() -> dict[str, Any]:
    """A SWE-agent 0.x trajectory: text actions in ``history``, the state as JSON text."""
    window = "[File: /repo/src/fields.py (200 lines total)]\n(10 more lines above)\n" + "".join(
        f"{n}:    value_{n} = compute({n})\n" for n in range(11, 111)
    )
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "SETTING: an autonomous programmer.", "agent": "primary"},
        {
            "role": "user",
            "content": "ISSUE: fix it" + SWE_PROMPT.format(f="n/a"),
            "agent": "primary",
        },
    ]
    steps = []
    for command, output in [
        ("ls -F", "README.md\nsrc/\n"),
        ("open src/fields.py 60", window),
        ("pip install -e .", "Installing\n" * 50),
    ]:
        observation = output + SWE_PROMPT.format(f="/repo/src/fields.py")
        history += [
            {"role": "assistant", "content": f"Next.\n<command>\n{command}\n</command>",
             "thought": "Next.", "action": command, "agent": "primary"},
            {"role": "user", "content": observation, "agent": "primary"},
        ]  # fmt: skip
        steps.append(
            {"action": command, "observation": observation, "state": '{"working_dir": "/repo"}'}
        )
    history += [
        {
            "role": "assistant",
            "content": "Done.\n<command>\nsubmit\n</command>",
            "agent": "primary",
        },
        {"role": "user", "content": "a sub-agent's own conversation", "agent": "subroutine"},
    ]
    return {"environment": "swe_main", "trajectory": steps, "history": history, "info": {}}


def test_observations_are_recognised_by_their_shape() -> None:
    found = observations(mini_text())
    assert [o.position for o in found] == [3, 5, 7, 9]
    assert [o.command for o in found] == [
        "cat src/calc.py",
        "pip install -r requirements.txt",
        "python3 -m pytest",
        "git status",
    ]
    history = swe_agent_0()["history"]
    assert [o.command for o in observations(history)] == [
        "ls -F",
        "open src/fields.py 60",
        "pip install -e .",
    ]


@pytest.mark.parametrize(
    "messages",
    [
        # a chat harness suggesting a command, and the user answering in words
        [
            {"role": "user", "content": "how do I run the tests?"},
            {"role": "assistant", "content": "Run:\n\n```bash\npytest -q\n```"},
            {"role": "user", "content": "thanks, now fix the failing one"},
        ],
        # two commands in one message: not one action
        [
            {"role": "assistant", "content": "```bash\nls\n```\n\n```bash\npwd\n```"},
            {"role": "user", "content": "<returncode>0</returncode>\n<output>\nx\n</output>"},
        ],
    ],
)
def test_a_chat_that_is_not_a_text_action_harness_is_left_alone(messages: Any) -> None:
    assert observations(messages) == []
    converted, made = to_tool_calls(messages)
    assert converted == messages and not made


def test_the_conversion_and_back_keep_the_harness_shapes() -> None:
    messages = mini_text()
    converted, made = to_tool_calls(messages)
    assert [m["role"] for m in converted].count("tool") == 4
    assert all(len(m.get("tool_calls") or ()) <= 1 for m in converted)
    assert to_tool_calls(messages)[0] == converted  # the same list, the same ids
    assert to_text(converted, made) == messages


def test_a_text_mode_session_collapses_its_observations_and_keeps_its_shapes() -> None:
    service = build_service(
        store=MemoryStore(),
        default_filesystem_id=CONTAINER,
        settings=Settings(policy=policy_by_name("relevance")),
    )
    h = HarnessSession(service, "s", "openai", cwd=CWD, roots=ROOTS)
    messages = mini_text()[:-1]
    for end in range(4, len(messages) + 1, 2):  # a request at every model call
        h.ingest(messages[:end])
        request = h.request()["messages"]
    assert [m["role"] for m in request] == [m["role"] for m in messages]
    assert not any(m.get("tool_calls") for m in request)
    pip = request[5]["content"]
    assert pip.startswith("[#") and "collapsed: bash ok" in pip  # answered once, shows no file
    assert BODY in request[3]["content"]  # the file the agent works on stays


def test_a_bare_message_list_and_a_swe_agent_0_trajectory_replay(tmp_path: Path) -> None:
    bare = tmp_path / "mini.traj.json"
    bare.write_text(json.dumps(mini_text()))
    old = tmp_path / "old.traj"
    old.write_text(json.dumps(swe_agent_0()))
    tokenizer = EstimateTokenizer()
    make = replay_service_factory(build_service, tokenizer)
    (mini,) = load(bare)
    (swe,) = load(old)
    assert (mini.format, swe.format, swe.cwd) == ("message-list", "swe-agent-0", "/repo")
    assert "a sub-agent's own conversation" not in json.dumps(swe.messages)
    # a line copied from an observation is a used line
    used = used_lines(mini.messages, [c.position for c in mini.calls], mini.observation_positions())
    assert used[-1] == (USED.strip(),)
    for trajectory in (mini, swe):
        report = replay(
            trajectory,
            make(trajectory),
            PromptCounter(tokenizer),
            policy=policy_by_name("relevance"),
        )
        assert len(report.calls) == len(trajectory.calls)
    result = run_context_bench(
        [mini, swe], make, tokenizer, {"relevance": policy_by_name("relevance")}
    )
    assert (
        result["total"]["relevance"]["retrievable"]
        == result["total"]["relevance"]["collapsed_outputs"]
        > 0
    )
    assert result["total"]["relevance"]["recall"] == 1.0


def test_swe_agent_0_file_windows_are_views() -> None:
    from selfctx.adapters.harness.recognise import FileLines, recognise

    window = swe_agent_0()["history"][5]["content"]
    assert recognise("bash", {"command": "open src/fields.py 60"}, window, "/repo") == [
        FileLines("/repo/src/fields.py", ((11, 110),))
    ]


def test_aider_run_outputs_are_collapsed_in_aiders_own_framing() -> None:
    service = build_service(
        store=MemoryStore(), settings=Settings(policy=policy_by_name("relevance"))
    )
    h = HarnessSession(service, "s", "openai", cwd="/w", roots=["/w"])
    output = "".join(f"test_{n} PASSED\n" for n in range(80))
    run = (
        f"Fix what fails.\n\nI ran this command:\n\npytest -q\n\nAnd got this output:\n\n{output}\n"
    )
    messages = [
        {"role": "system", "content": "Act as an expert software developer."},
        {"role": "user", "content": "Add a test."},
        {"role": "assistant", "content": "Added."},
        {"role": "user", "content": run},
    ]
    h.ingest(messages)
    request = h.request()["messages"]
    assert [m["role"] for m in request] == ["system", "user", "assistant", "user"]
    assert request[3]["content"].startswith("Fix what fails.\n\nI ran this command:\n\npytest -q")
    assert output in request[3]["content"]  # not answered yet: shown in full
    second = "I ran this command:\n\ngit status\n\nAnd got this output:\n\nclean\n\n"
    messages += [
        {"role": "assistant", "content": "All pass; nothing to fix."},
        {"role": "user", "content": second},
    ]
    h.ingest(messages)
    request = h.request()["messages"]
    assert [m["role"] for m in request] == [m["role"] for m in messages]
    assert request[5]["content"].startswith("I ran this command:\n\ngit status")
    run_shown = request[3]["content"]
    assert output not in run_shown and "collapsed: bash ok" in run_shown
    assert run_shown.startswith("Fix what fails.\n\nI ran this command:\n\npytest -q\n\n")
