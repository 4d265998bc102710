"""The three model APIs the proxy serves, each as one :class:`Provider`: where a request keeps its
conversation, how the managed request is built, how a response (JSON or a stream of events) names
its tool calls, and how a response is given back without the context tool calls.

A response is always handled in the provider's own shape: the proxy only removes what it answered
itself (its context tool calls) and renumbers what follows, so everything else a provider sends
(usage, ids, stop reasons, signatures, fields added after this was written) reaches the client.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any, ClassVar

import attrs

from selfctx.adapters.harness.messages import (
    MalformedMessage,
    Message,
    parse_anthropic,
    parse_openai,
    parse_responses,
)
from selfctx.adapters.proxy.sse import Event, encode

__all__ = ["PROVIDERS", "Anthropic", "BadRequest", "Call", "Chat", "Provider", "Responses"]


class BadRequest(ValueError):
    """The client's body is not a request of its API (the message says what is wrong)."""


@attrs.frozen
class Call:
    """A tool call in a response: its id, the tool's name, and its position (Anthropic: content
    block index; Chat Completions: ``tool_calls`` index; Responses: ``output`` index)."""

    id: str
    name: str
    position: int


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadRequest(f"{what} must be a JSON object")
    return value


def _shift(position: int, removed: Collection[int]) -> int:
    return position - sum(1 for r in removed if r < position)


class Provider:
    """What the proxy needs to know about one API (subclasses fill it in)."""

    name: ClassVar[str]
    """The harness format of its conversations: ``anthropic``, ``openai`` or ``responses``."""
    path: ClassVar[str]
    family: ClassVar[str]
    """Which upstream serves it: ``anthropic`` or ``openai``."""

    def conversation(self, body: Mapping[str, Any]) -> tuple[Any, Any]:
        """``(messages, system)`` of a request, as ``parse_messages`` takes them."""
        raise NotImplementedError

    def parse_items(self, items: list[Any], offset: int) -> list[Message]:
        """Items of a request's conversation in the neutral form (raises ``MalformedMessage``)."""
        raise NotImplementedError

    def first_user_text(self, body: Mapping[str, Any]) -> str:
        """The text of the conversation's first user message, parsing no more than it takes."""
        items, _system = self.conversation(body)
        if isinstance(items, str):
            return items
        for index, item in enumerate(items):
            if isinstance(item, dict) and item.get("role") == "user":
                for message in self.parse_items([item], index):
                    if message.role == "user":
                        return message.text
        return ""

    def managed(
        self, body: Mapping[str, Any], rendered: Mapping[str, Any], tools: Sequence[Any]
    ) -> dict[str, Any]:
        """The client's request with its conversation replaced by ``rendered`` and ``tools``
        (the context tools) added to its own; every other field is kept."""
        raise NotImplementedError

    def calls(self, response: Mapping[str, Any]) -> list[Call]:
        """The tool calls a (non-streamed or accumulated) response makes."""
        raise NotImplementedError

    def assistant(self, response: Mapping[str, Any]) -> Message | None:
        """The response as an assistant message, or None if it cannot be read as one."""
        raise NotImplementedError

    def without(self, response: Mapping[str, Any], ids: Collection[str]) -> dict[str, Any]:
        """The response without the tool calls ``ids`` (the proxy answered them)."""
        raise NotImplementedError

    def accumulate(self, events: Sequence[Event]) -> dict[str, Any]:
        """The response a stream of events amounts to (the non-streamed shape)."""
        raise NotImplementedError

    def filter_events(self, events: Sequence[Event], calls: Sequence[Call]) -> list[str]:
        """The stream without the events of ``calls``, as SSE text, positions renumbered."""
        raise NotImplementedError

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        """An error in the API's own shape."""
        raise NotImplementedError

    def error_event(self, message: str) -> str:
        """An error in the middle of a stream, as the API streams one."""
        raise NotImplementedError

    def client_key(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> str | None:
        """The conversation id the client sends with its requests, if it sends one."""
        return None

    def streamed(self, body: Mapping[str, Any]) -> bool:
        return body.get("stream") is True


# -- Anthropic Messages ------------------------------------------------------------------------

_ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


class Anthropic(Provider):
    """``POST /v1/messages``."""

    name = "anthropic"
    path = "/v1/messages"
    family = "anthropic"
    MAX_BREAKPOINTS: ClassVar[int] = 4
    """``cache_control`` marks the API accepts in one request."""

    def conversation(self, body: Mapping[str, Any]) -> tuple[Any, Any]:
        return body.get("messages"), body.get("system")

    def parse_items(self, items: list[Any], offset: int) -> list[Message]:
        return parse_anthropic(items, offset=offset)

    def managed(
        self,
        body: Mapping[str, Any],
        rendered: Mapping[str, Any],
        tools: Sequence[Any],
        *,
        mark_last: bool = False,
        before: Collection[str] = (),
    ) -> dict[str, Any]:
        """The client's system blocks stay as they came (byte for byte, in order, with their
        cache marks: a provider may recognise a client by its first block); what the proxy adds
        to the system prompt (the context layout's guide, the metadata section) follows them as
        blocks of its own. Cache breakpoints: see :func:`place_breakpoints`."""
        out = dict(body)
        out["messages"] = rendered["messages"]
        out["system"] = _system_blocks(body.get("system"), rendered.get("system") or [])
        if not out["system"]:
            del out["system"]
        out["tools"] = [*(body.get("tools") or ()), *tools]
        place_breakpoints(out, self.MAX_BREAKPOINTS, mark_last=mark_last, before=before)
        return out

    def calls(self, response: Mapping[str, Any]) -> list[Call]:
        return [
            Call(str(b.get("id")), str(b.get("name")), n)
            for n, b in enumerate(response.get("content") or ())
            if isinstance(b, dict) and b.get("type") == "tool_use"
        ]

    def assistant(self, response: Mapping[str, Any]) -> Message | None:
        content = response.get("content")
        if not isinstance(content, list):
            return None
        try:
            parsed = parse_anthropic([{"role": "assistant", "content": content}])
        except MalformedMessage:
            return None
        return parsed[0] if parsed else None

    def without(self, response: Mapping[str, Any], ids: Collection[str]) -> dict[str, Any]:
        out = dict(response)
        out["content"] = [
            b
            for b in response.get("content") or ()
            if not (b.get("type") == "tool_use" and b.get("id") in ids)
        ]
        return out

    def accumulate(self, events: Sequence[Event]) -> dict[str, Any]:
        message: dict[str, Any] = {"type": "message", "role": "assistant", "content": []}
        blocks: dict[int, dict[str, Any]] = {}
        partial: dict[int, list[str]] = {}
        for event in events:
            data = event.data if isinstance(event.data, dict) else {}
            kind = data.get("type")
            if kind == "message_start":
                message = copy.deepcopy(data.get("message") or message)
            elif kind == "content_block_start":
                index = int(data.get("index", len(blocks)))
                blocks[index] = copy.deepcopy(data.get("content_block") or {})
            elif kind == "content_block_delta":
                index = int(data.get("index", 0))
                block = blocks.setdefault(index, {})
                delta = data.get("delta") or {}
                _apply_anthropic_delta(block, delta, partial.setdefault(index, []))
            elif kind == "message_delta":
                message.update(data.get("delta") or {})
                if isinstance(data.get("usage"), dict):
                    message["usage"] = {**(message.get("usage") or {}), **data["usage"]}
        for index, pieces in partial.items():
            text = "".join(pieces)
            try:
                blocks[index]["input"] = json.loads(text) if text.strip() else {}
            except json.JSONDecodeError:
                blocks[index]["input"] = {}
        message["content"] = [blocks[i] for i in sorted(blocks)]
        return message

    def filter_events(self, events: Sequence[Event], calls: Sequence[Call]) -> list[str]:
        removed = {c.position for c in calls}
        out = []
        for event in events:
            data = event.data
            if (
                isinstance(data, dict)
                and "index" in data
                and data.get("type", "").startswith("content_block")
            ):
                index = int(data["index"])
                if index in removed:
                    continue
                if _shift(index, removed) != index:
                    out.append(encode({**data, "index": _shift(index, removed)}, event.name))
                    continue
            out.append(event.raw)
        return out

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = _ANTHROPIC_ERRORS.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}

    def error_event(self, message: str) -> str:
        return encode(self.error_body(500, message), "error")

    def client_key(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> str | None:
        session = headers.get("x-claude-code-session-id")
        if session:
            return session
        metadata = body.get("metadata")
        user = metadata.get("user_id") if isinstance(metadata, dict) else None
        if not isinstance(user, str) or not user:
            return None
        try:  # Claude Code puts a JSON object there, with the session among its fields
            decoded = json.loads(user)
        except json.JSONDecodeError:
            return user
        if isinstance(decoded, dict) and isinstance(decoded.get("session_id"), str):
            return str(decoded["session_id"])
        return user


def _apply_anthropic_delta(
    block: dict[str, Any], delta: Mapping[str, Any], json_parts: list[str]
) -> None:
    kind = delta.get("type")
    if kind == "text_delta":
        block["text"] = block.get("text", "") + str(delta.get("text", ""))
    elif kind == "input_json_delta":
        json_parts.append(str(delta.get("partial_json", "")))
    elif kind == "thinking_delta":
        block["thinking"] = block.get("thinking", "") + str(delta.get("thinking", ""))
    elif kind == "signature_delta":
        block["signature"] = block.get("signature", "") + str(delta.get("signature", ""))
    elif kind == "citations_delta":
        block.setdefault("citations", []).append(delta.get("citation"))


_MARK = {"type": "ephemeral"}
_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})


def _marked(block: Any) -> bool:
    return isinstance(block, dict) and "cache_control" in block


def _text_of(system: Any) -> str:
    if isinstance(system, str):
        return system
    return "".join(
        str(b.get("text", ""))
        for b in system or ()
        if isinstance(b, dict) and b.get("type") == "text"
    )


def _system_blocks(client: Any, rendered: Sequence[Mapping[str, Any]]) -> list[Any]:
    """The client's system blocks as sent, then what the proxy adds: the rendered prompt's text
    beyond the client's (the layout's guide) and the rendered blocks after the prompt."""
    if client is None or client == "" or client == []:
        return list(rendered)
    blocks: list[Any] = (
        [{"type": "text", "text": client}] if isinstance(client, str) else list(client)
    )
    if not rendered:
        return blocks
    prompt = str(rendered[0].get("text", ""))
    own = _text_of(client)
    if prompt.startswith(own):
        extra = prompt[len(own) :].strip()
        return [*blocks, *([{"type": "text", "text": extra}] if extra else []), *rendered[1:]]
    return [*blocks, *rendered]


def _holds_result(message: Any, calls: Collection[str]) -> bool:
    content = message.get("content") if isinstance(message, dict) else None
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" and b.get("tool_use_id") in calls
        for b in content
    )


def _mark(blocks: list[Any], index: int) -> None:
    blocks[index] = {**blocks[index], "cache_control": dict(_MARK)}


def place_breakpoints(
    body: dict[str, Any], limit: int, *, mark_last: bool = False, before: Collection[str] = ()
) -> None:
    """The cache marks of a managed Anthropic request (decision 0047). The client's own marks on
    its tools and system blocks stay (the stable prefix it chose). In the conversation, a mark
    goes where the next request's prefix is expected to change: on the last block of the last
    assistant message before the first tool result (in the prompt) for one of ``before`` (the
    outputs the policy foresees, or the session's history expects, to collapse next:
    ``ShownOutputs.marks``, decisions 0047 and 0069), and one on the last assistant message's
    last block, which reads what the previous request wrote. What follows is billed once,
    uncached, rather than written at a premium and never read. With ``mark_last`` (no output is
    expected to collapse), the last block gets a mark too. At most ``limit`` marks: beyond it
    the client's earliest are dropped."""
    messages = body.get("messages") or []
    wanted: list[tuple[int, int]] = []
    ends = [len(messages)]
    if before:
        ends.append(
            next((m for m in range(len(messages)) if _holds_result(messages[m], before)), 0)
        )
    for end in ends:
        for m in range(end - 1, -1, -1):
            message = messages[m]
            content = message.get("content") if isinstance(message, dict) else None
            if message.get("role") != "assistant" or not isinstance(content, list):
                continue
            markable = [
                b for b, block in enumerate(content) if block.get("type") not in _UNMARKABLE
            ]
            if markable and (m, markable[-1]) not in wanted:
                wanted.append((m, markable[-1]))
            break
    last = len(messages) - 1
    if mark_last and messages and isinstance(messages[last].get("content"), list):
        tail = (last, len(messages[last]["content"]) - 1)
        if tail not in wanted and messages[last]["content"]:
            wanted.append(tail)
    tools = list(body.get("tools") or [])
    system = body.get("system") if isinstance(body.get("system"), list) else None
    excess = sum(map(_marked, tools)) + sum(map(_marked, system or ())) + len(wanted) - limit
    for blocks, key in ((tools, "tools"), (system, "system")):  # in the order they are read
        for n, block in enumerate(blocks or ()):
            if excess <= 0:
                break
            if _marked(block):
                blocks[n] = {k: v for k, v in block.items() if k != "cache_control"}  # type: ignore[index]
                excess -= 1
        if blocks is not None:
            body[key] = blocks
    for m, b in wanted[: max(0, limit)]:
        content = list(messages[m]["content"])
        _mark(content, b)
        messages[m] = {**messages[m], "content": content}


# -- OpenAI Chat Completions -------------------------------------------------------------------


def _openai_error(status: int, message: str) -> dict[str, Any]:
    kind = {401: "authentication_error", 404: "not_found_error", 429: "rate_limit_error"}.get(
        status, "invalid_request_error" if status < 500 else "server_error"
    )
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


class Chat(Provider):
    """``POST /v1/chat/completions``."""

    name = "openai"
    path = "/v1/chat/completions"
    family = "openai"

    def conversation(self, body: Mapping[str, Any]) -> tuple[Any, Any]:
        return body.get("messages"), None

    def parse_items(self, items: list[Any], offset: int) -> list[Message]:
        return parse_openai(items, offset=offset)

    def managed(
        self, body: Mapping[str, Any], rendered: Mapping[str, Any], tools: Sequence[Any]
    ) -> dict[str, Any]:
        out = dict(body)
        out["messages"] = rendered["messages"]
        out["tools"] = [*(body.get("tools") or ()), *tools]
        return out

    @staticmethod
    def _message(response: Mapping[str, Any]) -> dict[str, Any]:
        choices = response.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            message = choices[0].get("message")
            if isinstance(message, dict):
                return message
        return {}

    def calls(self, response: Mapping[str, Any]) -> list[Call]:
        return [
            Call(str(c.get("id")), str((c.get("function") or {}).get("name")), n)
            for n, c in enumerate(self._message(response).get("tool_calls") or ())
            if isinstance(c, dict)
        ]

    def assistant(self, response: Mapping[str, Any]) -> Message | None:
        message = self._message(response)
        if not message:
            return None
        try:
            parsed = parse_openai([{**message, "role": "assistant"}])
        except MalformedMessage:
            return None
        return parsed[0]

    def without(self, response: Mapping[str, Any], ids: Collection[str]) -> dict[str, Any]:
        out = copy.deepcopy(dict(response))
        message = self._message(out)
        kept = [c for c in message.get("tool_calls") or () if c.get("id") not in ids]
        if kept:
            message["tool_calls"] = kept
        else:
            message.pop("tool_calls", None)
        return out

    def accumulate(self, events: Sequence[Event]) -> dict[str, Any]:
        response: dict[str, Any] = {"object": "chat.completion", "choices": []}
        message: dict[str, Any] = {"role": "assistant", "content": None}
        calls: dict[int, dict[str, Any]] = {}
        finish = None
        for event in events:
            chunk = event.data if isinstance(event.data, dict) else None
            if chunk is None:
                continue
            for key in ("id", "created", "model", "system_fingerprint", "usage"):
                if chunk.get(key) is not None:
                    response[key] = chunk[key]
            for choice in chunk.get("choices") or ():
                if choice.get("index", 0) != 0:
                    continue
                delta = choice.get("delta") or {}
                if isinstance(delta.get("content"), str):
                    message["content"] = (message["content"] or "") + delta["content"]
                for piece in delta.get("tool_calls") or ():
                    call = calls.setdefault(
                        int(piece.get("index", 0)),
                        {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                    )
                    call["id"] = piece.get("id") or call["id"]
                    function = piece.get("function") or {}
                    call["function"]["name"] += function.get("name") or ""
                    call["function"]["arguments"] += function.get("arguments") or ""
                finish = choice.get("finish_reason") or finish
        if calls:
            message["tool_calls"] = [calls[i] for i in sorted(calls)]
        response["choices"] = [{"index": 0, "message": message, "finish_reason": finish}]
        return response

    def filter_events(self, events: Sequence[Event], calls: Sequence[Call]) -> list[str]:
        removed = {c.position for c in calls}
        out = []
        for event in events:
            chunk = event.data
            pieces = [
                p
                for choice in (chunk.get("choices") or () if isinstance(chunk, dict) else ())
                for p in (choice.get("delta") or {}).get("tool_calls") or ()
            ]
            if not pieces:
                out.append(event.raw)
                continue
            chunk = copy.deepcopy(chunk)
            for choice in chunk["choices"]:
                delta = choice.get("delta") or {}
                if "tool_calls" not in delta:
                    continue
                kept = []
                for piece in delta["tool_calls"]:
                    index = int(piece.get("index", 0))
                    if index not in removed:
                        kept.append({**piece, "index": _shift(index, removed)})
                if kept:
                    delta["tool_calls"] = kept
                else:
                    del delta["tool_calls"]
            out.append(encode(chunk))
        return out

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return _openai_error(status, message)

    def error_event(self, message: str) -> str:
        return encode(_openai_error(500, message))


# -- OpenAI Responses --------------------------------------------------------------------------


class Responses(Provider):
    """``POST /v1/responses``."""

    name = "responses"
    path = "/v1/responses"
    family = "openai"

    def conversation(self, body: Mapping[str, Any]) -> tuple[Any, Any]:
        return body.get("input"), body.get("instructions")

    def parse_items(self, items: list[Any], offset: int) -> list[Message]:
        return parse_responses(items, offset=offset)

    def managed(
        self, body: Mapping[str, Any], rendered: Mapping[str, Any], tools: Sequence[Any]
    ) -> dict[str, Any]:
        out = dict(body)
        out.pop("instructions", None)  # the system prompt is the first item of the input now
        out["input"] = rendered["input"]
        out["tools"] = [*(body.get("tools") or ()), *tools]
        return out

    def calls(self, response: Mapping[str, Any]) -> list[Call]:
        return [
            Call(str(item.get("call_id")), str(item.get("name")), n)
            for n, item in enumerate(response.get("output") or ())
            if isinstance(item, dict) and item.get("type") == "function_call"
        ]

    def assistant(self, response: Mapping[str, Any]) -> Message | None:
        output = response.get("output")
        if not isinstance(output, list):
            return None
        items = [
            {**item, "role": "assistant"} if item.get("type") == "message" else item
            for item in output
            if isinstance(item, dict)
        ]
        try:
            parsed = parse_responses(items)
        except MalformedMessage:
            return None
        assistants = [m for m in parsed if m.role == "assistant"]
        if len(assistants) != 1:
            return None
        return assistants[0]

    def without(self, response: Mapping[str, Any], ids: Collection[str]) -> dict[str, Any]:
        out = dict(response)
        out["output"] = _without_calls(response.get("output") or (), ids)
        return out

    def accumulate(self, events: Sequence[Event]) -> dict[str, Any]:
        response: dict[str, Any] = {"object": "response", "output": []}
        done: dict[int, Any] = {}
        for event in events:
            data = event.data if isinstance(event.data, dict) else {}
            kind = data.get("type", event.name)
            if isinstance(data.get("response"), dict):
                response = copy.deepcopy(data["response"])
            if kind == "response.output_item.done":
                done[int(data.get("output_index", len(done)))] = data.get("item")
        if not response.get("output") and done:
            response["output"] = [done[i] for i in sorted(done)]
        return response

    def filter_events(self, events: Sequence[Event], calls: Sequence[Call]) -> list[str]:
        removed = {c.position for c in calls}
        ids = {c.id for c in calls}
        out = []
        sequence = 0
        for event in events:
            data = event.data
            if not isinstance(data, dict):
                out.append(event.raw)
                continue
            if "output_index" in data and int(data["output_index"]) in removed:
                continue
            changed = dict(data)
            if "output_index" in data:
                changed["output_index"] = _shift(int(data["output_index"]), removed)
            if "sequence_number" in data:
                changed["sequence_number"] = sequence
                sequence += 1
            if isinstance(data.get("response"), dict):
                inner = dict(data["response"])
                inner["output"] = _without_calls(inner.get("output") or (), ids)
                changed["response"] = inner
            out.append(event.raw if changed == data else encode(changed, event.name))
        return out

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return _openai_error(status, message)

    def error_event(self, message: str) -> str:
        body = {"type": "error", "code": "proxy_error", "message": message, "param": None}
        return encode(body, "error")

    def client_key(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> str | None:
        for name in ("session-id", "session_id", "thread-id"):
            if headers.get(name):
                return str(headers[name])
        metadata = body.get("client_metadata")
        if isinstance(metadata, dict) and isinstance(metadata.get("session_id"), str):
            return str(metadata["session_id"])
        key = body.get("prompt_cache_key")
        return key if isinstance(key, str) and key else None


def _without_calls(output: Sequence[Any], ids: Collection[str]) -> list[Any]:
    return [
        item
        for item in output
        if not (
            isinstance(item, dict)
            and item.get("type") == "function_call"
            and item.get("call_id") in ids
        )
    ]


PROVIDERS: Mapping[str, Provider] = {p.path: p for p in (Anthropic(), Chat(), Responses())}
"""The providers by the path they serve."""
