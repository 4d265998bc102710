"""A harness's whole list, parsed only where it changed.

A harness that resends its whole list every turn sends the same items again and again. What a
server remembers of the last list is a digest of each item's decoded JSON (a few dozen bytes an
item, none of its text): the items of the new list that match, from the start, are neither parsed
nor fingerprinted again, and the cursor plans the list from the first one that does not
(``Ingestor.ingest_from``). Items are parsed in chunks that stand alone: one item in Chat
Completions and Anthropic Messages, and in Responses an assistant's run of items (its reasoning,
text and calls) or one other item. The proxy parses the same chunks
(``selfctx.adapters.proxy.incremental``).

Digests are Python's own hashes of strings and of tuples of them, tagged by type: cheap (the
string hashes are what takes the time, at about 2 GB/s), and 64 bits, so two different items
would match with a chance of about one in 10^19. They are never stored: a new process starts
from nothing.
"""

from __future__ import annotations

import bisect
import itertools
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from selfctx.adapters.harness.messages import (
    Message,
    parse_anthropic,
    parse_openai,
    parse_responses,
)
from selfctx.domain.errors import InvalidInput

__all__ = [
    "Known",
    "ListDigests",
    "NeedWhole",
    "Split",
    "TooDeep",
    "assistant_item",
    "chunks",
    "item_digest",
    "parse_chunk",
    "parse_items",
    "parse_system",
]

_ASSISTANT_ITEMS = frozenset({"function_call", "reasoning"})


class TooDeep(InvalidInput):
    """A value nests arrays and objects deeper than the limit given."""

    def __init__(self, limit: int) -> None:
        super().__init__("messages", "...", f"nested more than {limit} levels deep")
        self.limit = limit


def item_digest(value: Any, limit: int, depth: int = 0) -> int:
    """A digest of decoded JSON (equal values, keys in the same order, give equal digests).
    Raises :class:`TooDeep` when ``value`` nests more than ``limit`` levels. A value that is not
    JSON (a set, an object) gets a digest of its own each time: never the same as anything."""
    kind = type(value)
    if kind is str:
        return hash(value)
    if kind is dict or (kind is not list and isinstance(value, Mapping)):
        if depth >= limit:
            raise TooDeep(limit)
        return hash(
            (1, *[(k, v if type(v) is str else item_digest(v, limit, depth + 1))
                  for k, v in value.items()])
        )  # fmt: skip
    if kind is list or kind is tuple:
        if depth >= limit:
            raise TooDeep(limit)
        return hash(
            (2, *[v if type(v) is str else item_digest(v, limit, depth + 1) for v in value])
        )
    if value is None or kind in (int, float, bool):
        return hash((kind, value))
    return hash((kind, next(_UNIQUE)))


_UNIQUE = itertools.count()


def assistant_item(item: Any) -> bool:
    """A Responses item that belongs to an assistant's run (its reasoning, text or a call)."""
    if not isinstance(item, dict):
        return False
    kind = item.get("type", "message" if "role" in item else None)
    return kind in _ASSISTANT_ITEMS or (kind == "message" and item.get("role") == "assistant")


def chunks(fmt: str, items: Sequence[Any], start: int) -> Iterator[tuple[int, int]]:
    """``(begin, end)`` of each self-contained run of items from ``start`` on."""
    if fmt != "responses":
        for n in range(start, len(items)):
            yield n, n + 1
        return
    n = start
    while n < len(items):
        end = n + 1
        if assistant_item(items[n]):
            while end < len(items) and assistant_item(items[end]):
                end += 1
        yield n, end
        n = end


def parse_chunk(fmt: str, items: list[Any], offset: int) -> list[Message]:
    """The messages of a run of items that stands alone (``offset``: its first item's index)."""
    if fmt == "openai":
        return parse_openai(items, offset=offset)
    if fmt == "anthropic":
        return parse_anthropic(items, offset=offset)
    return parse_responses(items, offset=offset)


def parse_system(fmt: str, system: Any) -> list[Message]:
    """The message of a system prompt given apart (Anthropic's ``system``, Responses'
    ``instructions``, or ``system`` beside a Chat Completions list), or none."""
    if system is None:
        return []
    if fmt == "responses":
        return parse_responses([], system)
    return parse_anthropic([], system)  # a string or text blocks, as Anthropic's


def parse_items(
    fmt: str, items: list[Any], begin: int = 0, offset: int = 0
) -> tuple[list[Message], list[int], list[int]]:
    """The messages of ``items[begin:]``, parsed chunk by chunk (``offset`` is added to each
    item's index, for error messages), with the end of each chunk (an index into ``items``) and
    how many messages each chunk parsed into."""
    messages: list[Message] = []
    ends: list[int] = []
    counts: list[int] = []
    for first, end in chunks(fmt, items, begin):
        parsed = parse_chunk(fmt, items[first:end], first + offset)
        messages += parsed
        ends.append(end)
        counts.append(len(parsed))
    return messages, ends, counts


@attrs.frozen
class Split:
    """A list cut where it stops matching the last one: ``start`` messages unchanged (not
    parsed), then ``tail``, parsed."""

    start: int
    tail: list[Message]
    keep: int
    """How many chunks of the last list stay."""
    system: int | None
    system_messages: int
    digests: array[int]
    ends: list[int]
    counts: list[int]
    """For the chunks after the kept ones: their ends (in items) and their messages."""


_VERSIONS = itertools.count()


def _digest_array(values: Iterable[int] = ()) -> array[int]:
    """Digests (:func:`item_digest`: Python hashes, signed 64-bit) or positions, as machine
    integers."""
    return array("q", values)


@attrs.define
class ListDigests:
    """What a server remembers of the last whole list of one session in one format: a digest
    of each item and how the items divide into chunks and messages (no text)."""

    fmt: str
    system: int | None = None
    """The digest of the system prompt given apart (None: none)."""
    system_messages: int = 0
    items: array[int] = attrs.field(factory=_digest_array)
    """The digest of each item (machine integers: 8 bytes an item, where a list of Python
    integers holds 36; decision 0105)."""
    ends: array[int] = attrs.field(factory=_digest_array)
    """The end (in items) of each chunk."""
    totals: array[int] = attrs.field(factory=_digest_array)
    """The messages of the list up to the end of each chunk (system prompt included)."""
    version: int = attrs.field(factory=lambda: next(_VERSIONS))
    """Changes whenever what is remembered changes (unique among every instance's): a caller
    that knew the list at one version knows it is still the one remembered."""

    @property
    def messages(self) -> int:
        """How many messages the list parsed into."""
        return self.totals[-1] if self.totals else self.system_messages

    def forget(self) -> None:
        """Remember nothing (the next list is parsed whole)."""
        self.system, self.system_messages = None, 0
        self.items, self.ends, self.totals = _digest_array(), _digest_array(), _digest_array()
        self.version = next(_VERSIONS)

    def split(self, items: list[Any], system: Any, limit: int, known: int = 0) -> Split:
        """Digest ``items`` (raising :class:`TooDeep` past ``limit`` levels), keep what matches
        the last list, parse the rest (raising ``MalformedMessage`` like the parsers). Nothing
        changes until :meth:`accept`.

        ``known``: the first items are the very items of the list remembered (their text was
        the same: :mod:`selfctx.adapters.harness.resent`), not given again (placeholders):
        their digests are the ones remembered. Raises :class:`NeedWhole` when the split would
        read one of them (a Responses run that goes on, a changed system prompt)."""
        if known:
            if known > len(self.items) or self.fmt == "responses":
                raise NeedWhole()
            digests = self.items[:known]
            digests.extend(
                [item_digest(item, limit) for item in itertools.islice(items, known, None)]
            )
        else:
            digests = _digest_array([item_digest(item, limit) for item in items])
        system_digest = None if system is None else item_digest(system, limit)
        kept = 0
        if system_digest == self.system and self.items:
            same = _common_prefix(self.items, digests)
            kept = bisect.bisect_right(self.ends, same)
            if (  # an assistant's run of items that goes on in the new items is parsed again
                self.fmt == "responses"
                and kept
                and self.ends[kept - 1] == same < len(items)
                and assistant_item(items[same])
                and assistant_item(items[same - 1])
            ):
                kept -= 1
        if known and (not kept or self.ends[kept - 1] < known):
            raise NeedWhole()
        if kept:
            begin, start = self.ends[kept - 1], self.totals[kept - 1]
            head: list[Message] = []
            system_count = self.system_messages
        else:
            begin = start = 0
            head = parse_system(self.fmt, system)
            system_count = len(head)
        tail, ends, counts = parse_items(self.fmt, items, begin)
        return Split(start, head + tail, kept, system_digest, system_count, digests, ends, counts)

    def accept(self, split: Split) -> None:
        """The list ``split`` was made from is recorded: remember it."""
        self.system, self.system_messages = split.system, split.system_messages
        self.items = split.digests
        self.version = next(_VERSIONS)
        del self.ends[split.keep :]
        del self.totals[split.keep :]
        self._add(split.ends, split.counts, 0)

    def _add(self, ends: list[int], counts: list[int], base: int) -> None:
        total = self.messages
        for end, count in zip(ends, counts, strict=True):
            total += count
            self.ends.append(base + end)
            self.totals.append(total)

    def append(
        self, items: list[Any], digests: list[int], ends: list[int], counts: list[int]
    ) -> None:
        """``items`` (of these digests, in chunks ending at ``ends``, of ``counts`` messages)
        were appended to the list (the append form): remember them too, unless they may go on
        with the last chunk (a Responses assistant's run), in which case nothing is
        remembered."""
        if self.fmt == "responses" and items and assistant_item(items[0]) and self.items:
            self.forget()
            return
        base = len(self.items)
        self.items.extend(digests)
        self.version = next(_VERSIONS)
        self._add(ends, counts, base)


@attrs.frozen
class Known:
    """The first ``count`` items of a whole list are those of the list a session remembers at
    ``version`` (:attr:`ListDigests.version`); ``last`` is the last of them, as read."""

    count: int
    version: int
    last: Any


class NeedWhole(Exception):
    """A list given with known items (placeholders) that must be read whole after all."""


def _common_prefix(old: Sequence[int], new: Sequence[int]) -> int:
    n = len(old)
    if len(new) >= n and new[:n] == old:  # the usual case, compared in C
        return n
    same = 0
    for a, b in zip(old, new, strict=False):
        if a != b:
            break
        same += 1
    return same
