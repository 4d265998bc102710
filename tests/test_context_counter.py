"""The incremental prompt count equals a count from scratch at every model call, across batch
collapses, context-tool activations and both layouts (budgets and triggers rely on it)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.cli.replay_cmd import SAMPLE_SESSION
from selfctx.adapters.harness.replay import replay, replay_filesystem_id
from selfctx.adapters.harness.tokens import PromptCounter
from selfctx.adapters.harness.trajectories import load
from selfctx.adapters.memory import MemoryStore
from selfctx.adapters.tokenizer import EstimateTokenizer
from selfctx.application.policies import policy_by_name
from selfctx.application.tokens import (
    ContextCounter,
    context_texts,
    context_tokens,
    identical_prefix,
)
from selfctx.domain.rendering import AssembledContext, RenderedMessage


@pytest.mark.parametrize(
    "policy",
    [
        policy_by_name("ssot", budget_tokens=1000, emergency_truncation=True),
        policy_by_name("inline", trigger_tokens=900, clear_at_least=200, keep_recent=1),
    ],
    ids=["ssot-budget", "inline-small-trigger"],
)
def test_incremental_counts_equal_counts_from_scratch(policy: Any) -> None:
    (trajectory,) = load(SAMPLE_SESSION)
    tokenizer = EstimateTokenizer()
    service = build_service(
        store=MemoryStore(),
        default_filesystem_id=replay_filesystem_id(trajectory),
        workspace="/",
        tokenizer=tokenizer,
    )
    checked = []

    def observe(n: int, call: Any, session: Any, request: Any) -> None:
        context = service.assemble(session.session_id)
        incremental = service.prompt_tokens(session.session_id, context)
        assert incremental == context_tokens(context, tokenizer.count), n
        checked.append(n)

    report = replay(trajectory, service, PromptCounter(tokenizer), observe=observe, policy=policy)
    assert checked == list(range(1, len(trajectory.calls) + 1))
    notes = [
        m
        for t in service.state(report.session_id).turns
        for m in t.messages
        if type(m).__name__ == "ContextNote"
    ]
    assert notes, "the settings are meant to make the policy collapse"


@given(
    st.lists(st.integers(0, 3), max_size=40),
    st.lists(st.integers(0, 3), max_size=40),
)
def test_identical_prefix_counts_the_very_objects_up_to_the_first_other(
    left: list[int], right: list[int]
) -> None:
    """``identical_prefix`` is the run of identical objects from the start (not equal ones)."""
    pool = [object() for _ in range(4)]
    old, new = [pool[n] for n in left], [pool[n] for n in right]
    expected = 0
    while expected < min(len(old), len(new)) and old[expected] is new[expected]:
        expected += 1
    assert identical_prefix(old, new) == expected
    assert identical_prefix(old, [*new]) == expected
    assert identical_prefix(old, [object() for _ in new]) == 0


def test_remembered_token_counts_keep_no_text_and_a_bounded_number_of_entries() -> None:
    import sys

    from selfctx.application.tokens import TokenCounts

    counts = TokenCounts(budget=10**9, entries=100)
    text = "long output line\n" * 60_000
    held = sys.getrefcount(text)
    counts[text] = 12_345
    assert sys.getrefcount(text) == held  # known by its hash and length, not kept
    assert counts.get("long output line\n" * 60_000) == 12_345  # an equal text, another object
    assert counts.get(text[:-1]) is None
    for n in range(1_000):
        counts[f"text {n}"] = n
    assert len(counts) == 100  # the entries counted last
    assert counts.get("text 999") == 999 and counts.get("text 0") is None
    assert counts.chars == sum(len(f"text {n}") for n in range(900, 1_000))


def test_a_primed_count_leaves_what_was_sent_as_a_fresh_count_finds_it() -> None:
    """A resumed session counts its context ahead of its first request (decision 0110): that
    request's count, its total and what it finds a provider has cached (``tails``) are those of
    a counter that counted nothing before it, even where the request changed a message the
    preparation counted."""
    tokenizer = EstimateTokenizer()

    def message(n: int, text: str) -> RenderedMessage:
        return RenderedMessage("tool", f"{text} {n} " * (n + 1), toolcall_id=f"call{n}")

    chat = [message(n, "output") for n in range(8)]
    prepared = AssembledContext("s", (), tuple(chat), ())
    changed = [*chat[:2], message(2, "collapsed"), *chat[3:]]  # a collapse at position 2
    request = AssembledContext("s", (), tuple(changed), ())

    fresh = ContextCounter(tokenizer.count, sent=6)
    primed = ContextCounter(tokenizer.count, sent=6)
    primed.prime(prepared)
    assert primed(request) == fresh(request) == context_tokens(request, tokenizer.count)
    assert primed.tails(request) == fresh.tails(request)
    assert set(fresh.tails(request)) == {f"call{n}" for n in range(6)}
    unprimed = ContextCounter(tokenizer.count, sent=6)
    unprimed(prepared)  # counted as a request's, not primed: the change is after what it sent
    assert set(unprimed.tails(request)) == {"call0", "call1"}


def test_the_context_counted_last_is_not_counted_again_and_another_is() -> None:
    """An assembly counts the context it returns, and the proxy asks for the size of that very
    context again when it builds the request (decision 0150): the second ask reads no text; a
    context that differs in any way, even one made from it, is counted."""
    texts: list[str] = []

    def count(text: str) -> int:
        texts.append(text)
        return len(text.split())

    chat = tuple(RenderedMessage("tool", f"output {n} " * 3, toolcall_id=f"c{n}") for n in range(4))
    context = AssembledContext("system prompt", ("a metadata line",), chat, ())
    counter = ContextCounter(count)
    total = counter(context)
    read = len(texts)
    assert counter(context) == total == context_tokens(context, count)
    assert len(texts) == read + len(list(context_texts(context)))  # only context_tokens' reads
    changed = attrs.evolve(context, system_prompt="another system prompt")
    before = len(texts)
    assert counter(changed) == context_tokens(changed, count)
    assert texts[before] == "another system prompt"
    assert counter(changed) == context_tokens(changed, count)
    assert counter(context) == total  # the first again: counted again, the same total


def test_the_token_bookkeeping_of_a_long_session_is_a_few_machine_words_a_message() -> None:
    """What a session keeps to count its prompts, beside the messages themselves (decision
    0157): the counter a count of each message, the remembered counts a key and a count of each
    text. Counts above 256 and a (hash, length) pair are objects of their own in Python: held
    as machine integers and one integer key, an entry costs about a third less (the counter 16
    bytes a message, not 48; the remembered counts about 165 bytes a text, not 210)."""
    import gc
    import tracemalloc

    from selfctx.application.tokens import TokenCounts

    n = 4_000
    chat = tuple(
        RenderedMessage("tool", f"output {k} ", toolcall_id=f"c{k}") for k in range(n)
    )  # fmt: skip
    texts = [f"a text the prompt held, number {k}" for k in range(n)]
    for text in texts:
        hash(text)  # a string caches its hash: computed before the tracing

    def grown(fill: Any) -> float:
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            kept = fill()
            gc.collect()
            after = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert kept is not None
        return (after - before) / n

    def counted() -> ContextCounter:
        counter = ContextCounter(lambda text: 1_000 + len(text))  # counts of long outputs
        counter(AssembledContext("s", (), chat, ()))
        return counter

    def remembered() -> TokenCounts:
        counts = TokenCounts(budget=10**9, entries=2 * n)
        for k, text in enumerate(texts):
            counts[text] = 1_000 + k
        return counts

    per_message, per_text = grown(counted), grown(remembered)
    # the counter's list of messages (8 bytes a slot) and its counts
    assert 0 < per_message < 24, per_message
    assert 0 < per_text < 180, per_text
