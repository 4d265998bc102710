"""A collapsed call's request in the inline layout: long arguments shortened, the rest as sent."""

from __future__ import annotations

import json

from selfctx.adapters.harness.render import _openai_message
from selfctx.application.tokens import context_texts
from selfctx.domain.chat import ToolCallRequest
from selfctx.domain.inline import MAX_COLLAPSED_ARGUMENT, compact_call
from selfctx.domain.rendering import AssembledContext, RenderedMessage


def test_a_call_with_nothing_to_shorten_is_the_call_itself() -> None:
    call = ToolCallRequest("c1", "bash", {"command": "ls -la", "flags": ["-x", 3], "n": None})
    assert compact_call(call, "#4") is call  # no new request, no second frozen copy


def test_long_arguments_are_shortened_at_any_depth_and_nothing_else_changes() -> None:
    long = "x" * (MAX_COLLAPSED_ARGUMENT + 1)
    call = ToolCallRequest("c1", "write", {"path": "/p/a.py", "edits": [{"text": long}], "n": 2})
    compacted = compact_call(call, "#7")
    assert compacted is not call and (compacted.id, compacted.name) == ("c1", "write")
    assert compacted.arguments["path"] == "/p/a.py" and compacted.arguments["n"] == 2
    shortened = compacted.arguments["edits"][0]["text"]
    assert shortened.startswith("x" * 60) and f"[{len(long)} chars, collapsed with #7]" in shortened
    edge = ToolCallRequest("c2", "bash", {"command": "y" * MAX_COLLAPSED_ARGUMENT})
    assert compact_call(edge, "#8") is edge  # at the limit: kept whole


def test_the_arguments_text_is_what_json_dumps_writes() -> None:
    arguments = {"command": "grep 'é' \"a b\"", "list": [1, 2.5, True, None], "nested": {"k": 1}}
    call = ToolCallRequest("c1", "bash", arguments)
    message = RenderedMessage("assistant", "", (call,))
    item = _openai_message(message)
    text = json.dumps(arguments, ensure_ascii=False)  # the client's order (decision 0132)
    assert json.loads(text) == arguments and "é" in text
    assert item["tool_calls"][0]["function"]["arguments"] == text
    context = AssembledContext(system_prompt="", metadata=(), chat=(message,), active=())
    assert text in list(context_texts(context))
