"""Parsing only what is new gives what parsing everything gives: for lists that grow, are edited
in the middle, are cut, change their system prompt, and (Responses) whose last assistant run goes
on in the next request."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from selfctx.adapters.harness.messages import parse_messages
from selfctx.adapters.proxy.incremental import ParsedConversation


def _count(items: Any) -> int:
    """An additive stand-in for a token count."""
    return sum(len(json.dumps(item)) for item in items)


def _openai(n: int) -> list[dict[str, Any]]:
    call = {"id": f"c{n}", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    return [
        {"role": "assistant", "content": f"step {n}", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{n}", "content": f"out {n}"},
    ]


def _anthropic(n: int) -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": f"step {n}"},
                {"type": "tool_use", "id": f"t{n}", "name": "bash", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": f"t{n}", "content": f"out {n}"},
                {"type": "text", "text": f"note {n}"},
            ],
        },
    ]


def _responses(n: int) -> list[dict[str, Any]]:
    return [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a"}]},
        {"type": "function_call", "call_id": f"r{n}", "name": "bash", "arguments": "{}"},
        {"type": "function_call_output", "call_id": f"r{n}", "output": f"out {n}"},
    ]


MAKERS = {"openai": _openai, "anthropic": _anthropic, "responses": _responses}


def _start(fmt: str) -> list[dict[str, Any]]:
    if fmt == "responses":
        return [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}
        ]
    return [{"role": "user", "content": "go"}]


def _check(parsed: ParsedConversation, fmt: str, items: list[Any], system: Any) -> None:
    messages, tokens = parsed.update(copy.deepcopy(items), system)
    expected = parse_messages(items, fmt, system)
    assert messages == expected
    system_tokens = _count([{"role": "system", "content": system}]) if system else 0
    assert tokens == _count(items) + system_tokens
    assert [m.index for m in messages] == [m.index for m in expected]


@pytest.mark.parametrize("fmt", ["openai", "anthropic", "responses"])
@given(edits=st.lists(st.sampled_from(["grow", "edit", "cut", "system"]), max_size=8))
def test_incremental_parsing_matches_a_full_parse(fmt: str, edits: list[str]) -> None:
    system = None if fmt == "openai" else "be brief"
    parsed = ParsedConversation(fmt, _count)
    items = _start(fmt)
    _check(parsed, fmt, items, system)
    n = 0
    for edit in edits:
        if edit == "grow":
            n += 1
            items = items + MAKERS[fmt](n)
        elif edit == "edit" and len(items) > 2:
            items = copy.deepcopy(items)
            items[1] = MAKERS[fmt](100 + n)[0]
            items[2:] = []
        elif edit == "cut":
            items = items[: max(1, len(items) // 2)]
        elif edit == "system" and system is not None:
            system = system + "!"
        _check(parsed, fmt, items, system)


def test_a_responses_assistant_run_that_goes_on() -> None:
    """A request ends with the assistant's text; the next adds its call to the same run."""
    parsed = ParsedConversation("responses", _count)
    items = [*_start("responses"), _responses(1)[0]]
    _check(parsed, "responses", items, None)
    _check(parsed, "responses", [*items, *_responses(1)[1:]], None)
