"""Malformed message lists: a typed ``MalformedMessage`` naming the message index, and the session
exactly as it was (its state, its log position, the store's latest transaction, its chat) —
even when valid new messages come before the bad one."""

from __future__ import annotations

from typing import Any

import pytest

from selfctx.adapters.harness import MalformedMessage
from selfctx.adapters.harness.messages import MAX_MESSAGE_CHARS
from tests.harness.conftest import (
    a_assistant,
    a_result,
    a_use,
    a_user,
    bash,
    make_service,
    mini,
    o_assistant,
    o_call,
    o_system,
    o_tool,
    o_user,
    open_harness,
    snapshot,
)

OPENAI_GOOD = [
    o_system("You are a careful engineer."),
    o_user("Fix the bug."),
    o_assistant("Reading.", bash("c1", "cat a.py")),
    o_tool("c1", mini("x = 1\n")),
]
ANTHROPIC_GOOD = [
    a_user("Fix the bug."),
    a_assistant("Reading.", a_use("t1", "bash", command="cat a.py")),
    a_user(a_result("t1", "x = 1\n")),
]


def call_with(**function: Any) -> dict[str, Any]:
    return {"id": "c9", "type": "function", "function": function}


def assistant_calls(*calls: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": list(calls)}


BIG = "x" * (MAX_MESSAGE_CHARS + 1)

# Each case: the bad messages appended after the good list and one valid new user message; the
# error must name the index of the first bad message.
OPENAI_CASES: dict[str, list[Any]] = {
    "not an object": ["just a string"],
    "unknown role": [{"role": "robot", "content": "beep"}],
    "missing role": [{"content": "who am I"}],
    "function role": [{"role": "function", "name": "f", "content": "x"}],
    "non-string content": [{"role": "user", "content": 42}],
    "object content": [{"role": "user", "content": {"text": "x"}}],
    "untyped part": [{"role": "user", "content": [{"text": "x"}]}],
    "non-string text part": [{"role": "user", "content": [{"type": "text", "text": 1}]}],
    "huge content": [o_user(BIG)],
    "huge tool output": [o_assistant("", bash("c9", "cat big")), o_tool("c9", BIG)],
    "tool_calls not a list": [{"role": "assistant", "content": "", "tool_calls": {"id": "c9"}}],
    "call not an object": [assistant_calls("c9")],
    "call without function": [assistant_calls({"id": "c9", "type": "function"})],
    "call without id": [assistant_calls({"type": "function", "function": {"name": "bash"}})],
    "call with empty id": [assistant_calls({"id": "", "function": {"name": "bash"}})],
    "call with numeric id": [assistant_calls({"id": 7, "function": {"name": "bash"}})],
    "call with huge id": [assistant_calls({"id": "c" * 257, "function": {"name": "bash"}})],
    "call without name": [assistant_calls(call_with(arguments="{}"))],
    "arguments of a bad type": [assistant_calls(call_with(name="bash", arguments=5))],
    "arguments object with NaN": [
        assistant_calls(call_with(name="bash", arguments={"n": float("nan")}))
    ],
    "arguments object with a set": [assistant_calls(call_with(name="bash", arguments={"s": {1}}))],
    "duplicate ids in one message": [o_assistant("", bash("c9", "ls"), bash("c9", "pwd"))],
    "tool message without id": [{"role": "tool", "content": "x"}],
    "result with no call": [o_tool("nobody", "x")],
    "result before its call": [o_tool("c9", "x"), o_assistant("", bash("c9", "ls"))],
    "second result in one list": [
        o_assistant("", bash("c9", "ls")),
        o_tool("c9", "a"),
        o_tool("c9", "b"),
    ],
    "second result for a recorded call": [o_tool("c1", "again")],
}
# Where the error is reported when it is not the first bad message.
OPENAI_OFFSET = {
    "huge tool output": 1,
    "second result in one list": 2,
}


@pytest.mark.parametrize("case", list(OPENAI_CASES))
def test_openai_malformed_lists_change_nothing(case: str) -> None:
    h = open_harness()
    h.ingest(OPENAI_GOOD)
    before = snapshot(h.service)
    bad = [*OPENAI_GOOD, o_user("a valid new message first"), *OPENAI_CASES[case]]
    with pytest.raises(MalformedMessage) as caught:
        h.ingest(bad)
    assert caught.value.kind == "malformed_message"
    assert caught.value.index == len(OPENAI_GOOD) + 1 + OPENAI_OFFSET.get(case, 0)
    assert f"message {caught.value.index}" in str(caught.value)
    assert snapshot(h.service) == before
    # The cursor is where it was: the good list and its continuation ingest normally.
    assert h.ingest(OPENAI_GOOD).consumed == 0
    assert h.ingest([*OPENAI_GOOD, o_user("a valid new message first")]).consumed == 1


ANTHROPIC_CASES: dict[str, list[Any]] = {
    "system role with integer content": [{"role": "system", "content": 3}],
    "tool role": [{"role": "tool", "content": "x"}],
    "integer content": [{"role": "user", "content": 3}],
    "null content": [{"role": "assistant", "content": None}],
    "untyped block": [{"role": "user", "content": [{"text": "x"}]}],
    "block not an object": [{"role": "user", "content": ["x"]}],
    "tool_use in a user message": [a_user(a_use("t9"))],
    "tool_result in an assistant message": [a_assistant(a_result("t1", "x"))],
    "unknown block": [a_assistant({"type": "server_tool_use", "id": "s1"})],
    "input not an object": [a_assistant({"type": "tool_use", "id": "t9", "name": "b", "input": 1})],
    "tool_use without id": [a_assistant({"type": "tool_use", "name": "b", "input": {}})],
    "tool_result without id": [a_user({"type": "tool_result", "content": "x"})],
    "result with no call": [a_user(a_result("nobody", "x"))],
    "second result": [a_user(a_result("t1", "again"))],
    "huge text": [a_user(BIG)],
    "huge result": [a_assistant(a_use("t9")), a_user(a_result("t9", BIG))],
    "non-string text block": [a_user({"type": "text", "text": None})],
    "input with NaN": [a_assistant(a_use("t9", n=float("nan")))],
    "input with an integer no double holds": [a_assistant(a_use("t9", n=2**64 + 1))],
}


@pytest.mark.parametrize("case", list(ANTHROPIC_CASES))
def test_anthropic_malformed_lists_change_nothing(case: str) -> None:
    h = open_harness(fmt="anthropic")
    h.ingest(ANTHROPIC_GOOD, system="prompt")
    before = snapshot(h.service)
    bad = [*ANTHROPIC_GOOD, a_user("a valid new message first"), *ANTHROPIC_CASES[case]]
    with pytest.raises(MalformedMessage) as caught:
        h.ingest(bad, system="prompt")
    assert caught.value.kind == "malformed_message"
    offset = 1 if case == "huge result" else 0
    assert caught.value.index == len(ANTHROPIC_GOOD) + 1 + offset
    assert snapshot(h.service) == before
    assert h.ingest([*ANTHROPIC_GOOD, a_user("next")], system="prompt").consumed == 1


@pytest.mark.parametrize(
    "messages", [None, 7, "a string", {"role": "user", "content": "x"}, ("a", "tuple")]
)
@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_non_list_input_names_index_minus_one(fmt: str, messages: Any) -> None:
    h = open_harness(fmt=fmt)
    before = snapshot(h.service)
    with pytest.raises(MalformedMessage) as caught:
        h.ingest(messages, system="s")
    assert caught.value.index == -1
    assert snapshot(h.service) == before


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_a_bad_separate_system_prompt(fmt: str) -> None:
    h = open_harness(fmt=fmt)
    before = snapshot(h.service)
    with pytest.raises(MalformedMessage) as caught:
        h.ingest([], system=12)
    assert caught.value.index == -1
    assert snapshot(h.service) == before


def test_a_utf8_output_over_the_store_limit_is_refused_before_recording() -> None:
    # Under MAX_MESSAGE_CHARS in characters, over the service's max_output_bytes in UTF-8.
    h = open_harness()
    limit = h.service.settings.max_output_bytes
    emoji = "\U0001f600" * (limit // 4 + 1)
    assert len(emoji) <= MAX_MESSAGE_CHARS
    h.ingest(OPENAI_GOOD)
    before = snapshot(h.service)
    with pytest.raises(MalformedMessage) as caught:
        h.ingest(
            [*OPENAI_GOOD, o_user("first"), o_assistant("", bash("c9", "cat")), o_tool("c9", emoji)]
        )
    assert caught.value.index == 6
    assert snapshot(h.service) == before


def test_broken_json_arguments_are_not_an_error() -> None:
    h = open_harness()
    broken = o_assistant(
        "",
        {
            "id": "c9",
            "type": "function",
            "function": {"name": "bash", "arguments": '{"command": "ls'},
        },
    )
    nan = o_assistant(
        "", {"id": "c8", "type": "function", "function": {"name": "f", "arguments": '{"x": NaN}'}}
    )
    result = h.ingest([o_user("go"), broken, o_tool("c9", "a.py"), nan, o_tool("c8", "ok")])
    assert result.consumed == 5


def test_the_stdio_kind_is_stable() -> None:
    assert MalformedMessage.kind == "malformed_message"


def test_refusal_leaves_other_sessions_alone() -> None:
    service = make_service()
    other = open_harness(service, session_id="other")
    other.ingest(OPENAI_GOOD)
    h = open_harness(service)
    theirs = snapshot(service, "other")
    with pytest.raises(MalformedMessage):
        h.ingest([o_user("x"), o_tool("nobody", "y")])
    assert snapshot(service, "other") == theirs


def test_an_arguments_object_with_non_string_keys_is_refused() -> None:
    h = open_harness()
    before = snapshot(h.service)
    with pytest.raises(MalformedMessage) as caught:
        h.ingest([o_user("x"), assistant_calls(call_with(name="f", arguments={1: "a"}))])
    assert caught.value.index == 1
    assert snapshot(h.service) == before


def test_a_call_without_arguments_in_an_odd_wrapper_is_still_parsed() -> None:
    h = open_harness()
    assert (
        h.ingest([o_user("x"), o_assistant("", o_call("c9", "submit")), o_tool("c9", "")]).consumed
        == 3
    )
