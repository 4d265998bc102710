"""``selfctx bench cache``: what prompt caching bills for a recorded client session, sent
straight to the provider (*direct*) and through ``selfctx proxy`` (*managed*).

A recording (``selfctx.adapters.bench.recording``) holds every request a real agent sent. Each is
sent, in order, through the proxy (in-memory store, the default policy unless told) to a scripted
model that answers what the model answered when it was recorded (as the client sent it back with
its next request) and keeps what it got: the managed requests.
Both sequences are billed by the provider's caching rules (``selfctx.domain.prompt_cache``:
Anthropic's explicit breakpoints for Messages requests, automatic prefix caching for OpenAI's
APIs), block by block (``selfctx.adapters.harness.prompt_blocks``), with the project's token
counter. Costs are in base-input-token units; ``ratio`` is managed cost over direct cost.

The recordings the repository ships (adapters/bench/recordings/) were made with the pinned
clients playing tests/proxy/tasks.py straight against the scripted model (tests/proxy/record.py).
"""

from __future__ import annotations

import itertools
import json
import logging
import tempfile
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from selfctx.adapters.bench.recording import Recorded, Recording, read_recording
from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.harness.prompt_blocks import cache_request
from selfctx.adapters.harness.tokens import PromptCounter
from selfctx.adapters.memory import MemoryStore
from selfctx.adapters.proxy import Proxy, ProxyConfig
from selfctx.adapters.proxy.scripted import ScriptedModel, Seen, Step
from selfctx.adapters.proxy.serving import serve_in_thread
from selfctx.domain.prompt_cache import Bill, bill, rules_for, total

__all__ = ["RECORDINGS", "recordings", "run_cache"]

RECORDINGS = Path(__file__).parent / "recordings"
"""The recordings shipped with the project."""


def recordings(paths: Sequence[str | Path] = ()) -> list[Path]:
    """The recording files named (directories searched), or the shipped ones."""
    found: list[Path] = []
    for given in paths or [RECORDINGS]:
        path = Path(given)
        found += sorted(path.glob("*.jsonl.xz")) if path.is_dir() else [path]
    return found


def _figures(bills: Sequence[Bill]) -> dict[str, Any]:
    summed = total(bills)
    return {
        "tokens": summed.tokens,
        "cache_read": summed.read,
        "cache_write": summed.written,
        "uncached": summed.uncached,
        "cost": round(summed.cost),
    }


def _unmarked(value: Any) -> Any:
    """``value`` without cache marks, a content of text blocks as one string (clients re-send
    the same message in either form)."""
    if isinstance(value, dict):
        out = {k: _unmarked(v) for k, v in value.items() if k != "cache_control"}
        content = out.get("content")
        if isinstance(content, list) and all(
            isinstance(b, dict) and set(b) == {"type", "text"} and b["type"] == "text"
            for b in content
        ):
            out["content"] = "".join(b["text"] for b in content)
        return out
    if isinstance(value, list):
        return [_unmarked(v) for v in value]
    return value


def _items(request: Recorded) -> list[Any]:
    for key in ("messages", "input"):
        value = request.body.get(key)
        if isinstance(value, list):
            return value
    return []


def _is_answer(api: str, item: Any) -> bool:
    if not isinstance(item, dict):
        return False
    if api == "responses":
        kind = item.get("type", "message")
        return kind in ("function_call", "reasoning") or (
            kind == "message" and item.get("role") == "assistant"
        )
    return item.get("role") == "assistant"


def _answers(recording: Recording) -> list[Any]:
    """What the model answered to each recorded request, as the client sent it back with its
    next request of the same conversation (None: not found; the replay then answers ``ok``)."""
    requests = recording.requests
    answers: list[Any] = []
    for n, request in enumerate(requests):
        items = _items(request)
        found = None
        for later in requests[n + 1 :]:
            after = _items(later)
            if later.api != request.api or len(after) <= len(items) or not items:
                continue
            if after[0] != items[0] or _unmarked(after[: len(items)]) != _unmarked(items):
                continue
            tail = list(itertools.takewhile(partial(_is_answer, request.api), after[len(items) :]))
            if not tail:
                break
            if request.api == "anthropic":
                content = tail[0].get("content")
                found = (
                    [{"type": "text", "text": content}]
                    if isinstance(content, str)
                    else [{k: v for k, v in b.items() if k != "cache_control"} for b in content]
                )
            elif request.api == "openai":
                found = _unmarked(tail[0])
            else:
                found = [{k: v for k, v in i.items() if k not in ("id", "status")} for i in tail]
            break
        answers.append(found)
    return answers


def _replay(
    recording: Recording, policy: str | None, options: Mapping[str, int]
) -> tuple[list[tuple[int, Mapping[str, Any]]], list[int]]:
    """Each recorded request sent through a proxy, the model answering what it answered when
    it was recorded: (bytes, body) of what reached the model for each, and the bytes the client
    sent."""
    answers = iter(_answers(recording))

    def script(_seen: Seen) -> Step:
        answer = next(answers, None)
        return Step("ok") if answer is None else Step(replayed=answer)

    model = ScriptedModel(script)
    client_bytes: list[int] = []
    with tempfile.TemporaryDirectory() as workspace:
        service = build_service(store=MemoryStore(), workspace=workspace)
        try:
            with serve_in_thread(model.app) as upstream:
                config = ProxyConfig(
                    upstream_anthropic=upstream,
                    upstream_openai=upstream + "/v1",
                    cwd=workspace,
                    roots=(workspace,),
                    policy=policy,
                    policy_options=dict(options),
                )
                proxy = Proxy(service, config)
                with serve_in_thread(proxy.app) as base, httpx.Client(timeout=300) as client:
                    for request in recording.requests:
                        # compact, as the clients send it (their own spacing is not recorded)
                        content = json.dumps(
                            request.body, ensure_ascii=False, separators=(",", ":")
                        ).encode("utf-8", "surrogatepass")
                        client_bytes.append(len(content))
                        answer = client.post(
                            base + request.path,
                            content=content,
                            headers={"content-type": "application/json"},
                        )
                        answer.read()
                        if answer.status_code != 200:
                            raise RuntimeError(
                                f"request {len(client_bytes)} failed: {answer.status_code} "
                                f"{answer.text[:500]}"
                            )
        finally:
            service.close()
    received = [(r.size, r.body) for r in model.requests]
    if len(received) != len(recording.requests):
        raise RuntimeError(f"{len(received)} requests reached the model, not {len(client_bytes)}")
    return received, client_bytes


def run_cache(
    paths: Sequence[str | Path] = (),
    *,
    policy: str | None = None,
    options: Mapping[str, int] | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Bill each recording direct and managed."""
    logging.getLogger("selfctx.proxy").setLevel(logging.WARNING)
    runs = []
    for path in recordings(paths):
        recording = read_recording(path)
        if progress:
            progress(f"{path.name}: {len(recording.requests)} requests")
        received, client_bytes = _replay(recording, policy, options or {})
        with tempfile.TemporaryDirectory() as workspace:
            service = build_service(store=MemoryStore(), workspace=workspace)
            count = PromptCounter(service.tokenizer).text
            service.close()
        apis = sorted({r.api for r in recording.requests})
        figures: dict[str, Any] = {}
        for api in apis:
            rules = rules_for(api)
            pairs = [
                (r, managed)
                for r, (_size, managed) in zip(recording.requests, received, strict=True)
                if r.api == api
            ]
            direct = bill([cache_request(api, r.body, count, r.at) for r, _ in pairs], rules)
            managed = bill([cache_request(api, m, count, r.at) for r, m in pairs], rules)
            d, m = _figures(direct), _figures(managed)
            figures[api] = {
                "rules": rules.name,
                "requests": len(pairs),
                "direct": d,
                "managed": m,
                "ratio": round(m["cost"] / d["cost"], 3) if d["cost"] else None,
            }
        runs.append(
            {
                "recording": path.name,
                "client": recording.meta.get("client"),
                "version": recording.meta.get("version"),
                "requests": len(recording.requests),
                "client_bytes": sum(client_bytes),
                "upstream_bytes": sum(size for size, _ in received),
                "larger_requests": sum(
                    1 for (size, _), sent in zip(received, client_bytes, strict=True) if size > sent
                ),
                "apis": figures,
            }
        )
    return {"policy": policy or "default", "runs": runs}
