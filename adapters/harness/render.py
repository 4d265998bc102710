"""The assembled context as a request a provider accepts: OpenAI chat completions or Anthropic
Messages, in the SSOT's order (system prompt, metadata pool, chat, active content).

OpenAI: a system message, a second system message with the metadata lines, the chat (each tool
message right after the assistant message that called it), and the active content as a final user
message. Anthropic: ``system`` as two text blocks (prompt, metadata); the chat with strictly
alternating roles, every ``tool_result`` block first in the user message right after its
``tool_use``; the active content as a text block of the final user message.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pyrsistent import thaw

from domain.errors import InvalidInput
from domain.rendering import AssembledContext, RenderedMessage

__all__ = [
    "ACTIVE_HEADER",
    "METADATA_HEADER",
    "InvalidRequest",
    "to_anthropic",
    "to_openai",
    "validate_anthropic",
    "validate_openai",
]

METADATA_HEADER = (
    "Objects in this session, one per line. Full content is shown only for active objects; "
    "use activate(id) to load one, deactivate(id) to collapse it, pin(id) to keep a tool output "
    "from collapsing."
)
ACTIVE_HEADER = "Active content:"
_NO_RESULT = "no result was recorded for this tool call"


class InvalidRequest(InvalidInput):
    """An assembled request breaks its provider's rules (a bug if it ever happens)."""

    kind = "invalid_provider_request"


def _arguments_json(arguments: Mapping[str, Any]) -> str:
    plain = thaw(arguments)
    if set(plain) == {"_raw", "_error"} and isinstance(plain["_raw"], str):
        return plain["_raw"]  # the model's own (invalid) JSON, given back as it was
    return json.dumps(plain, ensure_ascii=False)


def _paired(chat: Sequence[RenderedMessage]) -> list[RenderedMessage]:
    """Chat messages with each assistant's tool results moved right after it, in call order; a
    call without a recorded result gets a placeholder (providers reject unpaired calls)."""
    results: dict[str | None, RenderedMessage | None] = {
        m.toolcall_id: m for m in chat if m.role == "tool"
    }
    out: list[RenderedMessage] = []
    for message in chat:
        if message.role == "tool":
            continue
        out.append(message)
        for call in message.tool_calls:
            out.append(
                results.pop(call.id, None)
                or RenderedMessage(
                    "tool", f"toolcall_ref id={call.id} ({_NO_RESULT})", toolcall_id=call.id
                )
            )
    return out


def _active_text(context: AssembledContext) -> str:
    return f"{ACTIVE_HEADER}\n\n{context.active_text()}"


def _metadata_text(context: AssembledContext) -> str:
    return f"{METADATA_HEADER}\n{context.metadata_text()}"


def to_openai(context: AssembledContext) -> dict[str, Any]:
    """``{"messages": [...]}`` for the chat-completions API."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": context.system_prompt}]
    if context.metadata:
        messages.append({"role": "system", "content": _metadata_text(context)})
    for message in _paired(context.chat):
        if message.role == "user":
            messages.append({"role": "user", "content": message.text})
        elif message.role == "assistant":
            item: dict[str, Any] = {"role": "assistant", "content": message.text or None}
            if message.tool_calls:
                item["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {
                            "name": call.name,
                            "arguments": _arguments_json(call.arguments),
                        },
                    }
                    for call in message.tool_calls
                ]
            elif not message.text:
                item["content"] = ""
            messages.append(item)
        else:
            messages.append(
                {"role": "tool", "tool_call_id": message.toolcall_id, "content": message.text}
            )
    if context.active:
        messages.append({"role": "user", "content": _active_text(context)})
    return {"messages": messages}


def _blocks(message: RenderedMessage, errors: Mapping[str, bool]) -> list[dict[str, Any]]:
    if message.role == "user":
        return [{"type": "text", "text": message.text}] if message.text else []
    if message.role == "tool":
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": message.toolcall_id,
            "content": message.text,
        }
        if errors.get(message.toolcall_id or ""):
            block["is_error"] = True
        return [block]
    blocks: list[dict[str, Any]] = [{"type": "text", "text": message.text}] if message.text else []
    blocks += [
        {"type": "tool_use", "id": c.id, "name": c.name, "input": thaw(c.arguments)}
        for c in message.tool_calls
    ]
    return blocks


def to_anthropic(context: AssembledContext, *, cache_control: bool = True) -> dict[str, Any]:
    """``{"system": [...], "messages": [...]}`` for the Messages API.

    With ``cache_control``, two cache breakpoints mark the end of the stable prefix: the last
    system block, and the last block of the chat (before the active content, which changes from
    turn to turn in the SSOT layout; in the inline layout nothing follows the chat)."""
    system: list[dict[str, Any]] = [
        {"type": "text", "text": context.system_prompt or "(no system prompt)"}
    ]
    if context.metadata:
        system.append({"type": "text", "text": _metadata_text(context)})
    errors = {m.toolcall_id or "": m.text.endswith("status=fail") for m in context.chat}
    messages: list[dict[str, Any]] = []
    for message in _paired(context.chat):
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message, errors)
        if not blocks:
            continue
        if messages and messages[-1]["role"] == role:
            merged = messages[-1]["content"] + blocks
            # tool_result blocks must come first in a user message
            merged.sort(key=lambda b: 0 if b["type"] == "tool_result" else 1)
            messages[-1]["content"] = merged
        else:
            messages.append({"role": role, "content": blocks})
    if not messages or messages[0]["role"] != "user":
        messages.insert(
            0, {"role": "user", "content": [{"type": "text", "text": "(session start)"}]}
        )
    if cache_control:
        system[-1]["cache_control"] = {"type": "ephemeral"}
        messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    if context.active:
        active = {"type": "text", "text": _active_text(context)}
        if messages[-1]["role"] == "user":
            messages[-1]["content"].append(active)
        else:
            messages.append({"role": "user", "content": [active]})
    return {"system": system, "messages": messages}


def validate_openai(request: Mapping[str, Any]) -> None:
    """Raise :class:`InvalidRequest` unless every tool message answers a call of the assistant
    message just before its run of tool messages, and every call is answered."""
    pending: list[str] = []
    for n, message in enumerate(request["messages"]):
        role = message.get("role")
        if role == "tool":
            if message.get("tool_call_id") not in pending:
                raise InvalidRequest("message", n, "tool message answers no pending call")
            pending.remove(message["tool_call_id"])
            continue
        if pending:
            raise InvalidRequest("message", n, f"calls {pending} are unanswered")
        if role == "assistant":
            pending = [c["id"] for c in message.get("tool_calls", [])]
            if len(set(pending)) != len(pending):
                raise InvalidRequest("message", n, "duplicate tool call ids")
        elif role not in ("system", "user"):
            raise InvalidRequest("message", n, f"unknown role {role!r}")
        if not isinstance(message.get("content"), str | type(None)):
            raise InvalidRequest("message", n, "content must be a string")
    if pending:
        raise InvalidRequest("message", len(request["messages"]), f"calls {pending} are unanswered")


def validate_anthropic(request: Mapping[str, Any]) -> None:
    """Raise :class:`InvalidRequest` unless roles alternate starting with user, and each
    assistant's tool_use ids are answered by tool_result blocks at the start of the next message."""
    messages = request["messages"]
    if not messages or messages[0]["role"] != "user":
        raise InvalidRequest("message", 0, "the first message must be from the user")
    expected: set[str] = set()
    for n, message in enumerate(messages):
        if n and message["role"] == messages[n - 1]["role"]:
            raise InvalidRequest("message", n, "roles must alternate")
        blocks = message["content"]
        if not blocks:
            raise InvalidRequest("message", n, "empty content")
        results = [b["tool_use_id"] for b in _leading(blocks, "tool_result")]
        if any(b["type"] == "tool_result" for b in blocks[len(results) :]):
            raise InvalidRequest("message", n, "tool_result blocks must come first")
        if set(results) != expected:
            raise InvalidRequest("message", n, f"expected results for {sorted(expected)}")
        expected = (
            {b["id"] for b in blocks if b["type"] == "tool_use"}
            if message["role"] == "assistant"
            else set()
        )
    if expected:
        raise InvalidRequest("message", len(messages), "the last tool_use calls are unanswered")


def _leading(blocks: Iterable[Mapping[str, Any]], kind: str) -> list[Mapping[str, Any]]:
    out = []
    for block in blocks:
        if block["type"] != kind:
            break
        out.append(block)
    return out
