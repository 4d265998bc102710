"""Trajectory import: every recorded session (the project's own, and the development set's when
present) converts to a valid OpenAI stream with the calls it is known to hold; each format's
rules on small hand-made examples."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from selfctx.adapters.harness.messages import parse_openai
from selfctx.adapters.harness.trajectories import (
    Trajectory,
    TrajectoryError,
    convert,
    load,
    trajectory_files,
)
from selfctx.adapters.harness.trajectories.model import parts_text
from tests.replay.data import DEV_FILES, FILES, file_params

OWN_CALLS = {"sample_session": 46}
"""Model calls of the project's own recorded sessions."""
# LLM calls per trajectory, from the development set's README.
CALLS = {
    "astropy__astropy-12907": 64,
    "pvlib__pvlib-python-1854": 56,
    "sqlfluff__sqlfluff-2419": 41,
    "pandas-dev__pandas.95280573.pr_53652": 37,
    "pydantic__pydantic.acb0f10f.pr_8316": 22,
    "multi_swe_bench_ponyc#1": 23,
    "multi_swe_bench_ponyc#2": 33,
    "multi_swe_bench_ponyc#3": 49,
    "resolver_pr_viewer#1": 4,
    "resolver_pr_viewer#2": 22,
    # mini-swe-agent-extra: 2,172 calls in all (the README: 38-124 each)
    "astropy__astropy-14995": 63,
    "django__django-11099": 42,
    "django__django-11283": 61,
    "django__django-11583": 72,
    "django__django-11742": 70,
    "django__django-11848": 90,
    "django__django-11964": 103,
    "django__django-12125": 94,
    "django__django-12286": 77,
    "django__django-12497": 78,
    "django__django-12708": 73,
    "django__django-12908": 97,
    "django__django-13028": 85,
    "django__django-13315": 80,
    "django__django-13448": 87,
    "django__django-13658": 38,
    "django__django-13757": 73,
    "django__django-13933": 53,
    "django__django-14155": 56,
    "django__django-14411": 51,
    "django__django-14608": 68,
    "django__django-14730": 94,
    "django__django-14855": 97,
    "django__django-14999": 63,
    "django__django-15213": 124,
    "django__django-15347": 54,
    "pvlib__pvlib-python-1154": 79,
    "pylint-dev__astroid-1196": 92,
    "pylint-dev__astroid-1978": 58,
}
FORMATS = {
    "mini-swe-agent": "mini-swe-agent",
    "mini-swe-agent-extra": "mini-swe-agent",
    "swe-agent": "swe-agent",
    "openhands": "openhands",
    "cli": "openai-messages",  # the folder of the project's own sessions
}


def _check_stream(trajectory: Trajectory) -> None:
    messages = list(trajectory.messages)
    parse_openai(messages)  # raises MalformedMessage on anything a harness could not send
    allowed = {"role", "content", "tool_calls", "tool_call_id"}
    requested: set[str] = set()
    for message in messages:
        assert set(message) <= allowed, set(message) - allowed
        assert isinstance(message["content"], str | None)
        for call in message.get("tool_calls") or ():
            assert set(call) == {"id", "type", "function"}
            assert isinstance(call["function"]["arguments"], str)
            requested.add(call["id"])
        if message["role"] == "tool":
            assert message["tool_call_id"] in requested
    for call in trajectory.calls:
        assert messages[call.position]["role"] == "assistant"
        assert trajectory.prompt(call) == messages[: call.position]
    assert trajectory.workspace.startswith("/") and trajectory.cwd.startswith("/")


@pytest.mark.parametrize("path", file_params())
def test_every_file_converts_to_a_valid_stream(path: Path) -> None:
    trajectories = load(path)
    assert trajectories
    for trajectory in trajectories:
        _check_stream(trajectory)
        known = (CALLS | OWN_CALLS).get(trajectory.name)
        # a session the README did not list (a set that grew) holds calls all the same
        assert len(trajectory.calls) == known if known is not None else trajectory.calls
        assert trajectory.format.startswith(FORMATS[path.parent.name])


def test_every_recorded_session_is_known() -> None:
    names = {t.name for f in FILES for t in load(f)}
    # the project's own sessions always load, and every listed session whose file is present:
    # none is dropped on the way (a set with more sessions than listed is fine)
    present = {f.name.split(".")[0] for f in DEV_FILES}
    listed = {name for name in CALLS if name.split("#")[0].split(".")[0] in present}
    assert set(OWN_CALLS) | listed <= names, (set(OWN_CALLS) | listed) - names


def test_recorded_prompt_tokens_where_the_harness_kept_them() -> None:
    for file in FILES:
        for t in load(file):
            if t.format == "mini-swe-agent" or t.format == "openhands":
                assert all(c.recorded_prompt_tokens for c in t.calls), t.name
            elif t.format == "swe-agent":
                assert t.recorded_total_prompt_tokens and t.recorded_prompt_tokens, t.name
            else:
                assert t.recorded_prompt_tokens is None, t.name


def test_trajectory_files_skips_other_files(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    for name in ("a/x.traj.json", "a/y.traj", "z.jsonl", "README.md", ".hidden.json", "w.json"):
        (tmp_path / name).write_text("{}")
    found = [p.relative_to(tmp_path).as_posix() for p in trajectory_files(tmp_path)]
    assert found == ["a/x.traj.json", "a/y.traj", "w.json", "z.jsonl"]


# -- mini-swe-agent ------------------------------------------------------------------------


def _call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_mini_swe_agent_drops_extras_and_exit() -> None:
    data = {
        "trajectory_format": "mini-swe-agent-1.1",
        "info": {"config": {"environment": {"cwd": "/repo"}}},
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "task"},
            {
                "role": "assistant",
                "content": "look",
                "tool_calls": [{"index": 0, **_call("c1", "bash", '{"command": "ls"}')}],
                "function_call": None,
                "provider_specific_fields": None,
                "extra": {"response": {"usage": {"prompt_tokens": 321}}},
            },
            {
                "role": "tool",
                "tool_call_id": "c1",
                "content": "<returncode>0</returncode>\n<output>\na.py\n</output>",
                "extra": {"raw_output": "a.py\n"},
            },
            {"role": "exit", "content": "done", "extra": {"exit_status": "Submitted"}},
        ],
    }
    t = convert(data, "m")
    assert t.format == "mini-swe-agent" and t.workspace == t.cwd == "/repo"
    assert [m["role"] for m in t.messages] == ["system", "user", "assistant", "tool"]
    assert t.messages[2] == {
        "role": "assistant",
        "content": "look",
        "tool_calls": [_call("c1", "bash", '{"command": "ls"}')],
    }
    assert [(c.position, c.recorded_prompt_tokens) for c in t.calls] == [(2, 321)]
    assert t.recorded_prompt_tokens == 321


# -- SWE-agent ------------------------------------------------------------------------------


def _swe(tool_content: Any) -> dict[str, Any]:
    return {
        "trajectory": [{"state": {"working_dir": "/testbed"}}],
        "info": {"model_stats": {"tokens_sent": 999, "api_calls": 1}},
        "history": [
            {"role": "system", "content": "sys", "agent": "main", "message_type": "system_prompt"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<uploaded_files>\n/testbed\n</uploaded_files>"}
                ],
                "agent": "main",
                "message_type": "observation",
            },
            {
                "role": "assistant",
                "content": "view it",
                "thought": "view it",
                "action": "str_replace_editor view /testbed/a.py",
                "tool_calls": [_call("toolu_1", "str_replace_editor", '{"command": "view"}')],
                "message_type": "action",
            },
            {
                "role": "tool",
                "content": tool_content,
                "tool_call_ids": ["toolu_1"],
                "cache_control": {"type": "ephemeral"},
                "message_type": "observation",
            },
        ],
    }


@pytest.mark.parametrize(
    "content",
    [
        [{"type": "text", "text": "OBSERVATION:\nhello"}],
        "[{'type': 'text', 'text': 'OBSERVATION:\\nhello'}]",  # str(list), as some versions save
    ],
    ids=["parts", "python-repr"],
)
def test_swe_agent_tool_messages(content: Any) -> None:
    t = convert(_swe(content), "s")
    assert t.format == "swe-agent" and t.workspace == "/testbed" and t.cwd == "/testbed"
    assert t.messages[1]["content"] == "<uploaded_files>\n/testbed\n</uploaded_files>"
    assert t.messages[3] == {
        "role": "tool",
        "tool_call_id": "toolu_1",
        "content": "OBSERVATION:\nhello",
    }
    assert t.recorded_prompt_tokens == 999 and t.calls[0].recorded_prompt_tokens is None


def test_parts_text_never_evaluates_code() -> None:
    hostile = "[{'type': 'text', 'text': __import__('os').getcwd()}]"
    assert parts_text(hostile) == hostile  # not a literal: kept as the text it is
    assert parts_text("[{'type': 'text'") == "[{'type': 'text'"  # not even Python
    assert parts_text("[1, 2]") == "[1, 2]"
    assert parts_text([{"type": "text", "text": "a"}, {"type": "image_url"}]) == "a[image_url]"
    assert parts_text(None) == ""
    with pytest.raises(TypeError):
        parts_text(42)


# -- OpenHands ------------------------------------------------------------------------------


def _response(rid: str, text: str, calls: list[dict[str, Any]], tokens: int) -> dict[str, Any]:
    return {
        "id": rid,
        "choices": [{"message": {"role": "assistant", "content": text, "tool_calls": calls}}],
        "usage": {"prompt_tokens": tokens},
    }


def _meta(call_id: str, response: dict[str, Any]) -> dict[str, Any]:
    return {"tool_call_id": call_id, "function_name": "x", "model_response": response}


def test_openhands_current_schema() -> None:
    both = _response(
        "r1",
        "two things",
        [
            _call("t1", "execute_bash", '{"command": "ls"}'),
            _call("t2", "str_replace_editor", '{"command": "view", "path": "/w/a"}'),
        ],
        100,
    )
    history = [
        {"id": 0, "source": "agent", "action": "system", "args": {"content": "sys", "tools": []}},
        {
            "id": 1,
            "source": "user",
            "action": "message",
            "args": {"content": "<uploaded_files>\n/workspace/p\n</uploaded_files> fix it"},
        },
        {"id": 2, "source": "user", "action": "recall", "args": {}},
        {"id": 3, "source": "environment", "observation": "recall", "cause": 2, "content": "x"},
        {"id": 4, "source": "agent", "action": "run", "tool_call_metadata": _meta("t1", both)},
        {"id": 5, "source": "agent", "action": "read", "tool_call_metadata": _meta("t2", both)},
        {
            "id": 6,
            "observation": "run",
            "cause": 4,
            "content": "a.py",
            "extras": {
                "metadata": {
                    "exit_code": 0,
                    "working_dir": "/workspace/p",
                    "py_interpreter_path": "",
                    "prefix": "",
                    "suffix": "\n[The command completed with exit code 0.]",
                }
            },
            "tool_call_metadata": _meta("t1", both),
        },
        {
            "id": 7,
            "observation": "read",
            "cause": 5,
            "content": "A",
            "tool_call_metadata": _meta("t2", both),
        },
        {"id": 8, "source": "agent", "observation": "error", "content": "bad call"},
        {"id": 9, "source": "agent", "action": "message", "args": {"content": "done"}},
    ]
    data = {
        "history": history,
        "metadata": {"llm_config": {"max_message_chars": 30000}},
        "metrics": {"accumulated_token_usage": {"prompt_tokens": 150}},
    }
    t = convert(data, "oh")
    assert t.format == "openhands"
    assert t.workspace == t.cwd == "/workspace/p"
    assert [m["role"] for m in t.messages] == [
        "system", "user", "assistant", "tool", "tool", "user", "assistant"
    ]  # fmt: skip
    assert [c["id"] for c in t.messages[2]["tool_calls"]] == [
        "t1",
        "t2",
    ]  # one message per response
    assert t.messages[3]["content"] == (
        "a.py\n[The command completed with exit code 0.]\n"
        "[Current working directory: /workspace/p]\n[Command finished with exit code 0]"
    )
    assert t.messages[5]["content"] == "bad call\n[Error occurred in processing last action]"
    assert [(c.position, c.recorded_prompt_tokens) for c in t.calls] == [(2, 100), (6, None)]
    assert t.recorded_total_prompt_tokens == 150
    assert any("recall" in n for n in t.notes) and any("error" in n for n in t.notes)
    _check_stream(t)


def test_openhands_cuts_long_observations_like_openhands() -> None:
    response = _response("r", "", [_call("t", "execute_bash", "{}")], 1)
    data = {
        "metadata": json.dumps({"llm_config": {"max_message_chars": 10}}),
        "history": [
            {"action": "run", "source": "agent", "tool_call_metadata": _meta("t", response)},
            {
                "observation": "read",
                "content": "0123456789abcdef",
                "tool_call_metadata": _meta("t", response),
            },
        ],
    }
    t = convert(data, "oh")
    assert t.messages[-1]["content"] == (
        "01234\n[... Observation truncated due to length ...]\nbcdef"
    )


def test_openhands_resolver_schema_synthesises_calls() -> None:
    data = {
        "metrics": json.dumps({"accumulated_cost": 0.1, "costs": [0.1]}),
        "history": [
            {"action": "message", "content": "fix the issue in /workspace"},
            {"action": "run", "command": "ls", "thought": "look"},
            {"observation": "run", "content": "a.ts", "command": "ls", "exit_code": 0},
            {"action": "run_ipython", "code": "print(1)", "thought": "py"},
            {"observation": "run_ipython", "content": "1"},
            {"action": "finish", "thought": "done", "outputs": {}},
        ],
    }
    t = convert(data, "r")
    assert t.format == "openhands-resolver" and t.workspace == "/workspace"
    assert t.messages[1]["tool_calls"] == [_call("call_001", "execute_bash", '{"command": "ls"}')]
    assert t.messages[3]["tool_calls"] == [
        _call("call_002", "execute_ipython_cell", '{"code": "print(1)"}')
    ]
    assert t.messages[2] == {"role": "tool", "tool_call_id": "call_001", "content": "a.ts"}
    assert t.messages[-1] == {"role": "assistant", "content": "done"}
    assert len(t.calls) == 3 and t.recorded_prompt_tokens is None
    _check_stream(t)


# -- the project's own format, prefixes, errors ------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("{not json", "invalid JSON"),
        ('{"something": "else"}', "not a mini-swe-agent"),
        ("[1, 2]", "not a JSON object"),  # a bare list is a message list: of objects
        ('{"format": "openai-messages", "messages": []}', "workspace"),
        ('{"trajectory_format": "mini-swe-agent-1.1", "messages": [{"role": "robot"}]}', "robot"),
    ],
)
def test_bad_files_raise_a_typed_error_naming_the_file(
    tmp_path: Path, text: str, reason: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(TrajectoryError) as caught:
        load(path)
    assert caught.value.kind == "invalid_trajectory"
    assert str(path) in str(caught.value) and reason in str(caught.value)


def test_reused_call_ids_are_renamed_results_following() -> None:
    data = {
        "format": "openai-messages",
        "workspace": "/w",
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "", "tool_calls": [_call("t1", "bash", "{}")]},
            {"role": "tool", "tool_call_id": "t1", "content": "first"},
            {"role": "assistant", "content": "", "tool_calls": [_call("t1", "bash", "{}")]},
            {"role": "tool", "tool_call_id": "t1", "content": "second"},
        ],
    }
    t = convert(data, "own")
    assert t.tool_outputs() == {"t1": "first", "t1#2": "second"}
    assert any("renamed" in n for n in t.notes)
    _check_stream(t)
