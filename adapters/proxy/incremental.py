"""A client's conversation, parsed once: each request repeats the whole conversation, and only
what changed since the last one is parsed and counted again.

The items of the request are compared with those of the previous one (decoded JSON, compared as
values); the parsed messages of the common prefix are kept, the same objects, so that their
fingerprints (cached on each message) are not computed again by the ingestor either. Items are
parsed in chunks that stand alone: one item in Chat Completions and Anthropic Messages, and in
Responses an assistant's run of items (its reasoning, text and calls) or one other item.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import attrs

from selfctx.adapters.harness.messages import (
    Message,
    parse_anthropic,
    parse_openai,
    parse_responses,
)

__all__ = ["ParsedConversation"]

_ASSISTANT_ITEMS = frozenset({"function_call", "reasoning"})


def _assistant_item(item: Any) -> bool:
    if not isinstance(item, dict):
        return False
    kind = item.get("type", "message" if "role" in item else None)
    return kind in _ASSISTANT_ITEMS or (kind == "message" and item.get("role") == "assistant")


def _chunks(fmt: str, items: Sequence[Any], start: int) -> Iterator[tuple[int, int]]:
    """``(begin, end)`` of each self-contained run of items from ``start`` on."""
    if fmt != "responses":
        for n in range(start, len(items)):
            yield n, n + 1
        return
    n = start
    while n < len(items):
        end = n + 1
        if _assistant_item(items[n]):
            while end < len(items) and _assistant_item(items[end]):
                end += 1
        yield n, end
        n = end


def _parse(fmt: str, items: list[Any], offset: int) -> list[Message]:
    if fmt == "openai":
        return parse_openai(items, offset=offset)
    if fmt == "anthropic":
        return parse_anthropic(items, offset=offset)
    return parse_responses(items, offset=offset)


def _system(fmt: str, system: Any) -> list[Message]:
    if system is None:
        return []
    if fmt == "anthropic":
        return parse_anthropic([], system)
    return parse_responses([], system)


@attrs.define
class _Chunk:
    begin: int
    end: int
    messages: list[Message]
    tokens: int


@attrs.define
class ParsedConversation:
    """The last conversation one client sent in one format, parsed, with its size in tokens."""

    fmt: str
    count: Callable[[Iterable[Any]], int]
    """Tokens of a list of raw items (the proxy's token rule)."""
    items: list[Any] = attrs.field(factory=list)
    system: Any = None
    system_messages: list[Message] = attrs.field(factory=list)
    system_tokens: int = 0
    chunks: list[_Chunk] = attrs.field(factory=list)
    shared: int = 0
    """Tokens of the last conversation that repeat the one before it, from its start: the part
    of the client's own request a provider's prompt cache would serve."""

    def update(self, items: Any, system: Any) -> tuple[list[Message], int]:
        """The messages of ``items`` (and ``system``: Anthropic's ``system``, Responses'
        ``instructions``) and their tokens, parsing only what is new (raises
        ``MalformedMessage`` like the parsers; nothing is kept then)."""
        if not isinstance(items, list):  # a Responses input given as a string
            messages = parse_responses(items, system)
            self.shared = 0
            return messages, self.count([{"role": "user", "content": items}])
        if system != self.system or not self.chunks:
            system_messages = _system(self.fmt, system)
            system_tokens = self.count([{"role": "system", "content": system}]) if system else 0
            kept: list[_Chunk] = []
            shared = 0
        else:
            system_messages, system_tokens = self.system_messages, self.system_tokens
            same = _common_prefix(self.items, items)
            kept = [c for c in self.chunks if c.end <= same]
            # an assistant's run of items that goes on in the new items is parsed again
            if (
                self.fmt == "responses"
                and kept
                and kept[-1].end == same < len(items)
                and _assistant_item(items[same])
                and _assistant_item(items[same - 1])
            ):
                kept.pop()
            shared = system_tokens + sum(c.tokens for c in kept)
        start = kept[-1].end if kept else 0
        chunks = list(kept)
        for begin, end in _chunks(self.fmt, items, start):
            part = items[begin:end]
            chunks.append(_Chunk(begin, end, _parse(self.fmt, part, begin), self.count(part)))
        self.items, self.system, self.chunks = items, system, chunks
        self.system_messages, self.system_tokens = system_messages, system_tokens
        self.shared = shared
        messages = list(system_messages)
        for chunk in chunks:
            messages += chunk.messages
        return messages, system_tokens + sum(c.tokens for c in chunks)


def _common_prefix(old: Sequence[Any], new: Sequence[Any]) -> int:
    if len(new) >= len(old) and new[: len(old)] == old:  # the usual case, compared in C
        return len(old)
    n = 0
    for a, b in zip(old, new, strict=False):
        if a != b:
            break
        n += 1
    return n
