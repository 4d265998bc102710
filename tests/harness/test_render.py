"""Rendering the assembled context as provider requests: exact requests for small contexts, valid
requests for tricky chats in both formats, and the validators rejecting hand-made bad requests."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from selfctx.adapters.harness import HarnessSession
from selfctx.adapters.harness.render import (
    ACTIVE_HEADER,
    METADATA_HEADER,
    InvalidRequest,
    to_anthropic,
    to_openai,
    validate_anthropic,
    validate_openai,
)
from selfctx.domain.chat import ToolCallRequest
from selfctx.domain.rendering import ActiveBlock, AssembledContext, RenderedMessage
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
    tc,
)

CALL = ToolCallRequest("c1", "bash", {"command": "ls"})
REF = "toolcall_ref id=c1 tool=bash status=ok"


def context(*chat: RenderedMessage, active: bool = True) -> AssembledContext:
    return AssembledContext(
        system_prompt="You are helpful.",
        metadata=("id=c1 type=toolcall tool=bash status=ok",),
        chat=chat,
        active=(ActiveBlock("c1", "a.py\n"),) if active else (),
    )


SIMPLE = context(
    RenderedMessage("user", "List the files."),
    RenderedMessage("assistant", "", (CALL,)),
    RenderedMessage("tool", REF, toolcall_id="c1"),
)
METADATA = f"{METADATA_HEADER}\nid=c1 type=toolcall tool=bash status=ok"
ACTIVE = f"{ACTIVE_HEADER}\n\nACTIVE_CONTENT id=c1\na.py\n"


def test_openai_exact() -> None:
    assert to_openai(SIMPLE) == {
        "messages": [
            {"role": "system", "content": "You are helpful."},
            {"role": "system", "content": METADATA},
            {"role": "user", "content": "List the files."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "bash", "arguments": '{"command": "ls"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": REF},
            {"role": "user", "content": ACTIVE},
        ]
    }


def test_anthropic_exact() -> None:
    assert to_anthropic(SIMPLE) == {
        "system": [
            {"type": "text", "text": "You are helpful."},
            {"type": "text", "text": METADATA, "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "List the files."}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "c1", "name": "bash", "input": {"command": "ls"}}
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "c1",
                        "content": REF,
                        "cache_control": {"type": "ephemeral"},
                    },
                    {"type": "text", "text": ACTIVE},
                ],
            },
        ],
    }
    without = to_anthropic(SIMPLE, cache_control=False)
    assert "cache_control" not in str(without)


def test_empty_context() -> None:
    empty = AssembledContext(system_prompt="", metadata=(), chat=(), active=())
    assert to_openai(empty) == {"messages": [{"role": "user", "content": "(session start)"}]}
    request = to_anthropic(empty, cache_control=False)
    assert request == {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "(session start)"}]}],
    }
    validate_openai(to_openai(empty))
    validate_anthropic(request)


@pytest.mark.parametrize("policy", ["ssot", "inline"])
@pytest.mark.parametrize("prompt", ["", "  \n"])
def test_no_system_prompt_no_empty_system_message(policy: str, prompt: str) -> None:
    """A request without a system prompt carries no empty system message."""
    h = open_harness(make_service(policy), system_prompt=prompt)
    h.ingest([o_user("hi"), o_assistant("", bash("c1", "ls")), o_tool("c1", mini("a.py\n"))])
    openai, anthropic = both(h)
    systems = [m["content"] for m in openai["messages"] if m["role"] == "system"]
    assert all(text.strip() for text in systems), systems
    assert all(b["text"].strip() for b in anthropic.get("system", [])), anthropic.get("system")
    if policy == "ssot":  # the metadata pool is the one system text
        assert [t.split("\n")[0] for t in systems] == [METADATA_HEADER]
        assert [b["text"] for b in anthropic["system"]] == systems


def test_raw_arguments_are_given_back_as_the_model_wrote_them() -> None:
    raw = ToolCallRequest("c1", "bash", {"_raw": '{"command": "ls', "_error": "invalid JSON"})
    ctx = context(
        RenderedMessage("assistant", "", (raw,)),
        RenderedMessage("tool", REF, toolcall_id="c1"),
        active=False,
    )
    call = to_openai(ctx)["messages"][2]["tool_calls"][0]
    assert call["function"]["arguments"] == '{"command": "ls'


def test_a_call_without_a_result_gets_a_placeholder() -> None:
    ctx = context(RenderedMessage("user", "go"), RenderedMessage("assistant", "", (CALL,)))
    request = to_openai(ctx)
    assert request["messages"][4] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": "toolcall_ref id=c1 (no result was recorded for this tool call)",
    }
    validate_openai(request)
    validate_anthropic(to_anthropic(ctx))


def test_a_result_whose_call_was_cut_is_left_out() -> None:
    # A budget cut can drop an assistant message and keep its result (a user message stood
    # between them): the orphan must not reach the provider.
    ctx = context(
        RenderedMessage("user", "[context] 2 earlier messages left out"),
        RenderedMessage("tool", REF, toolcall_id="c1"),
        RenderedMessage("user", "next"),
    )
    assert [m["role"] for m in to_openai(ctx)["messages"]] == [
        "system",
        "system",
        "user",
        "user",
        "user",
    ]
    validate_openai(to_openai(ctx))
    validate_anthropic(to_anthropic(ctx))


# -- tricky chats through a real session, valid in both formats ------------------------------


def both(h: HarnessSession) -> tuple[dict[str, Any], dict[str, Any]]:
    ctx = h.service.assemble(h.session_id)
    openai, anthropic = to_openai(ctx), to_anthropic(ctx)
    validate_openai(openai)
    validate_anthropic(anthropic)
    return openai, anthropic


def roles(request: dict[str, Any]) -> list[str]:
    return [m["role"] for m in request["messages"]]


def blocks(request: dict[str, Any]) -> list[list[str]]:
    return [[b["type"] for b in m["content"]] for m in request["messages"]]


def test_parallel_calls_with_results_in_odd_order() -> None:
    h = open_harness()
    h.ingest(
        [
            o_system("sys"),
            o_user("go"),
            o_assistant("Two at once.", bash("c1", "ls"), bash("c2", "pwd"), bash("c3", "whoami")),
            o_tool("c3", mini("root\n")),
            o_tool("c1", mini("a.py\n")),
            o_tool("c2", mini("/testbed\n")),
        ]
    )
    openai, anthropic = both(h)
    assert [m.get("tool_call_id") for m in openai["messages"] if m["role"] == "tool"] == [
        tc("c1"),
        tc("c2"),
        tc("c3"),
    ]
    assert blocks(anthropic)[2][:3] == ["tool_result"] * 3
    assert [b["tool_use_id"] for b in anthropic["messages"][2]["content"][:3]] == [
        tc("c1"),
        tc("c2"),
        tc("c3"),
    ]


def test_a_user_message_between_a_call_and_its_result() -> None:
    h = open_harness()
    h.ingest(
        [
            o_user("go"),
            o_assistant("", bash("c1", "sleep 100")),
            o_user("stop that"),
            o_tool("c1", mini("interrupted\n", 130)),
        ]
    )
    openai, anthropic = both(h)
    assert roles(openai)[2:5] == ["assistant", "tool", "user"]  # after the metadata and "go"
    assert blocks(anthropic)[-1][:2] == ["tool_result", "text"]


def test_assistant_messages_with_no_text_and_consecutive_assistants() -> None:
    h = open_harness()
    h.ingest(
        [
            o_user("go"),
            o_assistant(None, bash("c1", "ls")),
            o_tool("c1", mini("a.py\n")),
            o_assistant(""),
            o_assistant("thinking aloud"),
            o_assistant("and more", bash("c2", "pwd")),
            o_tool("c2", mini("/\n")),
            o_assistant(None),
        ]
    )
    openai, anthropic = both(h)
    assistants = [m for m in openai["messages"] if m["role"] == "assistant"]
    assert [m["content"] for m in assistants] == [None, "", "thinking aloud", "and more", ""]
    # Anthropic: empty messages vanish, consecutive assistants merge into one message.
    assert roles(anthropic) == ["user", "assistant", "user", "assistant", "user"]
    assert blocks(anthropic)[3] == ["text", "text", "tool_use"]


def test_a_chat_starting_with_an_assistant_message() -> None:
    h = open_harness(fmt="anthropic")
    h.ingest([a_assistant("Hello! What shall we do?"), a_user("fix it")])
    openai, anthropic = both(h)
    assert roles(openai) == ["assistant", "user"]  # no system prompt, no objects: no system
    assert anthropic["messages"][0] == {
        "role": "user",
        "content": [{"type": "text", "text": "(session start)"}],
    }


def test_a_chat_ending_with_an_assistant_message_and_no_active_content() -> None:
    h = open_harness()
    h.ingest([o_user("hi"), o_assistant("hello")])
    _, anthropic = both(h)
    assert roles(anthropic) == ["user", "assistant"]


def test_fail_statuses_become_is_error() -> None:
    h = open_harness(fmt="anthropic")
    h.ingest(
        [
            a_user("go"),
            a_assistant(a_use("t1", command="false"), a_use("t2", command="true")),
            a_user(a_result("t1", "boom", is_error=True), a_result("t2", "fine")),
        ]
    )
    _, anthropic = both(h)
    results = {
        b["tool_use_id"]: b
        for b in anthropic["messages"][2]["content"]
        if b["type"] == "tool_result"
    }
    assert results[tc("t1")]["is_error"] is True
    assert "is_error" not in results[tc("t2")]


def test_a_mini_swe_agent_failure_is_an_error_result() -> None:
    h = open_harness()
    h.ingest([o_user("go"), o_assistant("", bash("c1", "false")), o_tool("c1", mini("", 1))])
    _, anthropic = both(h)
    assert anthropic["messages"][2]["content"][0]["is_error"] is True


def test_an_empty_user_message() -> None:
    h = open_harness()
    h.ingest([o_user(""), o_assistant("ok"), o_user("")])
    openai, anthropic = both(h)
    assert roles(openai) == ["user", "assistant", "user"]
    assert roles(anthropic) == ["user", "assistant"]


def test_whitespace_only_text_is_not_a_block() -> None:
    # Anthropic refuses text blocks without non-whitespace text.
    h = open_harness()
    h.ingest(
        [o_user("go"), o_assistant("  \n", bash("c1", "ls")), o_tool("c1", mini("")), o_user(" ")]
    )
    _, anthropic = both(h)
    assert blocks(anthropic)[1] == ["tool_use"]


def test_a_final_assistant_message_ends_without_whitespace() -> None:
    # Anthropic refuses a final assistant message whose content ends with whitespace.
    h = open_harness()
    h.ingest([o_user("hi"), o_assistant("Hello.\n\n")])
    openai, anthropic = both(h)
    assert anthropic["messages"][-1]["content"][-1]["text"] == "Hello."
    assert openai["messages"][-1]["content"] == "Hello.\n\n"  # OpenAI takes it as it was


def test_a_whitespace_system_prompt() -> None:
    h = open_harness(system_prompt="  ")
    h.ingest([o_user("hi")])
    openai, anthropic = both(h)
    assert "system" not in anthropic
    assert [m["role"] for m in openai["messages"]] == ["user"]


def test_the_active_content_is_last_in_both_formats() -> None:
    h = open_harness()
    h.ingest(
        [o_user("read"), o_assistant("", bash("c1", "cat a.py")), o_tool("c1", mini("x = 1\n"))]
    )
    openai, anthropic = both(h)
    assert openai["messages"][-1]["role"] == "user"
    assert openai["messages"][-1]["content"].startswith(ACTIVE_HEADER)
    assert "x = 1\n" in openai["messages"][-1]["content"]
    last = anthropic["messages"][-1]["content"]
    assert [b["type"] for b in last] == ["tool_result", "text"]
    assert last[-1]["text"].startswith(ACTIVE_HEADER)


def test_context_tool_calls_render_like_any_other() -> None:
    h = open_harness()
    h.ingest([o_user("read"), o_assistant("", bash("c1", "cat a.py")), o_tool("c1", mini("x\n"))])
    answer = h.handle("deactivate", {"id": "c1"})
    h.ingest(
        [
            o_user("read"),
            o_assistant("", bash("c1", "cat a.py")),
            o_tool("c1", mini("x\n")),
            o_assistant("", o_call("c2", "deactivate", id="c1")),
            o_tool("c2", answer.message),
        ]
    )
    both(h)


def test_tool_schemas_in_both_formats() -> None:
    h = open_harness()
    names = [t["function"]["name"] for t in h.tools()]
    assert names == ["activate", "deactivate", "pin", "unpin", "search"]
    a = open_harness(make_service(), fmt="anthropic")
    assert [t["name"] for t in a.tools()] == names
    assert [t["input_schema"]["required"] for t in a.tools()] == [["id"]] * 4 + [["query"]]


# -- the validators themselves ------------------------------------------------------------------


def good_openai() -> dict[str, Any]:
    return to_openai(SIMPLE)


def good_anthropic() -> dict[str, Any]:
    return to_anthropic(SIMPLE)


def test_the_good_requests_validate() -> None:
    validate_openai(good_openai())
    validate_anthropic(good_anthropic())


def _openai_bad() -> dict[str, Any]:
    def edit(f: Any) -> dict[str, Any]:
        request = copy.deepcopy(good_openai())
        f(request["messages"])
        return request

    call = {"id": "c2", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    return {
        "no messages key": {},
        "messages not a list": {"messages": "hi"},
        "no messages": {"messages": []},
        "message not an object": edit(lambda m: m.insert(2, "hi")),
        "unknown role": edit(lambda m: m.insert(2, {"role": "robot", "content": "x"})),
        "missing role": edit(lambda m: m.insert(2, {"content": "x"})),
        "user content not a string": edit(lambda m: m[2].update(content=5)),
        "user content null": edit(lambda m: m[2].update(content=None)),
        "tool content not a string": edit(lambda m: m[4].update(content=["x"])),
        "result before its call": edit(lambda m: m.insert(3, m.pop(4))),
        "result with no call": edit(
            lambda m: m.append({"role": "tool", "tool_call_id": "zz", "content": "x"})
        ),
        "unanswered call": edit(lambda m: m.pop(4)),
        "call answered after a user message": edit(
            lambda m: m.insert(4, {"role": "user", "content": "x"})
        ),
        "duplicate ids in a message": edit(
            lambda m: m[3]["tool_calls"].append(dict(m[3]["tool_calls"][0]))
        ),
        "duplicate ids across messages": edit(
            lambda m: m.extend([copy.deepcopy(m[3]), copy.deepcopy(m[4])])
        ),
        "tool_calls not a list": edit(lambda m: m[3].update(tool_calls={"id": "c1"})),
        "tool_calls null": edit(lambda m: m[3].update(tool_calls=None)),
        "call without id": edit(lambda m: m[3]["tool_calls"][0].pop("id")),
        "call without function": edit(lambda m: m[3]["tool_calls"][0].pop("function")),
        "call without a name": edit(lambda m: m[3]["tool_calls"][0]["function"].pop("name")),
        "arguments not a string": edit(
            lambda m: m[3]["tool_calls"][0]["function"].update(arguments={})
        ),
        "tool message without id": edit(lambda m: m[4].pop("tool_call_id")),
        "a second result": edit(lambda m: m.insert(5, dict(m[4]))),
        "extra call answered by nobody": edit(lambda m: m[3]["tool_calls"].append(call)),
    }


@pytest.mark.parametrize("case", list(_openai_bad()))
def test_validate_openai_rejects(case: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        validate_openai(_openai_bad()[case])
    assert caught.value.kind == "invalid_provider_request"


def _anthropic_bad() -> dict[str, Any]:
    def edit(f: Any) -> dict[str, Any]:
        request = copy.deepcopy(good_anthropic())
        f(request)
        return request

    def ms(r: dict[str, Any]) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = r["messages"]
        return messages

    use = {"type": "tool_use", "id": "c1", "name": "bash", "input": {}}
    return {
        "no messages key": {"system": []},
        "messages not a list": {"messages": {}},
        "no messages": {"messages": []},
        "first from the assistant": edit(lambda r: ms(r).pop(0)),
        # A string where a message object belongs, on purpose.
        "message not an object": edit(lambda r: ms(r).insert(1, "x")),  # type: ignore[arg-type]
        "system role in messages": edit(
            lambda r: ms(r).insert(0, {"role": "system", "content": "x"})
        ),
        "unknown role": edit(lambda r: ms(r)[0].update(role="robot")),
        "missing role": edit(lambda r: ms(r)[0].pop("role")),
        "roles do not alternate": edit(lambda r: ms(r).insert(1, copy.deepcopy(ms(r)[0]))),
        "empty content": edit(lambda r: ms(r)[0].update(content=[])),
        "empty string content": edit(lambda r: ms(r)[0].update(content="")),
        "content not a list": edit(lambda r: ms(r)[0].update(content=5)),
        "block not an object": edit(lambda r: ms(r)[0]["content"].append("x")),
        "untyped block": edit(lambda r: ms(r)[0]["content"].append({"text": "x"})),
        "empty text block": edit(
            lambda r: ms(r)[0]["content"].append({"type": "text", "text": ""})
        ),
        "text not a string": edit(lambda r: ms(r)[0]["content"][0].update(text=None)),
        "tool_use in a user message": edit(
            lambda r: ms(r)[0]["content"].append(dict(use, id="c9"))
        ),
        "tool_result in an assistant message": edit(
            lambda r: ms(r)[1]["content"].insert(
                0, {"type": "tool_result", "tool_use_id": "c1", "content": "x"}
            )
        ),
        "tool_result not first": edit(lambda r: ms(r)[2]["content"].reverse()),
        "unanswered tool_use": edit(lambda r: ms(r)[2]["content"].pop(0)),
        "result for no call": edit(lambda r: ms(r)[2]["content"][0].update(tool_use_id="zz")),
        "a result twice": edit(
            lambda r: ms(r)[2]["content"].insert(0, dict(ms(r)[2]["content"][0]))
        ),
        "duplicate tool_use ids in a message": edit(
            lambda r: ms(r)[1]["content"].append(dict(use))
        ),
        "duplicate tool_use ids across messages": edit(
            lambda r: ms(r).extend([copy.deepcopy(ms(r)[1]), copy.deepcopy(ms(r)[2])])
        ),
        "tool_use without id": edit(lambda r: ms(r)[1]["content"][0].pop("id")),
        "tool_use input not an object": edit(lambda r: ms(r)[1]["content"][0].update(input="x")),
        "tool_result without id": edit(lambda r: ms(r)[2]["content"][0].pop("tool_use_id")),
        "last tool_use unanswered": edit(lambda r: ms(r).pop()),
        "final assistant ends with whitespace": {
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [{"type": "text", "text": "Hello.\n"}]},
            ]
        },
        "system not text blocks": edit(lambda r: r.update(system=[{"type": "image"}])),
        "system empty text": edit(lambda r: r.update(system=[{"type": "text", "text": ""}])),
        "system of another type": edit(lambda r: r.update(system=5)),
    }


@pytest.mark.parametrize("case", list(_anthropic_bad()))
def test_validate_anthropic_rejects(case: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        validate_anthropic(_anthropic_bad()[case])
    assert caught.value.kind == "invalid_provider_request"


def test_validate_anthropic_accepts_string_content_and_a_string_system() -> None:
    validate_anthropic(
        {
            "system": "be brief",
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"},
            ],
        }
    )


# -- the context tools' handler ---------------------------------------------------------------


def test_context_tools_answer_and_act() -> None:
    h = open_harness()
    h.ingest(
        [o_user("go"), o_assistant("", bash("c1", "pytest")), o_tool("c1", mini("1 passed\n"))]
    )
    c1 = tc("c1")
    assert c1 in h.service.state("s1").active
    answer = h.handle("deactivate", {"id": c1})  # the id the model is shown
    assert answer.ok and c1 not in h.service.state("s1").active
    assert h.handle("activate", {"id": "c1"}).ok  # the harness's id of the call maps to it too
    assert c1 in h.service.state("s1").active
    assert h.handle("pin", {"id": c1}).ok
    assert c1 in h.service.state("s1").pinned
    assert h.handle("unpin", {"id": "c1"}).ok
    assert c1 not in h.service.state("s1").pinned


@pytest.mark.parametrize(
    ("name", "arguments", "says"),
    [
        ("activate", {"id": "nope"}, "activate nope:"),
        ("activate", {}, "activate needs an 'id' argument"),
        ("pin", {"id": ""}, "pin needs an 'id' argument"),
        ("unpin", {"id": 5}, "unpin needs an 'id' argument"),
        ("deactivate", "not a mapping", "deactivate needs an 'id' argument"),
        ("forget", {"id": "c1"}, "unknown tool 'forget'"),
    ],
)
def test_context_tool_refusals_are_answers_and_change_nothing(
    name: str, arguments: Any, says: str
) -> None:
    h = open_harness()
    h.ingest([o_user("go")])
    before = h.service.state("s1"), h.service.log_position("s1")
    answer = h.handle(name, arguments)
    assert not answer.ok
    assert answer.message.startswith(says), answer.message
    assert (h.service.state("s1"), h.service.log_position("s1")) == before
