"""The proxy's JSON codec: the bytes sent are the managed body, request after request, in every
format, while outputs collapse, files are read again and the model's context calls come and go;
and what orjson refuses (lone surrogates, NaN, huge integers) goes through the standard library,
unchanged."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import orjson
import pytest

from selfctx.adapters.bench.cache import RECORDINGS, _replay
from selfctx.adapters.bench.recording import read_recording
from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.harness.request import RequestCache, _Item
from selfctx.adapters.memory import MemoryStore
from selfctx.adapters.proxy import Proxy, ProxyConfig
from selfctx.adapters.proxy.app import _Turn
from selfctx.adapters.proxy.codec import dumps, dumps_with, loads
from selfctx.adapters.proxy.providers import PROVIDERS


def _call(fmt: str, n: int, command: str, output: str) -> list[dict[str, Any]]:
    """One tool call and its result, as each API writes them."""
    cid = f"call_{n}"
    if fmt == "openai":
        function = {"name": "bash", "arguments": json.dumps({"command": command})}
        call = {"id": cid, "type": "function", "function": function}
        return [
            {"role": "assistant", "content": f"Step {n}: ünïcode ✓", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": cid, "content": output},
        ]
    if fmt == "anthropic":
        use = {"type": "tool_use", "id": cid, "name": "bash", "input": {"command": command}}
        result = {"type": "tool_result", "tool_use_id": cid, "content": output}
        return [
            {"role": "assistant", "content": [{"type": "text", "text": f"Step {n} ✓"}, use]},
            {"role": "user", "content": [result]},
        ]
    arguments = json.dumps({"command": command})
    return [
        {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": f"Step {n} ✓"}
        ]},
        {"type": "function_call", "call_id": cid, "name": "bash", "arguments": arguments},
        {"type": "function_call_output", "call_id": cid, "output": output},
    ]  # fmt: skip


def _body(fmt: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    if fmt == "openai":
        return {"model": "m", "messages": items, "stream": False}
    if fmt == "anthropic":
        return {"model": "m", "max_tokens": 100, "system": "You fix bugs.", "messages": items}
    return {"model": "m", "instructions": "You fix bugs.", "input": items}


@pytest.mark.parametrize("fmt", ["openai", "anthropic", "responses"])
def test_the_bytes_sent_are_the_managed_body_as_json(fmt: str, tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text("".join(f"line {n} of the app\n" for n in range(300)))
    service = build_service(store=MemoryStore(), workspace=str(tmp_path))
    config = ProxyConfig(
        cwd=str(tmp_path),
        roots=(str(tmp_path),),
        policy_options={"trigger_tokens": 1500},
    )
    proxy = Proxy(service, config)
    provider = next(p for p in PROVIDERS.values() if p.name == fmt)
    system = [{"role": "system", "content": "You fix bugs."}] if fmt == "openai" else []
    first = {"role": "user", "content": "Fix app.py, please."}
    items: list[dict[str, Any]] = [*system, first]

    async def run() -> None:
        nonlocal items
        session = await proxy._session(provider, "encode-test", "", _body(fmt, items))
        for n in range(40):
            command = "cat app.py" if n % 7 == 0 else f"echo {n}"
            output = (tmp_path / "app.py").read_text() if n % 7 == 0 else f"{n}\n" * 40
            if n == 23:  # one orjson refuses: that request's body goes through the standard library
                output += " \ud800 lone"
            items = [*items, *_call(fmt, n, command, output)]
            if n % 10 == 9:  # the client edits its history: a compaction of its own
                items = [*system, first, *items[len(system) + 5 :]]
            turn = _Turn(provider, _body(fmt, items), {}, "http://upstream", session)
            built: list[dict[str, Any]] = []
            proxy._ingest(turn, lambda: built.append(proxy._build(turn)))  # noqa: B023
            managed = built[-1]
            assert json.loads(dumps(managed)) == managed
            # the items encoded for earlier requests are reused, and the bytes are the same
            assert session.requests is not None and session.requests.pieces
            assert proxy._encode(turn, managed) == dumps(managed)
            if n % 5 == 0:  # and the model's own context call, answered by the proxy
                again = proxy._build(turn)
                assert json.loads(dumps(again)) == again
                assert proxy._encode(turn, again) == dumps(again)

    try:
        asyncio.run(run())
    finally:
        service.close()


def test_what_orjson_refuses_goes_through_unchanged() -> None:
    lone = loads(b'{"a": "\\ud800 lone"}')
    assert lone == {"a": "\ud800 lone"}
    assert dumps(lone) == '{"a":"\ud800 lone"}'.encode("utf-8", "surrogatepass")
    odd = loads(b'{"n": NaN, "i": Infinity}')
    assert math.isnan(odd["n"]) and odd["i"] == math.inf
    assert dumps(odd) == b'{"n":null,"i":null}'  # JSON has neither: as null, as orjson writes
    big = loads(b'{"big": 1' + b"0" * 30 + b"}")
    assert big == {"big": 10**30} and dumps(big) == b'{"big":1' + b"0" * 30 + b"}"
    plain = {"messages": [{"role": "user", "content": "ünïcode ✓ \u2028"}]}
    assert loads(dumps(plain)) == plain


def test_pieces_give_the_bytes_of_the_whole_body() -> None:
    """``dumps_with`` writes what ``dumps`` writes: the items held (the very values, at their
    positions) as they were encoded, in runs, the others (and bodies orjson refuses anywhere) as
    before; a truncation cuts what is held, and one past an item orjson refused holds again."""
    deep: Any = "leaf"
    for _ in range(252):  # deep enough that orjson refuses it two levels down only
        deep = [deep]
    items: list[Any] = [{"role": "user", "content": f"ünïcode ✓ \u2028 {n}"} for n in range(6)]
    cache = RequestCache("openai", text=False, pieces=True)
    for item in items:
        cache._items.append(_Item(item, "", 0))
    pieces = cache.pieces
    assert pieces is not None and len(pieces) == 6
    marked = {**items[2], "cache_control": {"type": "ephemeral"}}  # a copy, as a mark makes
    for listed in (
        items,
        items[:1],
        [*items, {"role": "user", "content": "new"}],
        [items[0], items[1], marked, *items[3:]],  # held runs on either side of a copy
        [{"role": "user", "content": "new"}, *items],  # every item off its position
        [items[1], items[0], *items[2:]],
        [items[0], items[0], items[2]],
        [],
    ):
        for body in (
            {"model": "m", "messages": listed, "n": 1.5e16},
            {"model": "m", "messages": [*listed, {"role": "tool", "content": deep}]},  # depth
            {"model": "m", "messages": listed, "odd": "\ud800"},
        ):
            assert dumps_with(body, "messages", pieces) == dumps(body)
    pieces.offset = 2  # after a head of two messages (a system prompt's)
    head = [{"role": "system", "content": "a"}, items[0]]
    for listed in ([*head, *items], [*head, *items[:2], marked], head, [*head, *items, *head]):
        body = {"model": "m", "messages": listed}
        assert dumps_with(body, "messages", pieces) == dumps(body)
    # the held items after the head are one piece of JSON, a copy at its position ends it
    assert len(pieces.listed([*head, *items])) == 3
    assert [type(x) for x in pieces.listed([*head, *items[:2], marked])][2:] == [
        orjson.Fragment,
        dict,
    ]
    pieces.offset = 0
    cache._items.append(_Item({"role": "tool", "content": deep}, "", 0))
    cache._items.append(_Item(items[0], "", 0))  # after the refused item: not held
    assert len(pieces) == 6 and pieces.refused
    cache._items.truncate(7)
    assert len(pieces) == 6 and pieces.refused
    cache._items.truncate(3)
    assert len(pieces) == 3 and not pieces.refused
    assert pieces.span(0, 3) == orjson.dumps(items[:3])[1:-1]
    cache._items.append(_Item(items[5], "", 0))
    assert pieces.span(3, 4) == orjson.dumps(items[5])
    body = {"model": "m", "messages": [*items[:3], items[5]]}
    assert dumps_with(body, "messages", pieces) == dumps(body)
    cache._items.truncate(0)
    assert not pieces and not pieces.joined


def _by_identity(value: dict[str, Any], key: str, pieces: Any) -> bytes:
    """What the proxy sent before decision 0135: each item held looked up by its identity,
    wherever it is, as a piece of its own (``orjson.Fragment``)."""
    held = {
        id(v): orjson.Fragment(pieces.span(n, n + 1))
        for n, v in enumerate(pieces.values[: len(pieces)])
    }
    try:
        return orjson.dumps({**value, key: [held.get(id(item), item) for item in value[key]]})
    except (TypeError, orjson.JSONEncodeError):
        return dumps(value)


@pytest.mark.parametrize("name", ["claude-code-28", "codex-28", "pi-28", "aider-28"])
def test_recorded_sessions_are_sent_byte_for_byte_as_before(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every managed request of each recorded client session (Anthropic with its cache marks,
    Responses, Chat Completions) encoded with the pieces is the body's ``dumps``, byte for byte."""
    checked: list[int] = []
    fresh: list[tuple[int, int]] = []
    encode = Proxy._encode

    def compared(turn: _Turn, managed: dict[str, Any]) -> bytes:
        content = encode(turn, managed)
        assert content == dumps(managed)
        assert turn.session.requests is not None
        pieces = turn.session.requests.pieces
        if pieces:  # the same bytes as each item looked up by identity (before 0135)
            key = "input" if turn.provider.name == "responses" else "messages"
            assert content == _by_identity(managed, key, pieces)
            # and the items held are found at their positions, after the request's head
            listed = pieces.listed(managed[key])
            anew = sum(1 for x in listed if not isinstance(x, orjson.Fragment))
            fresh.append((anew, len(managed[key])))
        checked.append(len(pieces or ()))
        return content

    monkeypatch.setattr(Proxy, "_encode", staticmethod(compared))
    _replay(read_recording(RECORDINGS / f"{name}.jsonl.xz"), None, {})
    assert len(checked) >= 25
    assert sum(1 for n in checked if n) >= len(checked) // 2  # the pieces were there to use
    assert sum(a for a, _ in fresh) * 4 < sum(n for _, n in fresh)
