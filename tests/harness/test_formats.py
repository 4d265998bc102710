"""Thinking blocks carried with their signatures, images that
are never lost, context tools under a prefix, and the OpenAI Responses format. Each test fails on
the code before the fix (thinking dropped, images turned into "[image]", no ``tool_prefix``,
"responses" an unknown format)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from selfctx.adapters.harness import HarnessSession
from selfctx.adapters.harness.render import (
    render,
    validate_anthropic,
    validate_openai,
    validate_responses,
)
from selfctx.adapters.memory import MemoryStore
from tests.harness.conftest import (
    CWD,
    ROOTS,
    a_assistant,
    a_result,
    a_use,
    a_user,
    bash,
    make_service,
    o_assistant,
    o_tool,
    o_user,
    tc,
)

PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
DATA_URL = f"data:image/png;base64,{PNG}"
THINKING = {"type": "thinking", "thinking": "The file first.", "signature": "EqQBCgIYAhIM+sig=="}
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFcJ"}


def harness(fmt: str, policy: str = "inline", **kwargs: Any) -> HarnessSession:
    service = kwargs.pop("service", None) or make_service(policy)
    return HarnessSession(service, "s1", fmt, cwd=CWD, roots=ROOTS, **kwargs)


# -- thinking blocks -------------------------------------------------------------------------


def test_thinking_blocks_go_back_with_their_signatures_also_after_a_resume() -> None:
    store = MemoryStore()
    conversation = [
        a_user("Fix the bug."),
        a_assistant(THINKING, REDACTED, "Reading it.", a_use("toolu_1", command="cat a.py")),
        a_user(a_result("toolu_1", "x = 1\n")),
    ]
    first = harness("anthropic", service=make_service("inline", store))
    first.ingest(conversation)
    request = first.request()
    validate_anthropic(request)
    turn = next(m for m in request["messages"] if m["role"] == "assistant")
    assert turn["content"][:2] == [THINKING, REDACTED]  # first, unchanged
    # a second server on the same store resumes the session: the blocks were stored
    again = harness("anthropic", service=make_service("inline", store))
    again.ingest(conversation)
    turn = next(m for m in again.request()["messages"] if m["role"] == "assistant")
    assert turn["content"][:2] == [THINKING, REDACTED]
    # OpenAI has no place for them: they are not sent there
    assert "signature" not in json.dumps(render(again.service.assemble("s1"), "openai"))


# -- images ------------------------------------------------------------------------------------


def _images_in(request: Any) -> list[str]:
    """The image data every image of a request carries, whatever its format."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if value.get("type") == "image_url":
                found.append(value["image_url"]["url"])
            elif value.get("type") == "input_image":
                found.append(value["image_url"])
            elif value.get("type") == "image":
                found.append(value["source"]["data"])
            else:
                for item in value.values():
                    walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(request)
    return [f.removeprefix("data:image/png;base64,") for f in found]


@pytest.mark.parametrize("policy", ["inline", "ssot"])
def test_images_pass_through_every_format_and_come_back_on_activation(policy: str) -> None:
    screenshot = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
    }
    h = harness("anthropic", policy)
    h.ingest(
        [
            a_user("What is on the screen?", screenshot),
            a_assistant(a_use("toolu_1", "screenshot")),
            a_user(a_result("toolu_1", [{"type": "text", "text": "taken"}, screenshot])),
        ]
    )
    context = h.service.assemble("s1")
    for fmt, validate in (
        ("anthropic", validate_anthropic),
        ("openai", validate_openai),
        ("responses", validate_responses),
    ):
        request = render(context, fmt)
        validate(request)
        assert _images_in(request) == [PNG, PNG], fmt  # the user's and the tool's
        assert "[image" not in json.dumps(request).replace("[images of tool call", "")
    # collapsed with its output, back with it
    ref = "toolu_1" if policy == "ssot" else "#1"
    assert h.handle("deactivate", {"id": ref}).ok
    collapsed = render(h.service.assemble("s1"), "openai")
    assert _images_in(collapsed) == [PNG]
    answer = h.handle("activate", {"id": ref})
    assert answer.ok
    if policy == "inline":
        # append-only: the activation's answer shows the output, its images with it, and the
        # harness gives them back in its result (as the proxy and `tools.call` do)
        assert [i["url"] for i in answer.images] == [DATA_URL]
        image = {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": PNG},
        }
        h.ingest(
            [
                a_user("What is on the screen?", screenshot),
                a_assistant(a_use("toolu_1", "screenshot")),
                a_user(a_result("toolu_1", [{"type": "text", "text": "taken"}, screenshot])),
                a_assistant(a_use("toolu_2", "activate", id=ref)),
                a_user(a_result("toolu_2", [{"type": "text", "text": answer.message}, image])),
            ]
        )
    back = render(h.service.assemble("s1"), "anthropic")
    assert _images_in(back) == [PNG, PNG]


def test_openai_and_responses_images_are_kept_as_given() -> None:
    h = harness("openai")
    part = {"type": "image_url", "image_url": {"url": DATA_URL, "detail": "high"}}
    h.ingest([o_user("see"), {"role": "user", "content": [{"type": "text", "text": "this"}, part]}])
    request = h.request()
    assert request["messages"][-1]["content"][1] == part
    r = harness("responses")
    r.ingest(
        [
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "see"},
                    {"type": "input_image", "image_url": DATA_URL, "detail": "low"},
                ],
            }
        ]
    )
    item = r.request()["input"][-1]
    assert item["content"][1] == {"type": "input_image", "image_url": DATA_URL, "detail": "low"}


# -- a prefix for the context tools ---------------------------------------------------------------


def test_context_tools_under_a_prefix_leave_the_harness_its_own_activate() -> None:
    h = harness("openai", tool_prefix="context_")
    names = [t["function"]["name"] for t in h.tools()]
    assert names == [
        "context_activate",
        "context_deactivate",
        "context_pin",
        "context_unpin",
        "context_search",
    ]
    h.ingest(
        [
            o_user("Fix it."),
            o_assistant("", bash("call_1", "cat a.py")),
            o_tool("call_1", "x = 1\n"),
            # the harness's own tool called activate (a virtualenv, say): not a context tool
            o_assistant(
                "",
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "activate", "arguments": "{}"},
                },
            ),
            o_tool("call_2", "activated venv"),
        ]
    )
    assert not h.handle("activate", {"id": "#1"}).ok  # the harness's, not ours
    answer = h.handle("context_activate", {"id": "#1"})
    assert answer.ok and "x = 1" in answer.message
    # the model's call comes back under its prefixed name and is recognised as a context call:
    # deactivating the file collapses the outputs that show it, the activation's too
    h.ingest(
        [
            o_user("Fix it."),
            o_assistant("", bash("call_1", "cat a.py")),
            o_tool("call_1", "x = 1\n"),
            o_assistant(
                "",
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "activate", "arguments": "{}"},
                },
            ),
            o_tool("call_2", "activated venv"),
            o_assistant(
                "",
                {
                    "id": "call_3",
                    "type": "function",
                    "function": {"name": "context_activate", "arguments": json.dumps({"id": "#1"})},
                },
            ),
            o_tool("call_3", answer.message),
        ]
    )
    state = h.service.state("s1")
    file_id = next(i for i in state.index if state.kinds[i] == "file")
    assert h.handle("context_deactivate", {"id": file_id}).ok
    assert tc("call_3") not in h.service.state("s1").active
    assert tc("call_2") in h.service.state("s1").active  # the harness's own call is left alone


def test_the_metadata_and_the_guide_name_the_prefixed_tools() -> None:
    h = harness("anthropic", "ssot", tool_prefix="ctx_")
    h.ingest(
        [
            a_user("go"),
            a_assistant(a_use("toolu_1", command="ls")),
            a_user(a_result("toolu_1", "a.py\n")),
        ]
    )
    metadata = h.request()["system"][-1]["text"]  # no system prompt: the metadata block alone
    assert "ctx_activate(id)" in metadata and " activate(id)" not in metadata
    inline = harness("openai", "inline", tool_prefix="ctx_")
    inline.ingest([o_user("go")])
    guide = inline.request()["messages"][0]["content"]
    assert "call ctx_activate with" in guide and "ctx_pin to keep" in guide
    assert "ctx_deactivate to collapse" in guide


# -- the OpenAI Responses format ---------------------------------------------------------------


CODEX_INPUT: list[dict[str, Any]] = [
    {
        "type": "message",
        "role": "developer",
        "content": [{"type": "input_text", "text": "You are Codex."}],
    },
    {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "<environment_context>cwd</environment_context>"}
        ],
    },
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix add()."}]},
    {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA=="},
    {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Looking."}],
    },
    {
        "type": "function_call",
        "call_id": "call_1",
        "name": "exec_command",
        "arguments": json.dumps({"cmd": "cat calc.py"}),
    },
    {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": "def add(a, b):\n    return a - b\n",
    },
    {
        "type": "function_call",
        "call_id": "call_2",
        "name": "exec_command",
        "arguments": json.dumps({"cmd": "ls"}),
    },
    {"type": "function_call_output", "call_id": "call_2", "output": "calc.py\n"},
]


def test_the_responses_format_is_ingested_and_rendered() -> None:
    h = harness("responses", "ssot")
    result = h.ingest(CODEX_INPUT)
    assert result.consumed == 6  # two user messages, two assistant turns, two outputs
    request = h.request()
    validate_responses(request)
    text = json.dumps(request)
    assert "[input_text]" not in text and "Fix add()." in text
    assert request["input"][0]["content"][0]["text"] == "You are Codex."
    reasoning = [i for i in request["input"] if i["type"] == "reasoning"]
    assert reasoning == [CODEX_INPUT[3]]  # carried as it came, before its turn's items
    calls = [i["call_id"] for i in request["input"] if i["type"] == "function_call"]
    assert calls == [tc("call_1"), tc("call_2")]  # emitted as object ids (decision 0030)
    # the same conversation again records nothing; one more item records one
    assert h.ingest(CODEX_INPUT).consumed == 0
    more: list[dict[str, Any]] = [
        *CODEX_INPUT,
        {"type": "message", "role": "user", "content": "ok"},
    ]
    assert h.ingest(more).consumed == 1
    assert h.tools()[0] == {
        "type": "function",
        "name": "activate",
        "description": h.tools()[0]["description"],
        "parameters": h.tools()[0]["parameters"],
    }
