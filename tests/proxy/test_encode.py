"""The managed request's bytes reuse the JSON of the previous request's messages: they are still
exactly ``json.dumps`` of the managed body, request after request, in every format, while
outputs collapse, files are read again and the model's context calls come and go."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.memory import MemoryStore
from selfctx.adapters.proxy import Proxy, ProxyConfig
from selfctx.adapters.proxy.app import _Turn
from selfctx.adapters.proxy.encode import BodyEncoder
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
    encoder = BodyEncoder()
    reused = 0

    async def run() -> int:
        nonlocal items
        hits = 0
        session = await proxy._session(provider, "encode-test", "", _body(fmt, items))
        for n in range(40):
            command = "cat app.py" if n % 7 == 0 else f"echo {n}"
            output = (tmp_path / "app.py").read_text() if n % 7 == 0 else f"{n}\n" * 40
            items = [*items, *_call(fmt, n, command, output)]
            if n % 10 == 9:  # the client edits its history: a compaction of its own
                items = [*system, first, *items[len(system) + 5 :]]
            turn = _Turn(provider, _body(fmt, items), {}, "http://upstream", session)
            managed = proxy._ingest(turn)
            before = len(encoder._kept)
            sent = encoder.encode(managed)
            assert sent == json.dumps(managed, ensure_ascii=False).encode("utf-8", "surrogatepass")
            hits += before > 0 and any(i in encoder._kept for i in map(id, _items(managed)))
            if n % 5 == 0:  # and the model's own context call, answered by the proxy
                again = proxy._build(turn)
                assert encoder.encode(again) == json.dumps(again, ensure_ascii=False).encode()
        return hits

    try:
        reused = asyncio.run(run())
    finally:
        service.close()
    assert reused > 30  # the messages of one request were met again in the next


def _items(body: dict[str, Any]) -> list[Any]:
    return list(body.get("messages") or body.get("input") or [])
