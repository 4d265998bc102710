"""``RecentBodies``: a request body read from what changed since the conversation's last one is
exactly the value the whole body decodes to, and a conversation that grows is read that way."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from selfctx.adapters.proxy.bodies import RecentBodies, _structure
from selfctx.adapters.proxy.codec import loads

SCOPE = ("owner", "/v1/chat/completions")

texts = st.sampled_from(["", "ok", 'say "hi", [x]', "{}", "\\", "é ☃", "\ud800", "a,b:c", "]"])
scalars = st.one_of(texts, st.integers(-5, 10**20 + 5), st.booleans(), st.none(), st.floats(0, 1))
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)
items = st.dictionaries(st.sampled_from(["role", "content", "x", "messages"]), values, max_size=3)

SERIALIZERS: dict[str, Callable[[Any], bytes]] = {
    "default": lambda v: json.dumps(v).encode(),
    "compact": lambda v: json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8", "surrogatepass"
    ),
    "indented": lambda v: json.dumps(v, indent=2).encode(),
}


@st.composite
def conversations(draw: Any) -> list[dict[str, Any]]:
    """Successive bodies of one conversation: items appended, the last ones changed (a client
    moving its cache marks), cut short, repeated or rewritten at the start."""
    messages: list[Any] = draw(st.lists(items, min_size=1, max_size=4))
    extra = draw(st.dictionaries(st.sampled_from(["model", "tools", "z"]), values, max_size=3))
    first = draw(st.booleans())
    bodies = []
    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from(["grow", "grow", "grow", "mark", "cut", "same", "rewrite"]))
        if op == "grow":
            messages = messages + draw(st.lists(items, min_size=1, max_size=3))
        elif op == "mark" and messages:
            back = draw(st.integers(1, min(3, len(messages))))
            messages = [*messages[:-back], *draw(st.lists(items, min_size=back, max_size=back))]
        elif op == "cut":
            messages = messages[: draw(st.integers(0, len(messages)))]
        elif op == "rewrite":
            messages = [draw(items), *messages[1:]]
        body = {"messages": messages, **extra} if first else {**extra, "messages": messages}
        bodies.append(body)
    return bodies


@pytest.mark.parametrize("serializer", sorted(SERIALIZERS))
@settings(max_examples=100, deadline=None)
@given(bodies=conversations())
def test_every_body_reads_as_it_decodes_whole(serializer: str, bodies: list[Any]) -> None:
    recent = RecentBodies()
    for body in bodies:
        raw = SERIALIZERS[serializer](body)
        assert _read(lambda r: recent.loads(r, "messages", SCOPE), raw) == _read(loads, raw)


def _read(decode: Callable[[bytes], Any], raw: bytes) -> Any:
    try:
        return decode(raw)
    except ValueError as exc:  # not UTF-8 (a lone surrogate written raw): refused alike
        return type(exc)


def test_a_growing_conversation_is_read_from_its_new_items() -> None:
    recent = RecentBodies()
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    previous: list[Any] = []
    for n in range(20):
        messages.append({"role": "assistant", "content": f"step {n}", "cache": "mark"})
        if n:  # the client moves its mark to the newest message
            messages[-2] = {k: v for k, v in messages[-2].items() if k != "cache"}
        raw = json.dumps({"model": "m", "messages": messages, "tools": [{"a": [1]}]}).encode()
        got = recent.loads(raw, "messages", SCOPE)
        assert got == loads(raw)
        kept = got["messages"][: len(previous) - 1]
        assert all(a is b for a, b in zip(kept, previous, strict=False))  # the same objects
        previous = got["messages"]
    assert recent.extended == 19


def test_bodies_of_another_scope_or_key_are_never_extended() -> None:
    recent = RecentBodies()
    raw = json.dumps({"messages": [{"role": "user", "content": "a"}]}).encode()
    grown = json.dumps({"messages": [{"role": "user", "content": "a"}, {"role": "x"}]}).encode()
    recent.loads(raw, "messages", SCOPE)
    assert recent.loads(grown, "messages", ("someone else", SCOPE[1])) == loads(grown)
    assert recent.loads(grown, "input", SCOPE) == loads(grown)
    assert recent.extended == 0
    assert recent.loads(grown, "messages", SCOPE) == loads(grown)
    assert recent.extended == 1


def test_a_key_given_twice_or_escaped_reads_as_the_whole_decodes() -> None:
    for text in (
        '{"messages": [1, 2], "messages": [3]}',
        '{"messages": [1, 2], "mess\\u0061ges": [3]}',
    ):
        recent = RecentBodies()
        recent.loads(text.encode(), "messages", SCOPE)
        for grown in (text.replace("[3]", "[3, 4]"), text.replace("[1, 2]", "[1, 2, 5]")):
            assert recent.loads(grown.encode(), "messages", SCOPE) == loads(grown.encode())


def test_what_is_kept_is_bounded() -> None:
    recent = RecentBodies(limit=3, max_bytes=10_000)
    for n in range(10):
        recent.loads(json.dumps({"messages": [n]}).encode(), "messages", (str(n), "/"))
    assert len(recent._bodies) == 3
    recent.loads(json.dumps({"messages": ["x" * 6000]}).encode(), "messages", SCOPE)
    recent.loads(json.dumps({"messages": ["y" * 6000]}).encode(), "messages", SCOPE)
    assert recent._size <= 10_000


@pytest.mark.parametrize(
    "text", [b'"' + b"a" * 200_000, b" " * 200_000, b"[" + b'"\\\\",' * 20_000 + b"1]"]
)
def test_the_structure_scan_stops_where_the_structure_ends(text: bytes) -> None:
    # quadratic rescanning of these would take minutes; the tokens are what the text holds
    tokens = list(_structure(text))
    assert len(tokens) == (0 if text[0] != ord("[") else 20_002)
