"""Request bodies as the blocks of the prompt-cache model: order, keys without cache marks,
breakpoints where the body puts them."""

from __future__ import annotations

from typing import Any

import pytest

from selfctx.adapters.harness.prompt_blocks import cache_request, request_blocks
from selfctx.domain.prompt_cache import ANTHROPIC, bill


def count(text: str) -> int:
    return len(text) // 4


MARK = {"type": "ephemeral"}


def anthropic_body(last: str, *, marked: bool = True) -> dict[str, Any]:
    turn: dict[str, Any] = {"type": "text", "text": last}
    if marked:
        turn["cache_control"] = MARK
    return {
        "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
        "system": [
            {"type": "text", "text": "billing header"},
            {"type": "text", "text": "You are an agent. " * 400, "cache_control": MARK},
        ],
        "messages": [
            {"role": "user", "content": "Fix the bug. " * 200},
            {"role": "assistant", "content": [{"type": "text", "text": "Looking."}]},
            {"role": "user", "content": [turn]},
        ],
    }


def test_anthropic_blocks_follow_the_reading_order_with_their_marks() -> None:
    blocks = request_blocks("anthropic", anthropic_body("go on"), count)
    assert len(blocks) == 1 + 2 + 3
    assert [b.breakpoint for b in blocks] == [False, False, True, False, False, True]
    # a block is the same block with or without its mark
    unmarked = request_blocks("anthropic", anthropic_body("go on", marked=False), count)
    assert [b.key for b in unmarked] == [b.key for b in blocks]
    automatic = request_blocks(
        "anthropic", {**anthropic_body("x", marked=False), "cache_control": MARK}, count
    )
    assert automatic[-1].breakpoint


def test_a_moving_mark_is_read_by_the_next_request() -> None:
    first = anthropic_body("go on")
    second = anthropic_body("go on", marked=False)
    second["messages"] = [
        *second["messages"],
        {"role": "assistant", "content": "More."},
        {"role": "user", "content": [{"type": "text", "text": "next", "cache_control": MARK}]},
    ]
    one, two = bill(
        [cache_request("anthropic", first, count), cache_request("anthropic", second, count, 1.0)],
        ANTHROPIC,
    )
    assert one.read == 0 and one.written > 1024
    assert two.read == one.written


@pytest.mark.parametrize("api", ["openai", "responses"])
def test_openai_formats(api: str) -> None:
    body: dict[str, Any]
    if api == "openai":
        body = {"tools": [{"type": "function"}], "messages": [{"role": "user", "content": "hi"}]}
    else:
        body = {"instructions": "be brief", "tools": [{"type": "function"}], "input": "hi"}
    blocks = request_blocks(api, body, count)
    assert len(blocks) == (2 if api == "openai" else 3)
    with pytest.raises(ValueError, match="unknown API"):
        request_blocks("gemini", body, count)
