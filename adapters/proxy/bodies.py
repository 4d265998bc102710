"""Request bodies decoded from what is new in them.

A client sends its whole conversation with every request, and the bytes of a request mostly
start with the bytes of the one before it: its conversation list is the previous one with items
appended (and perhaps its last few items changed: a client moves its cache marks), everything
around the list unchanged. :class:`RecentBodies` keeps the last body of each conversation (its
bytes, its value, where each item of its conversation list starts and where the list ends) and
decodes a request that has that shape from the first item that changed; the items before it are
the very objects of the previous body, so that comparing the two conversations afterwards costs a
pointer check per item.

The result is always the value the whole body decodes to. A body is read this way only when its
bytes are the previous body's up to the start of one of its items, then anything, then the
previous body's bytes from the ``]`` that closes its list on, and that middle part decodes on its
own as a list of items: JSON is read left to right without look-ahead, so the bytes before the
middle read as before, the middle as it reads alone, and the bytes after it (which close the
list) as before. Where the items of a body start is found by a scan of its structure (strings
skipped whole, in C), of the whole body once per conversation and then of the new items only.
Anything else is decoded in full.
"""

from __future__ import annotations

import bisect
import collections
import re
from collections.abc import Iterator
from typing import Any

import attrs

from selfctx.adapters.proxy.codec import loads

__all__ = ["RecentBodies"]

_TOKENS = re.compile(rb'(?:"(?:[^"\\]++|\\.)*+"|[^"\[\]{},]++)*+[\[\]{},]', re.DOTALL)
"""JSON text up to and including its next bracket or comma outside a string (strings skipped
whole): one token per piece of structure. Possessive: never goes back over what it read."""


_KEY = re.compile(rb'\s*+"((?:[^"\\]++|\\.)*+)"\s*+:', re.DOTALL)
_WHITESPACE = b" \t\r\n"


def _structure(data: bytes) -> Iterator[re.Match[bytes]]:
    """The tokens of ``data``, one after the other (none after the last bracket or comma)."""
    position = 0
    while (match := _TOKENS.match(data, position)) is not None:
        yield match
        position = match.end()


@attrs.define(eq=False)
class _Layout:
    """Where the conversation list of a body lies in its bytes."""

    starts: list[int]
    """Offset of each item from item ``first`` on: the byte after the ``[`` or ``,`` before
    it."""
    end: int
    """Offset of the ``]`` that closes the list."""
    first: int = 0
    """The first item whose start is known (the list was found by its end)."""
    whole: bool = False
    """The body was scanned whole (the starts before ``first`` cannot be found)."""


@attrs.define(eq=False)
class _Body:
    raw: bytes
    value: dict[str, Any]
    key: str
    layout: _Layout | None = None
    scanned: bool = False
    """The layout was looked for (None then: the body is not read in parts)."""

    @property
    def items(self) -> list[Any]:
        return self.value[self.key]  # type: ignore[no-any-return]

    @property
    def count(self) -> int:
        return len(self.value[self.key])


class RecentBodies:
    """The last body of each of a bounded number of conversations, per ``scope`` (the
    credentials' digest and the API path), the least recently used dropped beyond ``limit``
    bodies or ``max_bytes`` of raw bytes."""

    def __init__(self, limit: int = 256, max_bytes: int = 256 * 1024 * 1024) -> None:
        self.limit = limit
        self.max_bytes = max_bytes
        self._bodies: collections.OrderedDict[int, tuple[Any, _Body]] = collections.OrderedDict()
        self._size = 0
        self._next = 0
        self.extended = 0
        """Bodies decoded from their changed items (a figure for tests and benchmarks)."""

    def loads(self, raw: bytes, key: str, scope: Any) -> Any:
        """The value of ``raw`` (as ``codec.loads``, with the same errors), whose conversation
        list is under ``key``."""
        for number, (where, body) in reversed(self._bodies.items()):
            if where != scope or body.key != key:
                continue
            extended = _extend(body, raw)
            if extended is not None:
                self.extended += 1
                self._drop(number)
                self._keep(scope, extended)
                return extended.value
        value = loads(raw)
        if isinstance(value, dict) and isinstance(value.get(key), list) and value[key]:
            self._keep(scope, _Body(raw, value, key))
        return value

    def _keep(self, scope: Any, body: _Body) -> None:
        self._bodies[self._next] = (scope, body)
        self._next += 1
        self._size += len(body.raw)
        while self._bodies and (len(self._bodies) > self.limit or self._size > self.max_bytes):
            self._drop(next(iter(self._bodies)))

    def _drop(self, number: int) -> None:
        _scope, body = self._bodies.pop(number)
        self._size -= len(body.raw)


def _extend(body: _Body, raw: bytes) -> _Body | None:
    """``raw`` decoded from where it departs from ``body`` (None: not of that shape)."""
    old = body.raw
    layout = body.layout
    if (
        layout is not None
        and len(raw) > layout.end
        and raw[layout.end] == 0x2C
        and raw.startswith(memoryview(old)[: layout.end])
    ):
        shared = layout.end  # at least: items appended (the usual case, one comparison)
    else:
        shared = _common_prefix(old, raw)
    if shared < len(old) // 2:
        return None  # mostly another body: not worth looking at the structure
    if layout is None and not body.scanned:
        body.scanned = True  # looked for once
        layout = body.layout = _appended(body, raw, shared) or _layout(old, body.key, body.count)
    if layout is None:
        return None
    end = layout.end
    stop = len(raw) - (len(old) - end)  # the list's closing ``]`` in ``raw``, if it is there
    if stop <= 0 or not raw.endswith(memoryview(old)[end:]):
        return None
    if shared >= end and len(raw) > end and raw[end] == 0x2C:  # ",": items appended
        keep, start = body.count, end + 1
    else:
        known = bisect.bisect_right(layout.starts, shared) - 1
        if known < 0:  # it departs before the items whose starts are known
            if layout.first == 0 or layout.whole:
                return None
            scanned = _layout(old, body.key, body.count)
            if scanned is None:
                return None
            layout = body.layout = scanned
            known = bisect.bisect_right(layout.starts, shared) - 1
        keep, start = layout.first + known, layout.starts[known]
    if stop <= start or not raw[start:stop].strip(_WHITESPACE):
        return None  # no item there: not a list this body's bytes would decode to
    piece = raw[start:stop]
    try:
        new = loads(b"[" + piece + b"]")
    except (ValueError, RecursionError):
        return None
    starts = _item_starts(piece)
    if not isinstance(new, list) or starts is None or len(starts) != len(new):
        return None
    items = body.items
    value = {**body.value, body.key: items[:keep] + new if keep < len(items) else items + new}
    known_starts = layout.starts[: keep - layout.first]
    grown = _Layout([*known_starts, *(start + s for s in starts)], stop, layout.first)
    grown.whole = layout.whole
    return _Body(raw, value, body.key, grown, scanned=True)


def _appended(body: _Body, raw: bytes, shared: int) -> _Layout | None:
    """The end of ``body``'s list, if ``raw`` appends to it there (the starts of its items are
    not known then): the first byte where the two differ, a ``]`` in ``body`` and a ``,`` in
    ``raw``, checked by decoding ``body`` with an item inserted there (the list grows by that
    item only where the list ends)."""
    old = body.raw
    if shared >= len(old) or shared >= len(raw) or old[shared] != 0x5D or raw[shared] != 0x2C:
        return None
    try:
        probe = loads(old[:shared] + b",0" + old[shared:])
    except (ValueError, RecursionError):
        return None
    grown = probe.get(body.key) if isinstance(probe, dict) else None
    if isinstance(grown, list) and len(grown) == body.count + 1 and grown[-1] == 0:
        return _Layout([], shared, body.count)
    return None


def _layout(raw: bytes, key: str, count: int) -> _Layout | None:
    """Where the list under ``key`` of the JSON object ``raw`` lies, if it has ``count`` items
    (None if the object's keys are not plain or ``key`` is given twice)."""
    name = key.encode()
    depth = 0
    found: _Layout | None = None
    inside = False  # in the list under ``key``
    for match in _structure(raw):
        token = match.group()
        last = token[-1]
        if depth == 1:  # the token holds a key of the object (and its value, if plain)
            named = _KEY.match(token)
            if named is not None:
                if b"\\" in named.group(1):
                    return None  # a key written with escapes: not compared here
                if named.group(1) == name:
                    if found is not None or last != 0x5B:  # given twice, or not a list
                        return None
                    inside = True
        if last in (0x5B, 0x7B):  # "[" or "{"
            depth += 1
            if depth == 2 and inside:
                found = _Layout([match.end()], -1)
        elif last == 0x2C:  # ","
            if depth == 2 and inside:
                assert found is not None
                found.starts.append(match.end())
        else:  # "]" or "}"
            depth -= 1
            if depth == 1 and inside:
                assert found is not None
                found.end = match.end() - 1
                inside = False
    if found is None or found.end < 0 or len(found.starts) != count:
        return None
    found.whole = True
    return found


def _item_starts(piece: bytes) -> list[int] | None:
    """Offsets of the values of a comma-separated run of JSON values (None if it is not one)."""
    starts = [0]
    depth = 0
    for match in _structure(piece):
        last = match.group()[-1]
        if last in (0x5B, 0x7B):
            depth += 1
        elif last == 0x2C:
            if depth == 0:
                starts.append(match.end())
        else:
            depth -= 1
            if depth < 0:
                return None
    return starts if depth == 0 else None


def _common_prefix(a: bytes, b: bytes) -> int:
    """How many leading bytes ``a`` and ``b`` share (compared in C, by halves)."""
    high = min(len(a), len(b))
    view_a = memoryview(a)
    if b.startswith(view_a[:high]):
        return high
    low = 0
    while high - low > 1:  # a[:low] == b[:low], a[:high] != b[:high]
        middle = (low + high) // 2
        if b.startswith(view_a[low:middle], low):
            low = middle
        else:
            high = middle
    return low
