"""Provider message lists in, one neutral form out: OpenAI chat completions and Anthropic Messages.

Parsing validates the whole list before anything is recorded: a malformed message raises
:class:`MalformedMessage` naming its index, so a harness bug never leaves half a list ingested.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal

import attrs

from selfctx.domain.chat import ToolCallRequest, thaw_json
from selfctx.domain.errors import InvalidInput
from selfctx.domain.hashing import stable_stringify

__all__ = [
    "FORMATS",
    "MAX_ARGUMENT_NESTING",
    "MAX_MESSAGE_CHARS",
    "SYSTEM_MARK",
    "Format",
    "MalformedMessage",
    "Message",
    "image_of",
    "message_fingerprint",
    "parse_anthropic",
    "parse_messages",
    "parse_openai",
    "parse_responses",
    "tool_fingerprint",
]

Format = Literal["openai", "anthropic", "responses"]
FORMATS: tuple[Format, ...] = ("openai", "anthropic", "responses")
"""``openai``: Chat Completions messages; ``anthropic``: Messages; ``responses``: OpenAI Responses
``input`` items."""

_TEXT_PARTS = frozenset({"text", "input_text", "output_text", "refusal"})
MAX_MESSAGE_CHARS = 8 * 1024 * 1024
"""Longest text a single message may carry (larger ones are refused, not truncated)."""
MAX_ARGUMENT_NESTING = 64
"""Deepest nesting of arrays and objects in a tool call's arguments (every JSON walker recurses:
deeper arguments are refused, or kept as raw text when they came as text)."""


class MalformedMessage(InvalidInput):
    """A message of a harness's list is not valid for its format. Nothing was recorded."""

    kind = "malformed_message"

    def __init__(self, index: int, reason: str) -> None:
        self.index = index
        InvalidInput.__init__(self, "message", index, reason)
        self.args = (f"message {index}: {reason}",)

    def __str__(self) -> str:
        return str(self.args[0])


SYSTEM_MARK: Final = "[system] "
"""How a system message in mid-conversation is kept: as a user message with this mark."""


def message_fingerprint(role: str, text: str, calls: Iterable[tuple[str, str, Any]] = ()) -> str:
    """Identity of a user, system or assistant message: role, text and its calls (the harness's
    id, name and arguments)."""
    if role == "system":  # known by the form it is recorded in, so a resume recognises it
        role, text = "user", SYSTEM_MARK + text
    key = [role, text, [[i, n, thaw_json(a)] for i, n, a in calls]]
    blob = _KEY_ENCODER.encode(key).encode("utf-8", "surrogatepass")
    return hashlib.sha256(blob).hexdigest()[:32]


_KEY_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, sort_keys=True)
"""What ``json.dumps(key, ensure_ascii=False, sort_keys=True)`` builds at every call, built once
(a resume fingerprints every message of the chat again: decision 0104)."""
_escape: Final[Any] = getattr(json.encoder, "c_encode_basestring", None) or (
    json.encoder.py_encode_basestring
)


def tool_fingerprint(call_id: str) -> str:
    """Identity of a tool result: the call it answers (:func:`message_fingerprint` of the key
    ``["tool", "", [[call_id, "", null]]]``, its text written directly)."""
    blob = f'["tool", "", [[{_escape(call_id)}, "", null]]]'.encode("utf-8", "surrogatepass")
    return hashlib.sha256(blob).hexdigest()[:32]


@attrs.frozen
class Message:
    """One message in the neutral form the ingestor records."""

    role: Literal["system", "user", "assistant", "tool"]
    text: str
    tool_calls: tuple[ToolCallRequest, ...] = ()
    """For ``assistant``: the calls it requested."""
    tool_call_id: str | None = None
    """For ``tool``: the call this result answers."""
    is_error: bool = False
    """For ``tool``: the provider marked the result as an error."""
    reasoning: tuple[Mapping[str, Any], ...] = ()
    """For ``assistant``: the provider's reasoning blocks, kept as sent (Anthropic ``thinking`` and
    ``redacted_thinking`` blocks with their signatures, Responses ``reasoning`` items)."""
    images: tuple[Mapping[str, Any], ...] = ()
    """For ``user`` and ``tool``: the images that came with the text (see :func:`image_of`)."""
    index: int = attrs.field(default=-1, eq=False)
    """Position in the harness's list (for error messages)."""

    @functools.cached_property
    def fingerprint(self) -> str:
        """Identity of the message for the ingestion cursor, by the ids it carries: a tool result
        by the call it answers; the others by role, text and their calls (id, name, arguments:
        a harness that reuses ids still tells its calls apart). Computed once per message, so
        that a harness (or the proxy) that keeps its parsed messages from one request to the
        next pays only for the new ones."""
        if self.role == "tool":
            return tool_fingerprint(self.tool_call_id or "")
        calls = [(c.id, c.name, c.arguments) for c in self.tool_calls]
        return message_fingerprint(self.role, self.text, calls)


def _text(value: Any, index: int, what: str) -> str:
    if not isinstance(value, str):
        raise MalformedMessage(index, f"{what} must be a string, got {type(value).__name__}")
    if len(value) > MAX_MESSAGE_CHARS:
        raise MalformedMessage(
            index, f"{what} has {len(value)} characters, over {MAX_MESSAGE_CHARS}"
        )
    return value


def image_of(part: Mapping[str, Any], index: int = -1) -> dict[str, Any] | None:
    """The neutral form of an image part of any of the three formats, or None if ``part`` is
    not an image: ``{"type": "image", "url": ...}`` (a ``data:`` URL for inline images, which
    every format can carry) or ``{"type": "image", "file_id": ...}`` (a provider's stored file,
    which only its own format can name), with ``detail`` when the part gave one."""
    kind = part.get("type")
    image: dict[str, Any]
    if kind == "image_url":  # Chat Completions
        inner = part.get("image_url")
        url = inner.get("url") if isinstance(inner, Mapping) else inner
        image = {"type": "image", "url": url}
        if isinstance(inner, Mapping) and isinstance(inner.get("detail"), str):
            image["detail"] = inner["detail"]
    elif kind == "input_image":  # Responses
        if isinstance(part.get("file_id"), str):
            image = {"type": "image", "file_id": part["file_id"]}
        else:
            image = {"type": "image", "url": part.get("image_url")}
        if isinstance(part.get("detail"), str):
            image["detail"] = part["detail"]
    elif kind == "image":  # Anthropic
        source = part.get("source")
        if not isinstance(source, Mapping):
            raise MalformedMessage(index, "an image block needs a source")
        if source.get("type") == "base64":
            media, data = source.get("media_type"), source.get("data")
            if not isinstance(media, str) or not isinstance(data, str):
                raise MalformedMessage(index, "a base64 image needs media_type and data")
            image = {"type": "image", "url": f"data:{media};base64,{data}"}
        elif source.get("type") == "url":
            image = {"type": "image", "url": source.get("url")}
        elif source.get("type") == "file":
            image = {"type": "image", "file_id": source.get("file_id")}
        else:
            raise MalformedMessage(index, f"unknown image source {source.get('type')!r}")
    else:
        return None
    for key in ("url", "file_id"):
        if key in image and (not isinstance(image[key], str) or not image[key]):
            raise MalformedMessage(index, f"an image's {key} must be a non-empty string")
        if key in image and len(image[key]) > MAX_MESSAGE_CHARS * 4:
            raise MalformedMessage(index, f"an image's {key} is over {MAX_MESSAGE_CHARS * 4}")
    return image


def _content(parts: Any, index: int, what: str) -> tuple[str, tuple[dict[str, Any], ...]]:
    """Text and images of content given as a string or as a list of typed parts: text parts
    (``text``, and Responses' ``input_text``/``output_text``/``refusal``), image parts of any
    format, and others, which are replaced by a marker."""
    if isinstance(parts, str) or parts is None:
        return _text(parts if parts is not None else "", index, what), ()
    if not isinstance(parts, list):
        raise MalformedMessage(index, f"{what} must be a string or a list of parts")
    out: list[str] = []
    images: list[dict[str, Any]] = []
    for part in parts:
        if not isinstance(part, Mapping) or not isinstance(part.get("type"), str):
            raise MalformedMessage(index, f"{what} has a part that is not a typed object")
        if part["type"] in _TEXT_PARTS:
            out.append(_text(part.get("text", part.get("refusal")), index, f"{what} text part"))
        elif (image := image_of(part, index)) is not None:
            images.append(image)
        else:
            out.append(f"[{part['type']}]")
    return _text("".join(out), index, what), tuple(images)


def _parts_text(parts: Any, index: int, what: str) -> str:
    """Text of content where images are not kept (a system prompt): each is a marker."""
    text, images = _content(parts, index, what)
    return text + "[image]" * len(images)


def _json_problem(value: Any) -> str | None:
    """Why ``value`` is not JSON that the store keeps exactly (nested too deeply, NaN,
    infinities, integers no double holds, non-string keys, other types), or None."""
    if _nesting(value) > MAX_ARGUMENT_NESTING:
        return f"nested more than {MAX_ARGUMENT_NESTING} levels deep"
    try:
        stable_stringify(value)  # refuses inexact integers, odd keys and types; writes NaN as null
    except (TypeError, InvalidInput) as exc:
        return str(exc)
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return f"{item!r} is not a JSON number"
        if isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return None


def _nesting(value: Any) -> int:
    """How many levels of arrays and objects ``value`` nests (without recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping | list | tuple):
            deepest = max(deepest, depth)
            if depth > MAX_ARGUMENT_NESTING:
                break  # deep enough to refuse: no need to walk the rest
            children = item.values() if isinstance(item, Mapping) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest


def _arguments(raw: Any, index: int) -> dict[str, Any]:
    if isinstance(raw, Mapping):
        problem = _json_problem(raw)
        if problem is not None:
            raise MalformedMessage(index, f"tool call arguments are not JSON: {problem}")
        return dict(raw)
    if not isinstance(raw, str):
        raise MalformedMessage(index, "tool call arguments must be a JSON string or object")
    if not raw.strip():
        return {}
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        # Models do emit broken JSON; keep the call, with the raw text, rather than refuse it.
        return {"_raw": raw, "_error": f"invalid JSON: {exc.msg}"}
    except RecursionError:  # deeper than the parser goes: kept raw as well
        return {"_raw": raw, "_error": f"invalid JSON: nested more than {MAX_ARGUMENT_NESTING}"}
    problem = _json_problem(parsed)
    if problem is not None:  # NaN, 1e400, huge integers: broken JSON for the store, kept raw too
        return {"_raw": raw, "_error": f"invalid JSON: {problem}"}
    return parsed if isinstance(parsed, dict) else {"_value": parsed}


def _check_id(value: Any, index: int, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise MalformedMessage(index, f"{what} must be a non-empty string")
    if len(value) > 256:
        raise MalformedMessage(index, f"{what} is longer than 256 characters")
    return value


def parse_openai(messages: Sequence[Any], *, offset: int = 0) -> list[Message]:
    """Parse an OpenAI chat-completions message list (``offset``: the index of its first message
    in the harness's list, when only a tail is parsed)."""
    if not isinstance(messages, list):
        raise MalformedMessage(-1, "the messages must be a list")
    out: list[Message] = []
    for index, raw in enumerate(messages, start=offset):
        if not isinstance(raw, Mapping):
            raise MalformedMessage(index, "a message must be a JSON object")
        role = raw.get("role")
        if role in ("system", "developer"):
            out.append(
                Message("system", _parts_text(raw.get("content"), index, "content"), index=index)
            )
        elif role == "user":
            text, images = _content(raw.get("content"), index, "content")
            out.append(Message("user", text, images=images, index=index))
        elif role == "assistant":
            calls = raw.get("tool_calls") or []
            if not isinstance(calls, list):
                raise MalformedMessage(index, "tool_calls must be a list")
            requests = []
            for call in calls:
                if not isinstance(call, Mapping) or not isinstance(call.get("function"), Mapping):
                    raise MalformedMessage(index, "a tool call needs a function object")
                function = call["function"]
                requests.append(
                    ToolCallRequest(
                        _check_id(call.get("id"), index, "tool call id"),
                        _check_id(function.get("name"), index, "tool name"),
                        _arguments(function.get("arguments", "{}"), index),
                    )
                )
            text = _parts_text(raw.get("content"), index, "content")
            out.append(Message("assistant", text, tuple(requests), index=index))
        elif role == "tool":
            call_id = _check_id(raw.get("tool_call_id"), index, "tool_call_id")
            text, images = _content(raw.get("content"), index, "content")
            out.append(Message("tool", text, tool_call_id=call_id, images=images, index=index))
        else:
            raise MalformedMessage(index, f"unknown role {role!r}")
    return out


def _tool_result(block: Mapping[str, Any], index: int) -> Message:
    text, images = _content(block.get("content", ""), index, "tool_result content")
    return Message(
        "tool",
        text,
        tool_call_id=_check_id(block.get("tool_use_id"), index, "tool_use_id"),
        is_error=bool(block.get("is_error", False)),
        images=images,
        index=index,
    )


def _reasoning_block(block: Mapping[str, Any], index: int) -> dict[str, Any]:
    """A ``thinking``/``redacted_thinking`` block, kept as sent (its signature must reach the
    provider unchanged) but without ``cache_control``, which marks a place, not content."""
    kept = {k: v for k, v in block.items() if k != "cache_control"}
    problem = _json_problem(kept)
    if problem is not None:
        raise MalformedMessage(index, f"a {block['type']} block is not JSON: {problem}")
    for key in ("thinking", "signature", "data"):
        if key in kept and not isinstance(kept[key], str):
            raise MalformedMessage(index, f"a {block['type']} block's {key} must be a string")
    return kept


def parse_anthropic(
    messages: Sequence[Any], system: Any = None, *, offset: int = 0
) -> list[Message]:
    """Parse an Anthropic Messages list (and its separate ``system``). A user message's
    ``tool_result`` blocks become tool messages; its text blocks, if any, a user message.
    ``offset``: the index of the list's first message, when only a tail is parsed."""
    if not isinstance(messages, list):
        raise MalformedMessage(-1, "the messages must be a list")
    out: list[Message] = []
    if system is not None:
        out.append(Message("system", _parts_text(system, -1, "system"), index=-1))
    for index, raw in enumerate(messages, start=offset):
        if not isinstance(raw, Mapping):
            raise MalformedMessage(index, "a message must be a JSON object")
        role = raw.get("role")
        content = raw.get("content")
        if role == "system":  # Claude Code sends these in mid-conversation (a beta of the API)
            out.append(Message("system", _parts_text(content, index, "content"), index=index))
            continue
        if role not in ("user", "assistant"):
            raise MalformedMessage(
                index, f"unknown role {role!r} (Anthropic has user, assistant and system)"
            )
        if isinstance(content, str):
            out.append(Message(role, _text(content, index, "content"), index=index))
            continue
        if not isinstance(content, list):
            raise MalformedMessage(index, "content must be a string or a list of blocks")
        texts: list[str] = []
        calls: list[ToolCallRequest] = []
        reasoning: list[Mapping[str, Any]] = []
        images: list[dict[str, Any]] = []
        for block in content:
            if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
                raise MalformedMessage(index, "a content block must be a typed object")
            kind = block["type"]
            if kind == "text":
                texts.append(_text(block.get("text"), index, "text block"))
            elif kind == "tool_use" and role == "assistant":
                arguments = block.get("input", {})
                if not isinstance(arguments, Mapping):
                    raise MalformedMessage(index, "tool_use input must be an object")
                calls.append(
                    ToolCallRequest(
                        _check_id(block.get("id"), index, "tool_use id"),
                        _check_id(block.get("name"), index, "tool name"),
                        _arguments(arguments, index),  # an object: refused unless exact JSON
                    )
                )
            elif kind == "tool_result" and role == "user":
                out.append(_tool_result(block, index))
            elif kind in ("thinking", "redacted_thinking") and role == "assistant":
                reasoning.append(_reasoning_block(block, index))
            elif kind == "image" and role == "user":
                images.append(image_of(block, index) or {})
            elif kind in ("image", "document"):
                texts.append(f"[{kind}]")
            else:
                raise MalformedMessage(index, f"a {role} message cannot hold a {kind!r} block")
        text = _text("\n".join(texts), index, "content")
        if role == "assistant":
            out.append(
                Message("assistant", text, tuple(calls), reasoning=tuple(reasoning), index=index)
            )
        elif texts or images:
            out.append(Message("user", text, images=tuple(images), index=index))
    return out


def parse_responses(items: Any, instructions: Any = None, *, offset: int = 0) -> list[Message]:
    """Parse an OpenAI Responses ``input`` (a string, or a list of items: ``message``,
    ``function_call``, ``function_call_output``; ``reasoning`` items are carried by the
    assistant message they precede). ``instructions`` is the system prompt given apart.

    An assistant's turn is several items in Responses (its text, then one item per call): they
    become one assistant message, as in the other formats. ``offset``: the index of the first
    item, when only a tail is parsed (the tail must not begin inside an assistant's items)."""
    out: list[Message] = []
    if instructions is not None:
        out.append(Message("system", _text(instructions, -1, "instructions"), index=-1))
    if isinstance(items, str):
        return [*out, Message("user", _text(items, 0, "input"), index=0)]
    if not isinstance(items, list):
        raise MalformedMessage(-1, "the input must be a string or a list of items")
    assistant: Message | None = None  # the assistant message being gathered from its items

    def flush() -> None:
        nonlocal assistant
        if assistant is not None:
            out.append(assistant)
            assistant = None

    for index, raw in enumerate(items, start=offset):
        if not isinstance(raw, Mapping):
            raise MalformedMessage(index, "an input item must be a JSON object")
        kind = raw.get("type", "message" if "role" in raw else None)
        if kind == "message":
            role = raw.get("role")
            text, images = _content(raw.get("content"), index, "content")
            if role == "assistant":
                if assistant is not None and (assistant.tool_calls or assistant.text):
                    flush()
                reasoning = assistant.reasoning if assistant is not None else ()
                assistant = Message("assistant", text, reasoning=reasoning, index=index)
                continue
            flush()
            if role in ("system", "developer"):
                out.append(Message("system", text, index=index))
            elif role == "user":
                out.append(Message("user", text, images=images, index=index))
            else:
                raise MalformedMessage(index, f"unknown role {role!r}")
        elif kind == "function_call":
            call = ToolCallRequest(
                _check_id(raw.get("call_id"), index, "call_id"),
                _check_id(raw.get("name"), index, "tool name"),
                _arguments(raw.get("arguments", "{}"), index),
            )
            if assistant is None:
                assistant = Message("assistant", "", index=index)
            assistant = attrs.evolve(assistant, tool_calls=(*assistant.tool_calls, call))
        elif kind == "function_call_output":
            flush()
            call_id = _check_id(raw.get("call_id"), index, "call_id")
            text, images = _content(raw.get("output"), index, "output")
            out.append(Message("tool", text, tool_call_id=call_id, images=images, index=index))
        elif kind == "reasoning":
            if assistant is not None and (assistant.tool_calls or assistant.text):
                flush()
            if assistant is None:
                assistant = Message("assistant", "", index=index)
            block = _reasoning_block(raw, index)
            assistant = attrs.evolve(assistant, reasoning=(*assistant.reasoning, block))
        else:
            raise MalformedMessage(index, f"unknown input item type {kind!r}")
    flush()
    return out


def parse_messages(messages: Any, fmt: str, system: Any = None) -> list[Message]:
    """Parse ``messages`` in format ``fmt`` (``openai``, ``anthropic`` or ``responses``; for
    ``responses``, ``messages`` is the ``input`` and ``system`` the ``instructions``)."""
    if fmt == "responses":
        return parse_responses(messages, system)
    if fmt == "openai":
        parsed = parse_openai(messages)
        if system is not None:  # index -1: not one of the list's messages
            parsed.insert(0, Message("system", _parts_text(system, -1, "system"), index=-1))
        return parsed
    if fmt == "anthropic":
        return parse_anthropic(messages, system)
    raise InvalidInput("format", fmt, f"use one of {list(FORMATS)}")
