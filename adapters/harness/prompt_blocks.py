"""A request body as the blocks a provider's prompt cache sees (``selfctx.domain.prompt_cache``).

Blocks follow the order in which the provider reads a request: the tool definitions, the system
prompt, then the conversation. Anthropic: each tool, each ``system`` block, each content block
of each message (a string content is one block), a ``cache_control`` mark making it a
breakpoint (a top-level ``cache_control``, Anthropic's automatic mode, marks the last block).
Chat Completions: each tool, each message. Responses: ``instructions``, each tool, each item.

A block's key is a digest of its JSON without its cache mark, with its role and whether it opens
a message, so that the same text in another place is another block. Its size is the tokens of
its text (tool definitions: of their JSON), counted by the caller's ``count``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from selfctx.adapters.harness.tokens import request_texts
from selfctx.domain.prompt_cache import Block, Request

__all__ = ["cache_request", "request_blocks"]

Count = Callable[[str], int]


def _key(*parts: Any) -> str:
    text = json.dumps(parts, ensure_ascii=False, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _unmarked(block: Any) -> Any:
    if isinstance(block, Mapping) and "cache_control" in block:
        return {k: v for k, v in block.items() if k != "cache_control"}
    return block


def _marked(block: Any) -> bool:
    return isinstance(block, Mapping) and "cache_control" in block


def _texts_tokens(value: Any, count: Count) -> int:
    """Tokens of the texts of one message (the rule of ``harness.tokens``)."""
    return sum(count(t) for t in request_texts([value]))


def _anthropic(body: Mapping[str, Any], count: Count) -> Iterator[Block]:
    for tool in body.get("tools") or ():
        yield Block(
            _key("tool", _unmarked(tool)), count(json.dumps(_unmarked(tool))), _marked(tool)
        )
    system = body.get("system")
    if isinstance(system, str) and system:
        yield Block(_key("system", system), count(system))
    elif isinstance(system, list):
        for part in system:
            text = part.get("text", "") if isinstance(part, Mapping) else ""
            yield Block(_key("system", _unmarked(part)), count(str(text)), _marked(part))
    for message in body.get("messages") or ():
        if not isinstance(message, Mapping):
            continue
        role = message.get("role")
        content = message.get("content")
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for n, part in enumerate(parts if isinstance(parts, list) else ()):
            size = _texts_tokens({"content": [part]}, count)
            yield Block(_key(role, n == 0, _unmarked(part)), size, _marked(part))


def _openai(body: Mapping[str, Any], count: Count) -> Iterator[Block]:
    for tool in body.get("tools") or ():
        yield Block(_key("tool", tool), count(json.dumps(tool)))
    for message in body.get("messages") or ():
        yield Block(_key("message", message), _texts_tokens(message, count))


def _responses(body: Mapping[str, Any], count: Count) -> Iterator[Block]:
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        yield Block(_key("instructions", instructions), count(instructions))
    for tool in body.get("tools") or ():
        yield Block(_key("tool", tool), count(json.dumps(tool)))
    items = body.get("input")
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    for item in items if isinstance(items, list) else ():
        size = sum(count(t) for t in request_texts({"input": [item]}))
        yield Block(_key("item", item), size)


_FORMATS = {"anthropic": _anthropic, "openai": _openai, "responses": _responses}


def request_blocks(api: str, body: Mapping[str, Any], count: Count) -> tuple[Block, ...]:
    """The blocks of a request of ``api`` (``anthropic``, ``openai``, ``responses``)."""
    try:
        blocks = tuple(_FORMATS[api](body, count))
    except KeyError:
        raise ValueError(f"unknown API {api!r}: use one of {sorted(_FORMATS)}") from None
    if api == "anthropic" and _marked(body) and blocks:  # automatic mode: the last block
        blocks = (*blocks[:-1], Block(blocks[-1].key, blocks[-1].tokens, True))
    return blocks


def cache_request(api: str, body: Mapping[str, Any], count: Count, at: float = 0.0) -> Request:
    """A request body as the prompt-cache model takes it, sent at ``at`` seconds."""
    return Request(request_blocks(api, body, count), at)
