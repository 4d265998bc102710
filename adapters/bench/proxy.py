"""``selfctx bench proxy``: the time the proxy adds to a request.

A session of N objects (tool calls, with outputs of a few hundred characters) is built through the
proxy; then each measured request appends one more tool call and its output to the conversation
and is sent twice, in turn: straight to the scripted model, and through the proxy to the same
model. The overhead of a request is the difference of the two times; the figures are its median
and 95th percentile. Everything runs on 127.0.0.1, the proxy on the in-memory store.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from selfctx.adapters.bench.stats import percentile
from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.memory import MemoryStore
from selfctx.adapters.proxy import Proxy, ProxyConfig
from selfctx.adapters.proxy.scripted import ScriptedModel, Step
from selfctx.adapters.proxy.serving import serve_in_thread

__all__ = ["SIZES", "run_proxy"]

SIZES = (100, 1000)
_OUTPUT = "\n".join(f"line {n}: some output of a command, as an agent sees it" for n in range(8))


def _pair(size: int, n: int) -> list[dict[str, Any]]:
    call = {
        "id": f"bench{size}_{n}",
        "type": "function",
        "function": {"name": "bash", "arguments": json.dumps({"command": f"echo step {n}"})},
    }
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"bench{size}_{n}", "content": f"step {n}\n{_OUTPUT}"},
    ]


def _body(messages: list[dict[str, Any]]) -> dict[str, Any]:
    tool = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}
    return {"model": "scripted-model", "messages": messages, "tools": [tool]}


def _ms(values: Sequence[float]) -> dict[str, float]:
    return {
        "p50": round(statistics.median(values) * 1000, 3),
        "p95": round(percentile(values, 95) * 1000, 3),
    }


def _one_size(
    size: int, requests: int, proxy_url: str, direct_url: str, client: httpx.Client, session: str
) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": f"Benchmark session {session}."},
    ]
    headers = {"x-selfctx-session": session, "authorization": "Bearer bench"}
    for n in range(size):
        messages += _pair(size, n)
    warm = client.post(f"{proxy_url}/v1/chat/completions", json=_body(messages), headers=headers)
    warm.raise_for_status()
    direct: list[float] = []
    through: list[float] = []
    for n in range(size, size + requests):
        messages += _pair(size, n)
        content = json.dumps(_body(messages)).encode()
        for url, times in ((direct_url, direct), (proxy_url, through)):
            started = time.perf_counter()
            answer = client.post(
                f"{url}/v1/chat/completions",
                content=content,
                headers={**headers, "content-type": "application/json"},
            )
            times.append(time.perf_counter() - started)
            answer.raise_for_status()
    overhead = [p - d for p, d in zip(through, direct, strict=True)]
    return {
        "objects": size,
        "requests": requests,
        "request_bytes": len(content),
        "overhead_ms": _ms(overhead),
        "direct_ms": _ms(direct),
        "proxy_ms": _ms(through),
    }


def run_proxy(
    sizes: Sequence[int] = SIZES,
    requests: int = 50,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the benchmark; the top-level figures are those of the largest session."""
    model = ScriptedModel([Step("ok")])
    runs = []
    with tempfile.TemporaryDirectory() as workspace:
        service = build_service(store=MemoryStore(), workspace=workspace)
        try:
            with serve_in_thread(model.app) as direct_url:
                proxy = Proxy(
                    service,
                    ProxyConfig(
                        cwd=workspace,
                        roots=(workspace,),
                        upstream_openai=direct_url,
                        upstream_anthropic=direct_url,
                    ),
                )
                with serve_in_thread(proxy.app) as proxy_url, httpx.Client(timeout=120) as client:
                    for size in sizes:
                        if progress:
                            progress(f"session of {size} objects, {requests} requests")
                        runs.append(
                            _one_size(
                                size, requests, proxy_url, direct_url, client, f"bench-{size}"
                            )
                        )
        finally:
            service.close()
    largest = runs[-1]
    return {
        "overhead_ms": largest["overhead_ms"],
        "requests": largest["requests"],
        "objects": largest["objects"],
        "runs": runs,
    }
