"""How the front of ``selfctx proxy --workers N`` places conversations on workers."""

from __future__ import annotations

import collections

from selfctx.adapters.proxy.workers import Workers, routing_key


def _key(session: str, key: str = "Bearer k") -> bytes:
    return routing_key({"authorization": key, "x-selfctx-session": session})


def test_a_few_conversations_spread_evenly_and_each_stays_where_it_was_placed() -> None:
    placed = Workers(2)
    first = {n: placed.of(_key(f"bench-c{n}-1000")) for n in range(8)}
    assert collections.Counter(first.values()) == {0: 4, 1: 4}
    for _ in range(3):
        assert {n: placed.of(_key(f"bench-c{n}-1000")) for n in range(8)} == first


def test_the_routing_key_is_the_conversation_and_the_credentials() -> None:
    assert _key("a") == _key("a")
    assert _key("a") != _key("b")
    assert _key("a") != _key("a", key="Bearer other")


def test_forgotten_keys_free_their_place() -> None:
    placed = Workers(3, limit=4)
    for n in range(10):
        placed.of(_key(str(n)))
    assert sum(placed.held) == 4
    assert max(placed.held) - min(placed.held) <= 1
