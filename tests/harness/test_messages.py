"""Parsing provider message lists into the neutral :class:`Message`: exact values for both
formats, and the fingerprints the ingestion cursor relies on."""

from __future__ import annotations

import json

import pytest

from selfctx.adapters.harness.messages import (
    MAX_MESSAGE_CHARS,
    MalformedMessage,
    Message,
    parse_anthropic,
    parse_messages,
    parse_openai,
)
from selfctx.domain.chat import ToolCallRequest, thaw_json
from selfctx.domain.errors import InvalidInput
from tests.harness.conftest import (
    a_assistant,
    a_result,
    a_use,
    a_user,
    bash,
    o_assistant,
    o_call,
    o_system,
    o_tool,
    o_user,
)

# -- OpenAI ---------------------------------------------------------------------------------


def test_openai_roles_and_values() -> None:
    messages = parse_openai(
        [
            o_system("You are a helpful assistant."),
            {"role": "developer", "content": "Be brief."},
            o_user("Fix the bug in separable.py"),
            o_assistant("Let me look.", bash("call_1", "cat separable.py")),
            o_tool("call_1", "<returncode>0</returncode>\n<output>\nx\n</output>"),
            o_assistant("Done."),
        ]
    )
    assert messages == [
        Message("system", "You are a helpful assistant."),
        Message("system", "Be brief."),
        Message("user", "Fix the bug in separable.py"),
        Message(
            "assistant",
            "Let me look.",
            (ToolCallRequest("call_1", "bash", {"command": "cat separable.py"}),),
        ),
        Message(
            "tool",
            "<returncode>0</returncode>\n<output>\nx\n</output>",
            tool_call_id="call_1",
        ),
        Message("assistant", "Done."),
    ]
    assert [m.index for m in messages] == [0, 1, 2, 3, 4, 5]


def test_openai_content_parts_and_null_content() -> None:
    messages = parse_openai(
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look at "},
                    {"type": "image_url", "image_url": {"url": "data:..."}},
                    {"type": "text", "text": "this"},
                ],
            },
            {"role": "assistant", "content": None, "tool_calls": [bash("c1", "ls")]},
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "a.py"}]},
            {"role": "assistant", "content": None},
        ]
    )
    assert [(m.role, m.text) for m in messages] == [
        ("user", "look at this"),
        ("assistant", ""),
        ("tool", "a.py"),
        ("assistant", ""),
    ]
    assert messages[0].images == (
        {"type": "image", "url": "data:..."},
    )  # images are kept (decision 0038)


def test_openai_parallel_calls_keep_their_order() -> None:
    [message] = parse_openai(
        [o_assistant("", bash("c1", "ls"), o_call("c2", "str_replace_editor", path="/a"))]
    )
    assert [(c.id, c.name) for c in message.tool_calls] == [
        ("c1", "bash"),
        ("c2", "str_replace_editor"),
    ]


def test_openai_arguments_forms() -> None:
    def args(raw: object) -> object:
        call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": raw}}
        [message] = parse_openai([{"role": "assistant", "content": "", "tool_calls": [call]}])
        return dict(message.tool_calls[0].arguments)

    assert args('{"command": "ls"}') == {"command": "ls"}
    assert args({"command": "ls"}) == {"command": "ls"}  # already an object
    assert args("") == {}
    assert args("  ") == {}
    assert thaw_json(args("[1, 2]")) == {"_value": [1, 2]}
    # Models emit broken JSON: the call is kept, with the raw text.
    assert args('{"command": "ls"') == {
        "_raw": '{"command": "ls"',
        "_error": "invalid JSON: Expecting ',' delimiter",
    }


def test_openai_missing_arguments_is_an_empty_object() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "submit"}}
    [message] = parse_openai([{"role": "assistant", "content": "", "tool_calls": [call]}])
    assert message.tool_calls == (ToolCallRequest("c", "submit", {}),)


@pytest.mark.parametrize(
    "raw", ['{"n": NaN}', '{"n": Infinity}', '{"n": -Infinity}', '{"n": 1e400}']
)
def test_openai_arguments_json_cannot_carry_are_kept_raw(raw: str) -> None:
    # NaN, Infinity and overflowing numbers are not JSON a store can keep exactly: kept as the
    # model's raw text, like any other broken JSON, so the call is still recorded.
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": raw}}
    [message] = parse_openai([{"role": "assistant", "content": "", "tool_calls": [call]}])
    arguments = dict(message.tool_calls[0].arguments)
    assert arguments["_raw"] == raw
    assert set(arguments) == {"_raw", "_error"}


def test_openai_integer_too_large_for_a_double_is_kept_raw() -> None:
    raw = '{"n": 123456789012345678901234567890}'
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": raw}}
    [message] = parse_openai([{"role": "assistant", "content": "", "tool_calls": [call]}])
    assert dict(message.tool_calls[0].arguments)["_raw"] == raw


def test_openai_system_given_separately() -> None:
    messages = parse_messages([o_user("hi")], "openai", system="prompt")
    assert messages == [Message("system", "prompt"), Message("user", "hi")]
    # the harness's own list keeps its indices
    assert [m.index for m in messages] == [-1, 0]


def test_openai_system_given_separately_names_the_right_index() -> None:
    with pytest.raises(MalformedMessage) as caught:
        parse_messages([o_user("hi"), {"role": "bogus"}], "openai", system="prompt")
    assert caught.value.index == 1


def test_unknown_format() -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_messages([], "gemini")
    assert caught.value.kind == "invalid_input"


# -- Anthropic ------------------------------------------------------------------------------


def test_anthropic_blocks_and_values() -> None:
    messages = parse_anthropic(
        [
            a_user("Fix the bug"),
            a_assistant(
                {"type": "thinking", "thinking": "hmm", "signature": "s"},
                "Let me look.",
                a_use("toolu_1", "bash", command="cat a.py"),
                a_use("toolu_2", "str_replace_editor", command="view", path="/testbed/a.py"),
            ),
            a_user(
                a_result("toolu_1", "x = 1\n"),
                a_result("toolu_2", [{"type": "text", "text": "view"}], is_error=True),
                "and now?",
            ),
        ],
        system="You are helpful.",
    )
    assert messages == [
        Message("system", "You are helpful."),
        Message("user", "Fix the bug"),
        Message(
            "assistant",
            "Let me look.",
            (
                ToolCallRequest("toolu_1", "bash", {"command": "cat a.py"}),
                ToolCallRequest(
                    "toolu_2", "str_replace_editor", {"command": "view", "path": "/testbed/a.py"}
                ),
            ),
            reasoning=({"type": "thinking", "thinking": "hmm", "signature": "s"},),
        ),
        Message("tool", "x = 1\n", tool_call_id="toolu_1"),
        Message("tool", "view", tool_call_id="toolu_2", is_error=True),
        Message("user", "and now?"),
    ]
    assert [m.index for m in messages] == [-1, 0, 1, 2, 2, 2]


def test_anthropic_system_as_blocks_and_absent() -> None:
    system = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert parse_anthropic([], system=system) == [Message("system", "ab")]
    assert parse_anthropic([a_user("hi")]) == [Message("user", "hi")]


def test_anthropic_text_blocks_join_with_newlines_images_are_kept_documents_marked() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "QQ"}}
    [message] = parse_anthropic([a_user("one", image, "two", {"type": "document"})])
    assert message == Message(
        "user",
        "one\ntwo\n[document]",
        images=({"type": "image", "url": "data:image/png;base64,QQ"},),
    )
    with pytest.raises(MalformedMessage, match="source"):
        parse_anthropic([a_user("one", {"type": "image", "source": {}})])


def test_anthropic_user_message_of_only_results_has_no_user_part() -> None:
    messages = parse_anthropic(
        [a_assistant(a_use("t1", command="ls")), a_user(a_result("t1", "a.py"))]
    )
    assert [m.role for m in messages] == ["assistant", "tool"]


def test_anthropic_assistant_with_no_blocks_is_an_empty_message() -> None:
    assert parse_anthropic([{"role": "assistant", "content": []}]) == [Message("assistant", "")]


def test_anthropic_tool_result_without_content() -> None:
    messages = parse_anthropic(
        [
            a_assistant(a_use("t1")),
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]},
        ]
    )
    assert messages[1] == Message("tool", "", tool_call_id="t1")


def test_parse_messages_dispatches_anthropic() -> None:
    assert parse_messages([a_user("x")], "anthropic", system="s") == [
        Message("system", "s"),
        Message("user", "x"),
    ]


# -- fingerprints -------------------------------------------------------------------------


def test_tool_messages_are_identified_by_call_id_only() -> None:
    a = Message("tool", "one output", tool_call_id="c1", is_error=False)
    b = Message("tool", "another output", tool_call_id="c1", is_error=True)
    assert a.fingerprint == b.fingerprint
    assert a.fingerprint != Message("tool", "one output", tool_call_id="c2").fingerprint


def test_other_messages_by_role_text_and_calls() -> None:
    calls = (ToolCallRequest("c1", "bash", {"command": "ls"}),)
    other_args = (ToolCallRequest("c1", "bash", {"command": "pwd"}),)
    base = Message("assistant", "text", calls)
    assert base.fingerprint == Message("assistant", "text", calls, index=3).fingerprint
    assert base.fingerprint != Message("assistant", "text", other_args).fingerprint
    assert base.fingerprint != Message("assistant", "text").fingerprint
    assert base.fingerprint != Message("assistant", "other", calls).fingerprint
    assert Message("user", "x").fingerprint != Message("assistant", "x").fingerprint
    assert Message("user", "x").fingerprint == Message("user", "x", index=7).fingerprint


def test_fingerprint_of_a_lone_surrogate() -> None:
    assert len(Message("user", "bad \ud800 text").fingerprint) == 32


def test_index_is_not_part_of_equality() -> None:
    assert Message("user", "x", index=1) == Message("user", "x", index=2)


# -- sizes ------------------------------------------------------------------------------------


def test_content_at_the_limit_is_accepted() -> None:
    [message] = parse_openai([o_user("x" * MAX_MESSAGE_CHARS)])
    assert len(message.text) == MAX_MESSAGE_CHARS


def test_anthropic_blocks_together_over_the_limit() -> None:
    half = "x" * (MAX_MESSAGE_CHARS // 2 + 1)
    with pytest.raises(MalformedMessage) as caught:
        parse_anthropic([a_user("ok"), a_user(half, half)])
    assert caught.value.index == 1


def test_openai_parts_together_over_the_limit() -> None:
    half = {"type": "text", "text": "x" * (MAX_MESSAGE_CHARS // 2 + 1)}
    with pytest.raises(MalformedMessage) as caught:
        parse_openai([{"role": "user", "content": [half, half]}])
    assert caught.value.index == 0


def test_malformed_message_carries_index_and_reason() -> None:
    error = MalformedMessage(3, "unknown role 'robot'")
    assert (error.index, error.kind, str(error)) == (
        3,
        "malformed_message",
        "message 3: unknown role 'robot'",
    )
    assert isinstance(error, InvalidInput)


def test_arguments_objects_survive_a_json_round_trip() -> None:
    args = {"command": "view", "path": "/a", "view_range": [1, 20], "nested": {"k": None}}
    [message] = parse_openai([o_assistant("", o_call("c", "str_replace_editor", **args))])
    plain = thaw_json(message.tool_calls[0].arguments)
    assert json.dumps(plain) == json.dumps(args)  # the client's order too (decision 0132)
