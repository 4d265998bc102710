"""A client's conversation, parsed once: each request repeats the whole conversation, and only
what changed since the last one is parsed and counted again.

The items of the request are compared with those of the previous one (decoded JSON, compared as
values); the parsed messages of the common prefix are kept, the same objects, so that their
fingerprints (cached on each message) are not computed again by the ingestor either. Items are
parsed in chunks that stand alone: one item in Chat Completions and Anthropic Messages, and in
Responses an assistant's run of items (its reasoning, text and calls) or one other item.
"""

from __future__ import annotations

import bisect
import collections
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import attrs

from selfctx.adapters.harness.messages import (
    MalformedMessage,
    Message,
    parse_anthropic,
    parse_openai,
    parse_responses,
)
from selfctx.adapters.proxy.rebuilt import TextKey, text_keys

__all__ = ["ParsedConversation", "assistant_messages", "common_prefix"]

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
    texts: tuple[TextKey, ...]
    """The chunk's text messages (``rebuilt.text_key``)."""


@attrs.define
class ParsedConversation:
    """The last conversation one client sent in one format, parsed, with its size in tokens and
    its text messages counted. A request costs what is new in it: the chunks of the previous
    request's common prefix are kept, and the figures of what they hold are kept by position
    (the messages before each chunk, the tokens up to it)."""

    fmt: str
    count: Callable[[Iterable[Any]], int]
    """Tokens of a list of raw items (the proxy's token rule)."""
    items: list[Any] = attrs.field(factory=list)
    system: Any = None
    system_messages: list[Message] = attrs.field(factory=list)
    system_tokens: int = 0
    chunks: list[_Chunk] = attrs.field(factory=list)
    ends: list[int] = attrs.field(factory=list)
    """``end`` of each chunk, in order."""
    before: list[int] = attrs.field(factory=list)
    """Chat messages before each chunk, and after the last (one more entry than chunks)."""
    tokens_to: list[int] = attrs.field(factory=list)
    """Tokens of the chunks before each chunk, and of all (one more entry than chunks)."""
    messages: list[Message] = attrs.field(factory=list)
    """The chat messages of all chunks, in order."""
    texts: collections.Counter[TextKey] = attrs.field(factory=collections.Counter)
    """How often each text message occurs in the last request."""
    added: list[TextKey] = attrs.field(factory=list)
    """The text messages of the chunks parsed by the last update."""
    withdrew: bool = False
    """The last update dropped text messages it did not parse again."""
    shared: int = 0
    """Tokens of the last conversation that repeat the one before it, from its start: the part
    of the client's own request a provider's prompt cache would serve."""

    def update(
        self, items: Any, system: Any, *, same: tuple[Any, int] | None = None
    ) -> tuple[list[Message], int]:
        """The messages of ``items`` (and ``system``: Anthropic's ``system``, Responses'
        ``instructions``) and their tokens, parsing only what is new (raises
        ``MalformedMessage`` like the parsers; nothing is kept then). ``same``: the previous
        items (the very list) and how many of them ``items`` starts with, when the caller knows
        it already."""
        if not isinstance(items, list):  # a Responses input given as a string
            messages = parse_responses(items, system)
            self.shared = 0
            return messages, self.count([{"role": "user", "content": items}])
        if system != self.system or not self.chunks:
            system_messages = _system(self.fmt, system)
            system_tokens = self.count([{"role": "system", "content": system}]) if system else 0
            keep = 0
        else:
            system_messages, system_tokens = self.system_messages, self.system_tokens
            if same is not None and same[0] is self.items:
                shared = same[1]
            else:
                shared = common_prefix(self.items, items)
            keep = bisect.bisect_right(self.ends, shared)
            # an assistant's run of items that goes on in the new items is parsed again
            if (
                self.fmt == "responses"
                and keep
                and self.ends[keep - 1] == shared < len(items)
                and _assistant_item(items[shared])
                and _assistant_item(items[shared - 1])
            ):
                keep -= 1
        if keep == 0:
            chunks, ends, before, tokens_to, messages = [], [], [0], [0], []
        else:
            chunks, ends = self.chunks[:keep], self.ends[:keep]
            before, tokens_to = self.before[: keep + 1], self.tokens_to[: keep + 1]
            messages = self.messages[: before[-1]]
        dropped = collections.Counter(k for c in self.chunks[keep:] for k in c.texts)
        added: list[TextKey] = []
        # tokens that repeat the previous request from its start (what a provider's prompt
        # cache would serve of the client's own request): the system and the kept chunks
        repeated = system_tokens + tokens_to[-1] if keep else 0
        for begin, end in _chunks(self.fmt, items, ends[-1] if ends else 0):
            part = items[begin:end]
            parsed = _parse(self.fmt, part, begin)
            chunk = _Chunk(begin, end, parsed, self.count(part), tuple(text_keys(parsed)))
            chunks.append(chunk)
            ends.append(end)
            messages += parsed
            before.append(len(messages))
            tokens_to.append(tokens_to[-1] + chunk.tokens)
            added += chunk.texts
        if keep:
            texts = self.texts
            texts.subtract(dropped)
        else:
            texts = collections.Counter()
        texts.update(added)
        self.withdrew = bool(dropped - collections.Counter(added))
        self.texts = +texts if dropped else texts  # without the counts that fell to zero
        self.items, self.system, self.chunks, self.ends = items, system, chunks, ends
        self.before, self.tokens_to, self.messages, self.added = before, tokens_to, messages, added
        self.system_messages, self.system_tokens = system_messages, system_tokens
        self.shared = repeated
        return [*system_messages, *messages], system_tokens + tokens_to[-1]


def assistant_messages(fmt: str, items: Sequence[Any], start: int = 0) -> list[Message]:
    """The assistant messages among ``items[start:]``, parsing only the chunks that hold one;
    a chunk that does not parse is skipped (this is a look, not an ingest)."""
    out: list[Message] = []
    for begin, end in _chunks(fmt, items, start):
        part = list(items[begin:end])
        if not any(_assistant_item(i) or _role(i) == "assistant" for i in part):
            continue
        try:
            out += [m for m in _parse(fmt, part, begin) if m.role == "assistant"]
        except MalformedMessage:
            continue
    return out


def _role(item: Any) -> Any:
    return item.get("role") if isinstance(item, dict) else None


def common_prefix(old: Sequence[Any], new: Sequence[Any]) -> int:
    if len(new) >= len(old) and new[: len(old)] == old:  # the usual case, compared in C
        return len(old)
    n = 0
    for a, b in zip(old, new, strict=False):
        if a != b:
            break
        n += 1
    return n
