"""A whole list sent again, read from the request line only past what the last one held.

A harness that resends its whole list every turn sends a line that begins, from its
``"messages"`` array on, with the text of the last list's items. Decoding that text again costs
more than everything else a turn does at a few hundred messages (a megabyte of JSON per 100
turns), and it only gives back what the server already knows. So the server keeps, of each
session's last list (the text of the items between the brackets), its length, its first and last
characters and its SHA-256 digest, never the text itself (what a session keeps does not grow with
the bytes it has seen, decision 0100): when a new line holds text of that length, ends and digest
at the start of its array, followed by ``,`` or ``]``, those items are the same values (the same
text decodes to the same values), and only the items after them are decoded, with the standard
library's decoder, whose values are what ``json.loads`` gives (as every line's are:
:mod:`selfctx.adapters.jsontext`). The rest of the line (the request without its array) is
decoded as any line is. The known items reach the session as placeholders with the version of
the list it remembers (:class:`~selfctx.adapters.harness.incremental.Known`); the session reads
the line whole after all when that is not the list it remembers (decision 0099).

Only a line whose ``"messages"`` key is written once outside the array (so that the array is
the request's ``params.messages``) takes this way; anything unexpected (a batch, another
method, the append form, a line that does not decode) is read whole, as before, so that errors
and answers are the same either way.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import attrs

from selfctx.adapters import jsontext

__all__ = ["Held", "ResentLine", "read_resent"]

_KEY = '"messages"'
_OPEN = re.compile(r"[ \t\n\r]*:[ \t\n\r]*(\[)[ \t\n\r]*")
_SPACE = re.compile(r"[ \t\n\r]*")
_DECODE = json.JSONDecoder().raw_decode
"""``json.loads`` of one value at a position of a text, and where it ends (in C)."""
_ENDS = 64
"""How many characters of each end of a held list's text are kept: a line whose array does not
begin with them is told apart without hashing anything."""


def _hasher(text: str) -> Any:
    """A SHA-256 state after ``text`` (the hash this machine's processors compute fastest:
    about 0.5 ms a megabyte, a third of BLAKE2b's time; decision 0099)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass"))


def _skip(line: str, at: int) -> int:
    """Past the JSON whitespace at ``at``."""
    space = _SPACE.match(line, at)
    return space.end() if space is not None else at


@attrs.frozen(eq=False)
class Held:
    """What the server keeps of a session's last whole list: of its items' text (from the first
    item's first character to the last one's last) the length, both ends and a digest."""

    session_id: str
    length: int
    head: str
    tail: str
    hasher: Any
    """The SHA-256 state after the text: the digest, and the start of the next list's."""
    count: int
    last: Any
    """Its last item, as decoded (None when it had none)."""
    version: int
    """The session's list version once it was recorded."""

    @classmethod
    def within(
        cls,
        session_id: str,
        line: str,
        span: tuple[int, int],
        hasher: Any,
        count: int,
        last: Any,
        version: int,
    ) -> Held:
        """What is held of the text ``line[span[0]:span[1]]`` whose SHA-256 state is
        ``hasher``; its ends are read from ``line`` in place (the text is never copied)."""
        begin, end = span
        head = line[begin : min(end, begin + _ENDS)]
        tail = line[max(begin, end - _ENDS) : end]
        return cls(session_id, end - begin, head, tail, hasher, count, last, version)

    @classmethod
    def of(cls, session_id: str, text: str, count: int, last: Any, version: int) -> Held:
        """What is held of ``text``."""
        return cls.within(session_id, text, (0, len(text)), _hasher(text), count, last, version)

    def begins(self, line: str, at: int) -> Any:
        """The SHA-256 state after the held text if ``line`` holds that text at ``at``
        (None if not)."""
        end = at + self.length
        if not (
            end <= len(line)
            and line.startswith(self.head, at)
            and line.startswith(self.tail, end - len(self.tail))
        ):
            return None
        hasher = _hasher(line[at:end])
        return hasher if hasher.digest() == self.hasher.digest() else None


@attrs.frozen
class ResentLine:
    """A line read with the items of a list held: the request (``params.messages`` holding
    ``known`` placeholders, then the items decoded) and what to hold of it once recorded."""

    line: str
    request: dict[str, Any]
    session_id: str
    known: Held | None
    """The list whose items the line repeats (None: it repeats none)."""
    begin: int
    end: int
    """Where its items' text is in ``line``."""
    count: int
    last: Any
    prefix: Any = None
    """The SHA-256 state after the known list's text (None: none known)."""

    @property
    def text(self) -> str:
        """Its items' text."""
        return self.line[self.begin : self.end]

    def held(self, version: int) -> Held:
        """What the server holds of this list once the session recorded it as ``version``."""
        line, begin, end = self.line, self.begin, self.end
        if self.prefix is None:
            hasher = _hasher(line[begin:end])
        else:  # the known list's state, taken on past it
            hasher = self.prefix.copy()
            new = line[begin + self.known.length : end]  # type: ignore[union-attr]
            hasher.update(new.encode("utf-8", "surrogatepass"))
        return Held.within(
            self.session_id, line, (begin, end), hasher, self.count, self.last, version
        )


def read_resent(line: str, held: dict[str, Held]) -> ResentLine | None:
    """``line`` read with the lists ``held`` (by session), or None: read it whole."""
    key = line.find(_KEY)
    if key < 0 or (key and line[key - 1] == "\\"):
        return None
    opened = _OPEN.match(line, key + len(_KEY))
    if opened is None:
        return None
    bracket, begin = opened.start(1), opened.end()  # begin: the first item (or the "]")
    known = prefix = None
    # the longest list whose text the array begins with (most lines: one candidate hashed)
    for candidate in sorted(held.values(), key=lambda h: h.count, reverse=True):
        if candidate.count and (prefix := candidate.begins(line, begin)) is not None:
            known = candidate
            break
    try:
        if known is not None:
            items: list[Any] = [None] * known.count  # placeholders
            end = begin + known.length
            at = _skip(line, end)
            more = line[at] == ","
            if not more and line[at] != "]":
                return None  # its last item goes on (a longer number): not the same item
            if more:
                at = _skip(line, at + 1)
        else:
            items, end, at = [], begin, begin
            more = line[at] != "]"
        while more:
            value, at = _DECODE(line, at)
            items.append(value)
            end = at
            at = _skip(line, at)
            if line[at] == "]":
                break
            if line[at] != ",":
                return None
            at = _skip(line, at + 1)
        rest = line[:bracket] + "[]" + line[at + 1 :]
        if rest.count(_KEY) != 1:
            return None  # another "messages" key: the array may not be params.messages
        request = jsontext.loads(rest)
    except (ValueError, IndexError, RecursionError):
        return None  # read whole: the same error as any line's
    if not isinstance(request, dict) or request.get("method") != "ingest":
        return None
    params = request.get("params")
    if not isinstance(params, dict):
        return None
    session_id = params.get("session_id")
    listed = params.get("messages")
    if type(listed) is not list or listed or not isinstance(session_id, str):
        return None
    if known is not None and (known.session_id != session_id or "extends" in params):
        return None  # another session's items, or not a whole list: read whole
    # With nothing known, every item was decoded: the request is the line's, whatever it is.
    params["messages"] = items
    count = len(items)
    if known is not None and count == known.count:
        last = known.last  # nothing new: the last known item
    else:
        last = items[-1] if items else None
    return ResentLine(line, request, session_id, known, begin, end, count, last, prefix)
