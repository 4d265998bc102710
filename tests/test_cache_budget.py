"""One byte budget for a session's caches (decision 0169): the default is the bounds each cache
had, a smaller one shrinks all of them, and with a small one a long session's caches stop
growing at their shares while a session with the default's keeps filling them."""

from __future__ import annotations

import gc
import random
import tracemalloc
import uuid
from typing import Any

import pytest

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.config import load_config
from selfctx.adapters.harness import HarnessSession
from selfctx.adapters.tokenizer import TiktokenTokenizer, default_tokenizer
from selfctx.adapters.tokenizer.estimate import EstimateTokenizer
from selfctx.application.cache_budget import CACHE_BUDGET, ENTRY_BYTES, SPLIT, cache_shares
from selfctx.application.objects import CONTENT_BUDGET, METADATA_BUDGET
from selfctx.application.policies import policy_by_name
from selfctx.application.settings import Settings
from selfctx.application.tokens import TEXT_ENTRIES, TokenCounts
from selfctx.domain.errors import InvalidInput
from selfctx.domain.relevance import KNOWN_NAMES, KnownNames


def test_the_default_budget_gives_each_cache_the_bound_it_had() -> None:
    settings = Settings()
    assert settings.cache_budget == CACHE_BUDGET
    assert settings.content_budget == CONTENT_BUDGET
    assert settings.metadata_budget == METADATA_BUDGET
    assert settings.rendering_budget == 1_024
    shares = settings.caches
    assert (shares.token_counts, shares.known_names, shares.tokenizer_memo) == (
        TEXT_ENTRIES, KNOWN_NAMES, 16_384,
    )  # fmt: skip
    assert sum(SPLIT.values()) == pytest.approx(1.0)


def test_a_smaller_budget_shrinks_every_cache_and_an_explicit_one_still_wins() -> None:
    small = Settings(cache_budget=CACHE_BUDGET // 10)
    shares = small.caches
    assert small.content_budget == shares.content_chars == pytest.approx(CONTENT_BUDGET / 10, 1e-3)
    assert small.metadata_budget == METADATA_BUDGET // 10
    assert shares.token_counts == pytest.approx(TEXT_ENTRIES / 10, abs=1)
    assert shares.known_names == pytest.approx(KNOWN_NAMES / 10, abs=1)
    assert Settings(cache_budget=1_000, content_budget=77).content_budget == 77
    with pytest.raises(InvalidInput):
        Settings(cache_budget=0)
    env = {"SELFCTX_CONFIG": "", "XDG_CONFIG_HOME": "/nonexistent"}
    config = load_config(environ={**env, "SELFCTX_CACHE_BUDGET": "1000000"})
    assert config.settings().content_budget == cache_shares(1_000_000).content_chars


def _bytes_an_entry(fill: Any, n: int = 4_000) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = fill(n)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    del kept
    return grown / n


def test_the_sizes_an_entry_the_budget_counts_are_what_the_entries_hold() -> None:
    texts = [f"{i:06d} " + "x" * 300 for i in range(4_000)]

    def counts(n: int) -> TokenCounts:
        cache = TokenCounts(budget=10**12, entries=10**9)
        for i, text in enumerate(texts[:n]):
            cache[text] = 1_000 + i
        return cache

    names = [f"name_{i:08d}_xy" for i in range(4_000)]  # identifiers of about 16 characters

    def known(n: int) -> KnownNames:
        held = KnownNames(limit=10**9)
        held.update("".join(list(name)) for name in names[:n])  # strings of its own
        return held

    assert _bytes_an_entry(counts) == pytest.approx(ENTRY_BYTES["token_counts"], rel=0.25)
    assert _bytes_an_entry(known) == pytest.approx(ENTRY_BYTES["known_names"], rel=0.25)


def _tokenizer() -> Any:
    shared = default_tokenizer()
    if isinstance(shared, TiktokenTokenizer):  # a memo of its own, not the process's
        return TiktokenTokenizer(shared.encoding)
    return EstimateTokenizer()


def _session(budget: int | None) -> tuple[Any, HarnessSession, str]:
    settings = Settings() if budget is None else Settings(cache_budget=budget)
    service = build_service(settings=settings, tokenizer=_tokenizer())
    sid = f"cb-{uuid.uuid4().hex[:8]}"
    return service, HarnessSession(service, sid, policy=policy_by_name("relevance")), sid


def _turn(rng: random.Random, prefix: str, n: int) -> list[dict[str, Any]]:
    """One call and its output: about 1,500 characters of new identifiers and numbers."""
    words = [f"ident_{n}_{i}_{rng.randrange(10**6)}" for i in range(60)]
    output = "\n".join(" ".join(words[i : i + 6]) + f" = {rng.random()}" for i in range(0, 60, 6))
    call_id = f"{prefix}-c{n}"
    function = {"name": "bash", "arguments": f'{{"command": "grep -rn ident_{n} src"}}'}
    call = {"id": call_id, "type": "function", "function": function}
    return [
        {"role": "assistant", "content": f"step {n}: looking at ident_{n}", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": output},
    ]


def _drive(budget: int | None, turns: int, readings: tuple[int, ...]) -> dict[int, Any]:
    """The caches' sizes of a session at each turn of ``readings``."""
    service, h, sid = _session(budget)
    prefix = uuid.uuid4().hex[:8]
    rng = random.Random(7)
    digest = h.ingest([{"role": "user", "content": "rename the identifiers"}]).digest
    out: dict[int, Any] = {}
    try:
        for n in range(1, turns + 1):
            digest = h.append(_turn(rng, prefix, n), extends=digest).digest
            h.request()
            if n in readings:
                session = service._open(sid)
                out[n] = {
                    "bytes": h.cache_bytes(),
                    "token_counts": len(session.token_cache),
                    "known": len(session.relevance_memo.known),
                    "memo": service.tokenizer.memo_entries,
                    "renderings": h._requests.renderings,
                    "content": session.objects.chars,
                    "held": session.objects.held_chars(),
                }
    finally:
        service.close()
    return out


def test_with_a_small_budget_a_long_sessions_caches_stop_at_their_shares() -> None:
    budget = 400_000
    shares = cache_shares(budget)
    small = _drive(budget, 240, (120, 180, 240))
    for turn, seen in small.items():
        assert seen["token_counts"] <= shares.token_counts, (turn, seen)
        # two generations, the newer one at most the limit and one turn's identifiers
        assert seen["known"] <= 2 * shares.known_names + 200, (turn, seen)
        assert seen["memo"] <= shares.tokenizer_memo, (turn, seen)
        assert seen["renderings"] <= shares.renderings + 64, (turn, seen)  # and the stale ones
        # the content's share, the one used last and what the prompt shows whole (0086)
        assert seen["content"] <= shares.content_chars + 4_000 + seen["held"], (turn, seen)
    # in all: the budget, beside what the prompt shows whole, the content used last, the stale
    # renderings dropped together and a turn's identifiers
    last = small[240]
    slack = last["held"] + 4_000 + 64 * ENTRY_BYTES["renderings"] + 200 * ENTRY_BYTES["known_names"]
    assert sum(last["bytes"].values()) <= budget + slack, last
    assert last["token_counts"] == small[180]["token_counts"]  # full, and turning over
    # the default's caches are still filling at turn 240 of the same session: the small budget
    # is what stopped them
    default = _drive(None, 240, (240,))[240]
    assert default["token_counts"] > 1.5 * shares.token_counts, default
    assert default["known"] > 2 * (2 * shares.known_names + 200), default


def test_the_stdio_server_answers_the_caches_bytes() -> None:
    from selfctx.adapters.harness.stdio import StdioServer

    service = build_service(settings=Settings(cache_budget=400_000), tokenizer=_tokenizer())
    try:
        server = StdioServer(service)
        import json

        def call(method: str, **params: Any) -> Any:
            line = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
            return json.loads(server.handle_line(line) or "{}")["result"]

        call("session.open", session_id="c", policy="relevance")
        call("ingest", session_id="c", messages=[{"role": "user", "content": "hello"}])
        call("assemble", session_id="c")
        sizes = call("session.caches", session_id="c")
        assert sorted(sizes) == [
            "content", "known_names", "metadata", "renderings", "token_counts", "tokenizer_memo",
        ]  # fmt: skip
        assert all(isinstance(v, int) and v >= 0 for v in sizes.values())
    finally:
        service.close()
