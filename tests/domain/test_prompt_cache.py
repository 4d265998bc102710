"""The prompt-cache model: Anthropic's explicit breakpoints (prefix match, lookback, minimum,
five-minute entries, at most four marks) and automatic prefix caching."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from selfctx.domain.prompt_cache import (
    ANTHROPIC,
    OPENAI,
    Block,
    PromptCache,
    Request,
    bill,
    rules_for,
    total,
)


def blocks(*sizes: int, marks: tuple[int, ...] = (), tag: str = "b") -> tuple[Block, ...]:
    return tuple(Block(f"{tag}{n}", size, n in marks) for n, size in enumerate(sizes))


def test_a_breakpoint_writes_its_prefix_and_the_next_request_reads_it() -> None:
    first = Request(blocks(1000, 500, 300, marks=(1,)), at=0)
    # the conversation grew by one block; the mark moved to the new end
    second = Request(blocks(1000, 500, 300, 200, marks=(3,)), at=10)
    one, two = bill([first, second], ANTHROPIC)
    assert (one.read, one.written, one.uncached) == (0, 1500, 300)
    assert one.cost == pytest.approx(1500 * 1.25 + 300)
    # the entry at block 1 is found looking back from the mark at block 3
    assert (two.read, two.written, two.uncached) == (1500, 500, 0)
    assert two.cost == pytest.approx(1500 * 0.1 + 500 * 1.25)


def test_a_mark_on_a_block_the_next_request_changes_is_never_read() -> None:
    cache = PromptCache(ANTHROPIC)
    cache.send(Request(blocks(2000, 300, marks=(1,)), at=0))
    changed = (Block("b0", 2000), Block("collapsed", 20, True))
    assert cache.send(Request(changed, at=5)).read == 0
    # a mark on the stable part would have been read
    cache = PromptCache(ANTHROPIC)
    cache.send(Request(blocks(2000, 300, marks=(0, 1)), at=0))
    assert cache.send(Request(changed, at=5)).read == 2000


def test_the_lookback_is_twenty_blocks() -> None:
    base = [2000] + [10] * 30
    cache = PromptCache(ANTHROPIC)
    cache.send(Request(blocks(*base[:2], marks=(1,)), at=0))
    near = cache.send(Request(blocks(*base[:22], marks=(21,)), at=1))
    assert near.read == 2010  # boundary 1 is 20 blocks before the mark at 21
    cache = PromptCache(ANTHROPIC)
    cache.send(Request(blocks(*base[:2], marks=(1,)), at=0))
    far = cache.send(Request(blocks(*base[:23], marks=(22,)), at=1))
    assert far.read == 0
    cache = PromptCache(ANTHROPIC)
    cache.send(Request(blocks(*base[:2], marks=(1,)), at=0))
    # a second mark nearer the old entry finds it
    both = cache.send(Request(blocks(*base[:23], marks=(5, 22)), at=1))
    assert both.read == 2010


def test_entries_live_five_minutes_from_their_last_use() -> None:
    cache = PromptCache(ANTHROPIC)
    request = Request(blocks(2000, marks=(0,)), at=0)
    cache.send(request)
    assert cache.send(Request(request.blocks, at=290)).read == 2000
    assert cache.send(Request(request.blocks, at=580)).read == 2000  # refreshed at 290
    assert cache.send(Request(request.blocks, at=881)).read == 0


def test_short_prefixes_are_not_cached_and_only_four_marks_count() -> None:
    short = bill([Request(blocks(500, 100, marks=(1,)))] * 2, ANTHROPIC)
    assert [b.written for b in short] == [0, 0] and short[1].read == 0
    marks = (0, 1, 2, 3, 4)
    one, two = bill([Request(blocks(1100, 10, 10, 10, 10, marks=marks))] * 2, ANTHROPIC)
    assert one.written == 1130 and one.uncached == 10  # the fifth mark is not one
    assert two.read == 1130


def test_automatic_caching_reads_the_longest_earlier_prefix_in_steps_of_128() -> None:
    first = Request(blocks(1000, 500, 300), at=0)
    second = Request((*blocks(1000, 500), Block("new", 999)), at=1)
    one, two = bill([first, second], OPENAI)
    assert one.read == 0 and one.cost == pytest.approx(1800)
    assert two.read == 1408  # 1,500 shared, rounded down to 1,024 + 3 x 128
    assert two.cost == pytest.approx(1408 * 0.1 + (2499 - 1408))
    small = bill([Request(blocks(900, 50))] * 2, OPENAI)
    assert small[1].read == 0


def test_rules_by_format() -> None:
    assert rules_for("anthropic") is ANTHROPIC
    assert rules_for("responses") is OPENAI and rules_for("openai") is OPENAI
    with pytest.raises(ValueError, match="no caching rules"):
        rules_for("gemini")


_block = st.builds(
    Block,
    key=st.sampled_from(["a", "b", "c", "d"]),
    tokens=st.integers(0, 3000),
    breakpoint=st.booleans(),
)
_request = st.builds(
    Request, blocks=st.lists(_block, max_size=30).map(tuple), at=st.floats(0, 1000)
)


@given(st.lists(_request, max_size=8).map(lambda rs: sorted(rs, key=lambda r: r.at)))
def test_every_token_is_billed_once_within_the_price_range(requests: list[Request]) -> None:
    for rules in (ANTHROPIC, OPENAI):
        bills = bill(requests, rules)
        for request, one in zip(requests, bills, strict=True):
            assert one.read + one.written + one.uncached == one.tokens == request.tokens
            assert min(one.read, one.written, one.uncached) >= 0
            low = rules.read * one.tokens
            high = max(rules.write, 1.0) * one.tokens
            assert low - 1e-6 <= one.cost <= high + 1e-6
        assert total(bills).tokens == sum(r.tokens for r in requests)
