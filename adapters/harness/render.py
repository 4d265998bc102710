"""The assembled context as a request a provider accepts: OpenAI chat completions or Anthropic
Messages, in the ``ssot`` layout's order (system prompt, metadata pool, chat, active content).

OpenAI: a system message (when there is a system prompt), one with the metadata lines, the chat
(each tool message right after the assistant message that called it), and the active content as a
final user message. Anthropic: ``system`` as text blocks (prompt, metadata; left out when both are
empty); the chat with strictly alternating roles, every ``tool_result`` block first in the user
message right after its ``tool_use``; the active content as a text block of the final user message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, cast

from selfctx.adapters.harness.ids import emitted_id
from selfctx.domain.chat import thaw_json
from selfctx.domain.errors import InvalidInput
from selfctx.domain.identifiers import MAX_TOOLCALL_ID
from selfctx.domain.inline import INLINE_GUIDE, inline_guide
from selfctx.domain.rendering import AssembledContext, RenderedMessage

__all__ = [
    "ACTIVE_HEADER",
    "METADATA_HEADER",
    "InvalidRequest",
    "RenderMemo",
    "render",
    "to_anthropic",
    "to_openai",
    "to_responses",
    "validate_anthropic",
    "validate_openai",
    "validate_responses",
]

METADATA_HEADER = (
    "Objects in this session, one per line. Full content is shown only for active objects; "
    "use activate(id) to load one, deactivate(id) to collapse it, pin(id) to keep a tool output "
    "from collapsing."
)
"""The metadata section's first line; with a tool prefix, the tool names in it carry it."""
ACTIVE_HEADER = "Active content:"
T = TypeVar("T")
_NO_RESULT = "no result was recorded for this tool call"
_SESSION_START = "(session start)"
"""The first user message of a request that would otherwise have none."""
_ANTHROPIC_REASONING = frozenset({"thinking", "redacted_thinking"})


class InvalidRequest(InvalidInput):
    """An assembled request breaks its provider's rules (a bug if it ever happens)."""

    kind = "invalid_provider_request"


_JSON = json.JSONEncoder(ensure_ascii=False)
"""``json.dumps(value, ensure_ascii=False)``, without building an encoder for each call."""


def _arguments_json(arguments: Mapping[str, Any]) -> str:
    plain = thaw_json(arguments)
    if set(plain) == {"_raw", "_error"} and isinstance(plain["_raw"], str):
        return plain["_raw"]  # the model's own (invalid) JSON, given back as it was
    return _JSON.encode(plain)


def _plain(block: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded provider block as plain JSON again."""
    return dict(thaw_json(block))


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


def _active_images(context: AssembledContext) -> list[Mapping[str, Any]]:
    return [image for block in context.active for image in block.images]


def _image_openai(image: Mapping[str, Any]) -> dict[str, Any]:
    if "url" not in image:  # a provider's stored file: Chat Completions cannot name it
        return {"type": "text", "text": f"[image: file {image.get('file_id')}]"}
    inner = {"url": image["url"]}
    if "detail" in image:
        inner["detail"] = image["detail"]
    return {"type": "image_url", "image_url": inner}


def _image_anthropic(image: Mapping[str, Any]) -> dict[str, Any]:
    url = image.get("url")
    if url is None:
        return {"type": "image", "source": {"type": "file", "file_id": image.get("file_id")}}
    head, sep, data = url.partition(";base64,")
    if url.startswith("data:") and sep:
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": head[len("data:") :], "data": data},
        }
    return {"type": "image", "source": {"type": "url", "url": url}}


def _image_responses(image: Mapping[str, Any]) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "input_image", "detail": image.get("detail", "auto")}
    if "url" in image:
        part["image_url"] = image["url"]
    else:
        part["file_id"] = image.get("file_id")
    return part


def _openai_parts(text: str, images: Sequence[Mapping[str, Any]]) -> str | list[dict[str, Any]]:
    """A message's content: the text alone, or text and image parts when there are images."""
    if not images:
        return text
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    return parts + [_image_openai(image) for image in images]


def _metadata_text(context: AssembledContext, prefix: str = "") -> str:
    header = METADATA_HEADER
    if prefix:
        for name in ("activate", "deactivate", "pin"):
            header = header.replace(f" {name}(id)", f" {prefix}{name}(id)")
    return f"{header}\n{context.metadata_text()}"


def _system_prompt(context: AssembledContext, prefix: str) -> str:
    """The system prompt, with the inline layout's guide naming the tools under ``prefix``."""
    prompt = context.system_prompt
    if prefix and INLINE_GUIDE in prompt:
        prompt = prompt.replace(INLINE_GUIDE, inline_guide(prefix))
    return prompt


def render(
    context: AssembledContext, fmt: str, *, tool_prefix: str = "", memo: RenderMemo | None = None
) -> dict[str, Any]:
    """The request parts for ``fmt`` (``openai``, ``anthropic`` or ``responses``); the metadata
    section names the context tools with ``tool_prefix``."""
    if fmt == "openai":
        return to_openai(context, tool_prefix=tool_prefix, memo=memo)
    if fmt == "anthropic":
        return to_anthropic(context, tool_prefix=tool_prefix, memo=memo)
    if fmt == "responses":
        return to_responses(context, tool_prefix=tool_prefix, memo=memo)
    raise InvalidInput("format", fmt, "use 'openai', 'anthropic' or 'responses'")


class RenderMemo:
    """Each chat message's rendering, kept from one request to the next (one session, one
    format): the domain's render caches hand back the same message objects while they do not
    change, so only new or changed messages are rendered again. The renderings are shared: the
    requests built with a memo must not be changed in place."""

    def __init__(self) -> None:
        self._kept: dict[int, tuple[RenderedMessage, Any]] = {}
        self._used: dict[int, tuple[RenderedMessage, Any]] = {}

    def get(self, message: RenderedMessage, make: Callable[[RenderedMessage], T]) -> T:
        hit = self._kept.get(id(message))
        if hit is None or hit[0] is not message:
            hit = (message, make(message))
        self._used[id(message)] = hit
        return cast(T, hit[1])

    def done(self) -> None:
        """End of one request: keep only what it used (the memo never outgrows the context)."""
        self._kept, self._used = self._used, {}


def _each(
    messages: Iterable[RenderedMessage],
    make: Callable[[RenderedMessage], T],
    memo: RenderMemo | None,
) -> Iterator[tuple[RenderedMessage, T]]:
    for message in messages:
        yield message, (make(message) if memo is None else memo.get(message, make))
    if memo is not None:
        memo.done()


def _openai_message(message: RenderedMessage) -> dict[str, Any]:
    if message.role == "user":
        return {"role": "user", "content": _openai_parts(message.text, message.images)}
    if message.role == "tool":
        call_id = emitted_id(message.toolcall_id or "")
        return {"role": "tool", "tool_call_id": call_id, "content": message.text}
    item: dict[str, Any] = {"role": "assistant", "content": message.text or None}
    if message.tool_calls:
        item["tool_calls"] = [
            {
                "id": emitted_id(call.id),
                "type": "function",
                "function": {"name": call.name, "arguments": _arguments_json(call.arguments)},
            }
            for call in message.tool_calls
        ]
    elif not message.text:
        item["content"] = ""
    return item


def to_openai(
    context: AssembledContext, *, tool_prefix: str = "", memo: RenderMemo | None = None
) -> dict[str, Any]:
    """``{"messages": [...]}`` for the chat-completions API."""
    prompt = _system_prompt(context, tool_prefix)
    # No system prompt, no system message: an empty one is noise a provider may refuse.
    messages: list[dict[str, Any]] = []
    if prompt.strip():
        messages.append({"role": "system", "content": prompt})
    if context.metadata:
        messages.append({"role": "system", "content": _metadata_text(context, tool_prefix)})
    # A tool message holds text only: its images follow its assistant's results as a user message.
    shown: list[dict[str, Any]] = []
    for message, item in _each(_paired(context.chat), _openai_message, memo):
        if shown and message.role != "tool":
            messages.append({"role": "user", "content": shown})
            shown = []
        messages.append(item)
        if message.role == "tool" and message.images:
            call_id = emitted_id(message.toolcall_id or "")
            shown.append({"type": "text", "text": f"[images of tool call {call_id}]"})
            shown += [_image_openai(image) for image in message.images]
    if shown:
        messages.append({"role": "user", "content": shown})
    if context.active:
        content = _openai_parts(_active_text(context), _active_images(context))
        messages.append({"role": "user", "content": content})
    if not messages:  # a session with nothing yet: providers refuse an empty list
        messages.append({"role": "user", "content": _SESSION_START})
    return {"messages": messages}


def _blocks(message: RenderedMessage) -> list[dict[str, Any]]:
    # Anthropic refuses text blocks without non-whitespace text: such text is no block.
    if message.role == "user":
        text = [{"type": "text", "text": message.text}] if message.text.strip() else []
        return text + [_image_anthropic(image) for image in message.images]
    if message.role == "tool":
        content: Any = message.text
        if message.images:
            content = [{"type": "text", "text": message.text}] if message.text.strip() else []
            content += [_image_anthropic(image) for image in message.images]
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": emitted_id(message.toolcall_id or ""),
            "content": content,
        }
        if message.is_error:
            block["is_error"] = True
        return [block]
    # Thinking blocks go first, unchanged: the provider checks their signatures.
    blocks: list[dict[str, Any]] = [
        _plain(b) for b in message.reasoning if b.get("type") in _ANTHROPIC_REASONING
    ]
    if message.text.strip():
        blocks.append({"type": "text", "text": message.text})
    blocks += [
        {
            "type": "tool_use",
            "id": emitted_id(c.id),
            "name": c.name,
            "input": thaw_json(c.arguments),
        }
        for c in message.tool_calls
    ]
    return blocks


def to_anthropic(
    context: AssembledContext,
    *,
    cache_control: bool = True,
    tool_prefix: str = "",
    memo: RenderMemo | None = None,
) -> dict[str, Any]:
    """``{"system": [...], "messages": [...]}`` for the Messages API (``system`` only when there
    is a system prompt or metadata).

    With ``cache_control``, two cache breakpoints mark the end of the stable prefix: the last
    system block, and the last block of the chat (before the active content, which changes from
    turn to turn in the ssot layout; in the inline layout nothing follows the chat)."""
    system: list[dict[str, Any]] = []
    if context.system_prompt.strip():  # no prompt, no block (Anthropic's system is optional)
        system.append({"type": "text", "text": _system_prompt(context, tool_prefix)})
    if context.metadata:
        system.append({"type": "text", "text": _metadata_text(context, tool_prefix)})
    messages: list[dict[str, Any]] = []
    # The blocks may be shared with a memo: lists are copied and blocks replaced, never changed.
    for message, blocks in _each(_paired(context.chat), _blocks, memo):
        role = "assistant" if message.role == "assistant" else "user"
        if not blocks:
            continue
        if messages and messages[-1]["role"] == role:
            merged = messages[-1]["content"] + blocks
            # tool_result blocks must come first in a user message
            merged.sort(key=lambda b: 0 if b["type"] == "tool_result" else 1)
            messages[-1]["content"] = merged
        else:
            messages.append({"role": role, "content": list(blocks)})
    if not messages or messages[0]["role"] != "user":
        messages.insert(0, {"role": "user", "content": [{"type": "text", "text": _SESSION_START}]})
    last_blocks = messages[-1]["content"]
    prefill = messages[-1]["role"] == "assistant" and not context.active
    if prefill and last_blocks[-1]["type"] == "text":
        # A final assistant message is a prefill, which may not end with whitespace.
        last_blocks[-1] = {**last_blocks[-1], "text": last_blocks[-1]["text"].rstrip()}
    if cache_control:
        if system:
            system[-1]["cache_control"] = {"type": "ephemeral"}
        last_blocks[-1] = {**last_blocks[-1], "cache_control": {"type": "ephemeral"}}
    if context.active:
        active = [{"type": "text", "text": _active_text(context)}]
        active += [_image_anthropic(image) for image in _active_images(context)]
        if messages[-1]["role"] == "user":
            messages[-1]["content"] += active
        else:
            messages.append({"role": "user", "content": active})
    request: dict[str, Any] = {"messages": messages}
    if system:
        request["system"] = system
    return request


def to_responses(
    context: AssembledContext, *, tool_prefix: str = "", memo: RenderMemo | None = None
) -> dict[str, Any]:
    """``{"input": [...]}`` for the OpenAI Responses API: the system prompt and the metadata as
    ``developer`` messages, the chat as ``message``, ``function_call`` and
    ``function_call_output`` items (an assistant's recorded ``reasoning`` items first), the active
    content as a final user message."""
    prompt = _system_prompt(context, tool_prefix)
    items: list[dict[str, Any]] = []
    if prompt.strip():  # no prompt, no message (as in the other formats)
        items.append(_responses_message("developer", prompt))
    if context.metadata:
        items.append(_responses_message("developer", _metadata_text(context, tool_prefix)))
    for _, rendered in _each(_paired(context.chat), _responses_items, memo):
        items += rendered
    if context.active:
        active = _responses_message("user", _active_text(context))
        active["content"] += [_image_responses(image) for image in _active_images(context)]
        items.append(active)
    return {"input": items}


def _responses_items(message: RenderedMessage) -> list[dict[str, Any]]:
    if message.role == "user":
        item = _responses_message("user", message.text)
        item["content"] += [_image_responses(image) for image in message.images]
        return [item]
    if message.role == "tool":
        output: Any = message.text
        if message.images:
            output = [{"type": "input_text", "text": message.text}]
            output += [_image_responses(image) for image in message.images]
        call_id = emitted_id(message.toolcall_id or "")
        return [{"type": "function_call_output", "call_id": call_id, "output": output}]
    items = [_plain(b) for b in message.reasoning if b.get("type") == "reasoning"]
    if message.text or not message.tool_calls:
        items.append(_responses_message("assistant", message.text))
    items += [
        {
            "type": "function_call",
            "call_id": emitted_id(call.id),
            "name": call.name,
            "arguments": _arguments_json(call.arguments),
        }
        for call in message.tool_calls
    ]
    return items


def _responses_message(role: str, text: str) -> dict[str, Any]:
    part = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": part, "text": text}]}


def validate_responses(request: Mapping[str, Any]) -> None:
    """Raise :class:`InvalidRequest` unless ``input`` is a non-empty list of well-formed items
    (messages with a known role and typed text parts, ``function_call`` items with unique
    ``call_id``, a name and JSON-string arguments), every ``function_call_output`` answers an
    earlier call once, and every call is answered."""
    items = request.get("input") if isinstance(request, Mapping) else None
    if not isinstance(items, list) or not items:
        raise InvalidRequest("request", "input", "must be a non-empty list of items")
    calls: set[str] = set()
    answered: set[str] = set()
    for n, item in enumerate(items):
        kind = item.get("type") if isinstance(item, Mapping) else None
        if kind == "message":
            if item.get("role") not in ("system", "developer", "user", "assistant"):
                raise _bad(n, f"unknown role {item.get('role')!r}")
            if not _parts(item.get("content"), ("input_text", "output_text", "input_image")):
                raise _bad(n, "content must be a list of text and image parts")
        elif kind == "function_call":
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not call_id or call_id in calls:
                raise _bad(n, f"call_id {call_id!r} is missing or used twice")
            if not isinstance(item.get("name"), str) or not isinstance(item.get("arguments"), str):
                raise _bad(n, f"function_call {call_id!r} needs a name and JSON-string arguments")
            calls.add(call_id)
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if call_id not in calls or call_id in answered:
                raise _bad(n, f"output for {call_id!r} answers no pending call")
            output = item.get("output")
            if not isinstance(output, str) and not _parts(output, ("input_text", "input_image")):
                raise _bad(n, "output must be a string or a list of text and image parts")
            answered.add(call_id)
        elif kind != "reasoning":
            raise _bad(n, f"unknown item type {kind!r}")
    if calls != answered:
        raise _bad(len(items), f"calls {sorted(calls - answered)} are unanswered")


def _bad(n: int, reason: str) -> InvalidRequest:
    return InvalidRequest("message", n, reason)


def _messages_of(request: Any) -> list[Any]:
    messages = request.get("messages") if isinstance(request, Mapping) else None
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("request", "messages", "must be a non-empty list of messages")
    return messages


def validate_openai(request: Mapping[str, Any]) -> None:
    """Raise :class:`InvalidRequest` unless every message is well formed (string content; tool
    calls with unique ids, a name and JSON-string arguments), every tool message answers a call
    of the assistant message just before its run of tool messages, and every call is answered."""
    messages = _messages_of(request)
    pending: list[str] = []
    seen: set[str] = set()
    for n, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise _bad(n, "a message must be an object")
        role, content = message.get("role"), message.get("content")
        if role == "tool":
            if message.get("tool_call_id") not in pending:
                raise _bad(n, "tool message answers no pending call")
            if not isinstance(content, str):
                raise _bad(n, "tool content must be a string")
            pending.remove(message["tool_call_id"])
            continue
        if pending:
            raise _bad(n, f"calls {pending} are unanswered")
        if role == "assistant":
            calls = message.get("tool_calls", [])
            if not isinstance(calls, list):
                raise _bad(n, "tool_calls must be a list")
            for call in calls:
                pending.append(_openai_call(n, call, seen))
            if not isinstance(content, str) and not (content is None and calls):
                raise _bad(n, "assistant content must be a string (null only with tool calls)")
        elif role in ("system", "developer"):
            if not isinstance(content, str):
                raise _bad(n, "content must be a string")
        elif role == "user":
            if not isinstance(content, str) and not _parts(content, ("text", "image_url")):
                raise _bad(n, "user content must be a string or a list of text and image parts")
        else:
            raise _bad(n, f"unknown role {role!r}")
    if pending:
        raise _bad(len(messages), f"calls {pending} are unanswered")


def _parts(content: Any, kinds: Sequence[str]) -> bool:
    """``content`` is a non-empty list of parts of the given types, text parts holding text."""
    return (
        isinstance(content, list)
        and bool(content)
        and all(
            isinstance(p, Mapping)
            and p.get("type") in kinds
            and (not p["type"].endswith("text") or isinstance(p.get("text"), str))
            for p in content
        )
    )


def _openai_call(n: int, call: Any, seen: set[str]) -> str:
    function = call.get("function") if isinstance(call, Mapping) else None
    call_id = call.get("id") if isinstance(call, Mapping) else None
    if not isinstance(call_id, str) or not call_id:
        raise _bad(n, "a tool call needs a non-empty string id")
    if len(call_id) > MAX_TOOLCALL_ID:  # OpenAI refuses longer ids
        raise _bad(n, f"tool call id {call_id!r} is longer than {MAX_TOOLCALL_ID} characters")
    if call_id in seen:
        raise _bad(n, f"tool call id {call_id!r} is used twice")
    seen.add(call_id)
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise _bad(n, f"tool call {call_id!r} needs a function with a name")
    if not isinstance(function.get("arguments"), str):
        raise _bad(n, f"tool call {call_id!r}: arguments must be a JSON string")
    return call_id


_ANTHROPIC_ID = re.compile(r"[a-zA-Z0-9_-]+")
"""Anthropic's pattern for tool_use ids (ours, ``TOOLCALL_ID``, are also at most 40 long)."""

_OTHER_BLOCKS = {"image", "document", "thinking", "redacted_thinking"}


def validate_anthropic(request: Mapping[str, Any]) -> None:
    """Raise :class:`InvalidRequest` unless ``system`` is text, roles alternate starting with the
    user, every block is well formed (text blocks hold non-whitespace text, ``tool_use`` only from
    the assistant with a unique id, ``tool_result`` only from the user), and each assistant's
    ``tool_use`` ids are answered, once each, by ``tool_result`` blocks at the start of the next
    message."""
    messages = _messages_of(request)
    _check_system(request.get("system"))
    expected: set[str] = set()
    seen: set[str] = set()
    for n, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise _bad(n, "a message must be an object")
        role = message.get("role")
        if role not in ("user", "assistant"):
            raise _bad(n, f"unknown role {role!r} (Anthropic has user and assistant)")
        if n == 0 and role != "user":
            raise _bad(0, "the first message must be from the user")
        if n and role == messages[n - 1].get("role"):
            raise _bad(n, "roles must alternate")
        content = message.get("content")
        blocks: Any = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list) or not blocks:
            raise _bad(n, "content must be a non-empty string or list of blocks")
        for block in blocks:
            _check_block(n, role, block, seen)
        results = [b["tool_use_id"] for b in _leading(blocks, "tool_result")]
        if any(b["type"] == "tool_result" for b in blocks[len(results) :]):
            raise _bad(n, "tool_result blocks must come first")
        if len(set(results)) != len(results) or set(results) != expected:
            raise _bad(n, f"expected one result for each of {sorted(expected)}")
        expected = {b["id"] for b in blocks if b["type"] == "tool_use"}
    if expected:
        raise _bad(len(messages), "the last tool_use calls are unanswered")
    last = blocks[-1]
    if role == "assistant" and last["type"] == "text" and last["text"] != last["text"].rstrip():
        raise _bad(len(messages) - 1, "a final assistant message may not end with whitespace")


def _check_system(system: Any) -> None:
    if system is None or isinstance(system, str):
        return
    if not isinstance(system, list):
        raise InvalidRequest("request", "system", "must be a string or a list of text blocks")
    for block in system:
        if not isinstance(block, Mapping) or block.get("type") != "text":
            raise InvalidRequest("request", "system", "must hold text blocks only")
        if not isinstance(block.get("text"), str) or not block["text"].strip():
            raise InvalidRequest("request", "system", "text blocks must hold non-whitespace text")


def _check_block(n: int, role: str, block: Any, seen: set[str]) -> None:
    kind = block.get("type") if isinstance(block, Mapping) else None
    if kind == "text":
        if not isinstance(block.get("text"), str) or not block["text"].strip():
            raise _bad(n, "text blocks must hold non-whitespace text")
    elif kind == "tool_use":
        call_id = block.get("id")
        if role != "assistant":
            raise _bad(n, "tool_use blocks come from the assistant")
        if not isinstance(call_id, str) or not call_id or call_id in seen:
            raise _bad(n, f"tool_use id {call_id!r} is missing or used twice")
        if _ANTHROPIC_ID.fullmatch(call_id) is None:
            raise _bad(n, f"tool_use id {call_id!r} does not match ^[a-zA-Z0-9_-]+$")
        seen.add(call_id)
        if not isinstance(block.get("name"), str) or not isinstance(block.get("input"), Mapping):
            raise _bad(n, f"tool_use {call_id!r} needs a name and an input object")
    elif kind == "tool_result":
        if role != "user":
            raise _bad(n, "tool_result blocks come from the user")
        if not isinstance(block.get("tool_use_id"), str):
            raise _bad(n, "a tool_result needs a tool_use_id")
        if _ANTHROPIC_ID.fullmatch(block["tool_use_id"]) is None:
            raise _bad(n, f"tool_use_id {block['tool_use_id']!r} does not match ^[a-zA-Z0-9_-]+$")
        if not isinstance(block.get("content", ""), str | list):
            raise _bad(n, "tool_result content must be a string or a list of blocks")
    elif kind not in _OTHER_BLOCKS:
        raise _bad(n, f"unknown block {kind!r}")


def _leading(blocks: Iterable[Mapping[str, Any]], kind: str) -> list[Mapping[str, Any]]:
    out = []
    for block in blocks:
        if block["type"] != kind:
            break
        out.append(block)
    return out
