"""The inline cache's truncation forgets what the removed messages registered, and only that
(decision 0117: the keys are taken off the ends of ``shown`` and ``positions``, which gain them
in the order of the messages)."""

from __future__ import annotations

import random

from selfctx.domain.inline import InlineCache
from selfctx.domain.rendering import RenderedMessage

Log = list[tuple[str, str, int]]


def _render(cache: InlineCache, n: int, rng: random.Random, log: Log) -> None:
    """Render ``n`` more messages: each places a call or two, some show an output."""
    for _ in range(n):
        position = len(cache.messages)
        for _ in range(rng.randint(0, 2)):
            call = f"c{rng.randint(0, 60)}"  # some calls are shown again, later
            if call not in cache.positions:
                log.append(("positions", call, position))
            cache.place(call, position)
        if rng.random() < 0.4:
            content = f"h{rng.randint(0, 40)}"
            if content not in cache.shown:
                log.append(("shown", content, position))
            cache.show(content, f"#{position}")
        cache.messages.append(RenderedMessage("tool", f"m{position}"))
        cache.origin.append((0, position))


def test_a_truncation_forgets_the_keys_of_the_messages_it_removes_and_keeps_the_others() -> None:
    rng = random.Random(5)
    cache = InlineCache(counts=[0])
    log: Log = []
    _render(cache, 40, rng, log)
    for cut in (33, 20, 20, 7, 0):
        cache.truncate(cut)
        log = [entry for entry in log if entry[2] < cut]
        assert cache.positions == {k: p for kind, k, p in log if kind == "positions"}
        assert {k: p for k, (_, p) in cache.shown.items()} == {
            k: p for kind, k, p in log if kind == "shown"
        }
        assert len(cache.messages) == cut
        _render(cache, rng.randint(5, 15), rng, log)  # rendered on from the cut
