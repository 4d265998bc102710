"""A scripted model: a local server speaking the three model APIs (streamed and not) that answers
from a script instead of a model. The proxy's tests and ``selfctx bench proxy`` run agents and the
proxy against it; nothing leaves 127.0.0.1.

A script is a function from what the server received (:class:`Seen`) to the next :class:`Step`:
text, tool calls, optionally a thinking block, or an error to answer with. Every request is kept
(:attr:`ScriptedModel.requests`) so a test can check what the model was sent.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import attrs
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from selfctx.adapters.proxy.codec import loads
from selfctx.adapters.proxy.sse import encode

__all__ = ["Received", "ScriptedModel", "Seen", "Step"]


@attrs.frozen
class Step:
    """One answer of the model."""

    text: str = ""
    calls: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    """Tool calls: ``(tool name, arguments)``."""
    thinking: str | None = None
    """An Anthropic thinking block (with a signature) before the text, if given."""
    error: tuple[int, Mapping[str, Any]] | None = None
    """Answer with this status and body instead."""
    delay: float = 0.0
    """Seconds to wait before the answer's first byte of content (after the headers)."""
    replayed: Any = None
    """An answer recorded in the API's own shape, given back as it is instead of the above:
    Anthropic content blocks, a Chat Completions assistant message, or Responses output items
    (``selfctx bench cache`` replays a recorded session's answers)."""


@attrs.frozen
class Received:
    """One request the server got (headers lower-cased)."""

    api: str
    path: str
    headers: Mapping[str, str]
    body: Mapping[str, Any]
    size: int = 0
    """The body's length in bytes, as received."""
    at: float = 0.0
    """When it arrived (``time.monotonic()``)."""


@attrs.frozen
class Seen:
    """What a script decides from: the request, in its API's shape."""

    api: str
    """``anthropic``, ``openai`` (Chat Completions) or ``responses``."""
    body: Mapping[str, Any]
    turn: int
    """Assistant turns already in the conversation: the step to play."""

    @property
    def text(self) -> str:
        """All text of the request, as JSON (for a script that looks for something)."""
        return json.dumps(self.body, ensure_ascii=False)

    def tool_names(self) -> list[str]:
        names = []
        for tool in self.body.get("tools") or ():
            function = tool.get("function") if isinstance(tool.get("function"), dict) else tool
            names.append(str(function.get("name")))
        return names


Script = Callable[[Seen], Step]


def assistant_turns(api: str, body: Mapping[str, Any]) -> int:
    """Assistant turns in a request's conversation (a Responses turn is a run of items)."""
    if api != "responses":
        return sum(1 for m in body.get("messages") or () if m.get("role") == "assistant")
    turns, inside = 0, False
    items = body.get("input")
    for item in items if isinstance(items, list) else ():
        mine = item.get("type") in ("function_call", "reasoning") or (
            item.get("type", "message") == "message" and item.get("role") == "assistant"
        )
        if mine and not inside:
            turns += 1
        inside = mine
    return turns


class ScriptedModel:
    """The server: :attr:`app` is its ASGI application."""

    def __init__(
        self, script: Script | Sequence[Step], model: str = "scripted-model", *, keep: bool = True
    ) -> None:
        self.script: Script = script if callable(script) else _by_turn(script)
        self.model = model
        self.keep = keep
        """Whether each request is kept in :attr:`requests` (a benchmark's model keeps none: a
        heap of every request decoded would make its collector pause for longer and longer)."""
        self.requests: list[Received] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        handlers = {
            "/v1/messages": ("anthropic", _anthropic),
            "/v1/chat/completions": ("openai", _chat),
            "/v1/responses": ("responses", _responses),
        }
        routes = [
            Route(path, self._endpoint(api, answer), methods=["POST"])
            for path, (api, answer) in handlers.items()
        ]
        routes.append(Route("/v1/messages/count_tokens", self._count, methods=["POST"]))
        self.app = Starlette(routes=routes)

    def of(self, api: str) -> list[Received]:
        """The requests one API got, in order."""
        with self._lock:
            return [r for r in self.requests if r.api == api]

    def _endpoint(
        self, api: str, answer: Callable[[ScriptedModel, Step, Mapping[str, Any]], Any]
    ) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            raw = await request.body()
            body = loads(raw)
            if self.keep:
                received = Received(
                    api, request.url.path, dict(request.headers), body, len(raw), time.monotonic()
                )
                with self._lock:
                    self.requests.append(received)
            step = self.script(Seen(api, body, assistant_turns(api, body)))
            if step.error is not None:
                return JSONResponse(dict(step.error[1]), step.error[0])
            result = answer(self, step, body)
            if body.get("stream"):
                return StreamingResponse(_later(result, step.delay), media_type="text/event-stream")
            if step.delay:
                await asyncio.sleep(step.delay)
            return JSONResponse(result)

        return endpoint

    async def _count(self, request: Request) -> Response:
        body = await request.body()
        return JSONResponse({"input_tokens": max(1, len(body) // 4)})

    def call_id(self, prefix: str) -> str:
        """A tool-call id unique to this server's life (ids are object ids in a store)."""
        return f"{prefix}{uuid.uuid4().hex[:20]}{next(self._ids):06d}"  # one length


async def _later(events: Iterable[str], delay: float) -> AsyncIterator[str]:
    if delay:
        await asyncio.sleep(delay)
    for event in events:
        yield event


def _by_turn(steps: Sequence[Step]) -> Script:
    def script(seen: Seen) -> Step:
        return steps[min(seen.turn, len(steps) - 1)]

    return script


def _halves(text: str) -> list[str]:
    middle = len(text) // 2
    return [p for p in (text[:middle], text[middle:]) if p]


def _usage(body: Mapping[str, Any]) -> int:
    return max(1, len(json.dumps(body)) // 4)


# -- Anthropic -------------------------------------------------------------------------------


def _anthropic(model: ScriptedModel, step: Step, body: Mapping[str, Any]) -> Any:
    blocks: list[dict[str, Any]] = list(step.replayed or [])
    if step.thinking is not None:
        signature = "sig-" + uuid.uuid4().hex
        blocks.append({"type": "thinking", "thinking": step.thinking, "signature": signature})
    if step.text:
        blocks.append({"type": "text", "text": step.text})
    for name, arguments in step.calls:
        blocks.append(
            {"type": "tool_use", "id": model.call_id("toolu_"), "name": name, "input": arguments}
        )
    stop = "tool_use" if any(b.get("type") == "tool_use" for b in blocks) else "end_turn"
    usage = {"input_tokens": _usage(body), "output_tokens": 10}
    message = {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", model.model),
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage,
    }
    if not body.get("stream"):
        return message
    return _anthropic_events(message)


def _anthropic_events(message: Mapping[str, Any]) -> Iterator[str]:
    start = {**message, "content": [], "stop_reason": None}
    yield encode({"type": "message_start", "message": start}, "message_start")
    yield encode({"type": "ping"}, "ping")
    for index, block in enumerate(message["content"]):
        kind = block["type"]
        if kind == "text":
            opening: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in _halves(block["text"])]
        elif kind == "thinking":
            opening = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": p} for p in _halves(block["thinking"])]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        else:
            opening = {**block, "input": {}}
            text = json.dumps(block["input"])
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in _halves(text)]
        yield encode(
            {"type": "content_block_start", "index": index, "content_block": opening},
            "content_block_start",
        )
        for delta in deltas:
            yield encode(
                {"type": "content_block_delta", "index": index, "delta": delta},
                "content_block_delta",
            )
        yield encode({"type": "content_block_stop", "index": index}, "content_block_stop")
    yield encode(
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": message["usage"]["output_tokens"]},
        },
        "message_delta",
    )
    yield encode({"type": "message_stop"}, "message_stop")


# -- OpenAI Chat Completions -----------------------------------------------------------------


def _chat(model: ScriptedModel, step: Step, body: Mapping[str, Any]) -> Any:
    calls = [
        {
            "id": model.call_id("call_"),
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }
        for name, arguments in step.calls
    ]
    message: dict[str, Any] = {"role": "assistant", "content": step.text or None}
    if calls:
        message["tool_calls"] = calls
    if step.replayed is not None:
        message = {"role": "assistant", "content": step.replayed.get("content")}
        calls = list(step.replayed.get("tool_calls") or [])
        if calls:
            message["tool_calls"] = calls
    finish = "tool_calls" if calls else "stop"
    head = {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "created": 1_700_000_000,
        "model": body.get("model", model.model),
    }
    usage = {"prompt_tokens": _usage(body), "completion_tokens": 10}
    usage["total_tokens"] = usage["prompt_tokens"] + 10
    if not body.get("stream"):
        choice = {"index": 0, "message": message, "finish_reason": finish}
        return {**head, "object": "chat.completion", "choices": [choice], "usage": usage}
    text = message["content"] if isinstance(message.get("content"), str) else ""
    return _chat_events(head, text, calls, finish, usage, body)


def _chat_events(
    head: Mapping[str, Any],
    text: str,
    calls: Sequence[Mapping[str, Any]],
    finish: str,
    usage: Mapping[str, Any],
    body: Mapping[str, Any],
) -> Iterator[str]:
    def chunk(delta: Mapping[str, Any], reason: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": reason}
        return encode({**head, "object": "chat.completion.chunk", "choices": [choice]})

    yield chunk({"role": "assistant", "content": ""})
    for piece in _halves(text):
        yield chunk({"content": piece})
    for index, call in enumerate(calls):
        function = call["function"]
        first = {"name": function["name"], "arguments": ""}
        opening = {"index": index, "id": call["id"], "type": "function", "function": first}
        yield chunk({"tool_calls": [opening]})
        for piece in _halves(function["arguments"]):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, finish)
    if (body.get("stream_options") or {}).get("include_usage"):
        yield encode({**head, "object": "chat.completion.chunk", "choices": [], "usage": usage})
    yield encode("[DONE]")


# -- OpenAI Responses ------------------------------------------------------------------------


def _responses(model: ScriptedModel, step: Step, body: Mapping[str, Any]) -> Any:
    output: list[dict[str, Any]] = [
        {"id": f"item_{uuid.uuid4().hex[:24]}", "status": "completed", **item}
        for item in step.replayed or []
    ]
    if step.text:
        output.append(
            {
                "type": "message",
                "id": f"msg_{uuid.uuid4().hex[:24]}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": step.text, "annotations": []}],
            }
        )
    for name, arguments in step.calls:
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{uuid.uuid4().hex[:24]}",
                "status": "completed",
                "call_id": model.call_id("call_"),
                "name": name,
                "arguments": json.dumps(arguments),
            }
        )
    response = {
        "id": f"resp_{uuid.uuid4().hex[:24]}",
        "object": "response",
        "created_at": 1_700_000_000,
        "status": "completed",
        "model": body.get("model", model.model),
        "output": output,
        "usage": {
            "input_tokens": _usage(body),
            "output_tokens": 10,
            "total_tokens": _usage(body) + 10,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }
    if not body.get("stream"):
        return response
    return _responses_events(response)


def _responses_events(response: Mapping[str, Any]) -> Iterator[str]:
    numbers = itertools.count()

    def event(kind: str, **data: Any) -> str:
        return encode({"type": kind, "sequence_number": next(numbers), **data}, kind)

    pending = {**response, "status": "in_progress", "output": [], "usage": None}
    yield event("response.created", response=pending)
    yield event("response.in_progress", response=pending)
    for index, item in enumerate(response["output"]):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            yield event(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "content": []},
            )
            part = {"type": "output_text", "text": "", "annotations": []}
            ids = {"item_id": item["id"], "output_index": index, "content_index": 0}
            yield event("response.content_part.added", **ids, part=part)
            for piece in _halves(text):
                yield event("response.output_text.delta", **ids, delta=piece)
            yield event("response.output_text.done", **ids, text=text)
            yield event("response.content_part.done", **ids, part={**part, "text": text})
        elif item["type"] != "function_call":  # a replayed reasoning item, say: whole
            yield event("response.output_item.added", output_index=index, item=item)
        else:
            yield event(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "arguments": ""},
            )
            for piece in _halves(item["arguments"]):
                yield event(
                    "response.function_call_arguments.delta",
                    item_id=item["id"],
                    output_index=index,
                    delta=piece,
                )
            yield event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=index,
                arguments=item["arguments"],
            )
        yield event("response.output_item.done", output_index=index, item=item)
    yield event("response.completed", response=response)
