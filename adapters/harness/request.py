"""A session's provider requests, rendered and encoded again only from the first chat message
that changed.

:func:`selfctx.adapters.harness.render.render` turns a whole assembled context into a request each
time. A long session's chat is mostly what it was at the previous turn: the domain's render caches
hand back the very same message objects while they do not change. :class:`RequestCache` keeps,
for the chat as it was last rendered, the provider items it became, their JSON text and their
characters, up to the last *closed* point of the chat (every tool call before it answered before
it, every result before it answering a call before it: there, what follows cannot change what
precedes, since providers pair each call with its result). A new context is rendered from the
last closed point within the part of its chat that is unchanged (found by identity, in C); the
head (system prompt, metadata section) and the tail (active content, the last message's cache
mark) are made each time. The request is exactly ``render``'s (``tests/harness/test_request.py``
holds it to that), so a turn costs what is new in the chat, not the chat's length.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import operator
import os
import tempfile
from array import array
from collections.abc import Callable, Mapping, Sequence
from itertools import islice
from json.encoder import encode_basestring_ascii as _ascii
from typing import Any

import attrs
import orjson

from selfctx.adapters import jsontext
from selfctx.adapters.harness.encode import ascii_dumps
from selfctx.adapters.harness.ids import emitted_id
from selfctx.adapters.harness.render import (
    _NO_RESULT,
    _SESSION_START,
    _active_images,
    _active_text,
    _blocks,
    _image_anthropic,
    _image_openai,
    _image_responses,
    _metadata_text,
    _openai_message,
    _openai_parts,
    _responses_items,
    _responses_message,
    _system_prompt,
)
from selfctx.adapters.privatefile import read_at, write_at
from selfctx.application.settings import RENDERING_BUDGET
from selfctx.application.tokens import identical_prefix
from selfctx.domain.errors import InvalidInput
from selfctx.domain.rendering import AssembledContext, RenderedMessage

__all__ = ["Encoded", "Pieces", "RequestCache", "text_chars"]

log = logging.getLogger(__name__)


def text_chars(value: Any, key: str = "") -> int:
    """Characters of text the model reads in a message, item or block (the texts of
    ``content``, ``text`` and ``output``)."""
    if isinstance(value, str):
        return len(value) if key in ("content", "text", "output") else 0
    if isinstance(value, Mapping):
        return sum(text_chars(v, k) for k, v in value.items())
    if isinstance(value, list):
        return sum(text_chars(v, key) for v in value)
    return 0


_STALE_RENDERINGS = 64
"""Renderings beyond the ones kept (of messages no longer in the chat, or older than the last
``rendering_budget`` of it) before they are dropped all at once: each drop walks the kept ones,
so it happens once per this many."""


def _joined(text: str | tuple[str, ...]) -> str:
    return text if isinstance(text, str) else "".join(text)


@attrs.frozen
class Encoded:
    """A request: as JSON-ready values, as compact ASCII JSON text, and its figures."""

    _body: dict[str, Any] | Callable[[], dict[str, Any]] = attrs.field(eq=False, repr=False)
    """The body, or how to make it from ``text`` when it is first asked for (a cache that keeps
    only its items' texts: :class:`RequestCache` ``values=False``)."""
    _text: str | tuple[str, ...] = attrs.field(eq=_joined, repr=False)
    """:attr:`text`, or the parts it is joined from when it is first asked for."""
    chars: int
    """Characters of text the model reads (message, block and output texts)."""
    messages: int
    """Items of its conversation list."""

    @property
    def text(self) -> str:
        """``body`` as compact ASCII JSON (``json.dumps(body, ensure_ascii=True,
        separators=(",", ":"))``)."""
        text = self._text
        if not isinstance(text, str):
            text = "".join(text)
            object.__setattr__(self, "_text", text)
        return text

    @property
    def parts(self) -> tuple[str, ...]:
        """Strings whose concatenation is :attr:`text`, the last one ending with its closing
        brace: what a caller that writes the text into a larger one joins once, with its own
        parts (a request of a long session is half a megabyte; each copy of it costs)."""
        text = self._text
        return (text,) if isinstance(text, str) else text

    @property
    def body(self) -> dict[str, Any]:
        """The request as JSON-ready values."""
        body = self._body
        if callable(body):
            body = body()
            object.__setattr__(self, "_body", body)
        return body


@attrs.frozen
class _Item:
    """One final item of the chat's rendering, with its text and characters."""

    value: dict[str, Any]
    text: str
    chars: int


def _item(value: dict[str, Any]) -> _Item:
    return _Item(value, ascii_dumps(value), text_chars(value))


_JOINED_ITEMS = 256
"""Items whose texts are joined into one string once they are older than the ones kept apart
(decision 0121): a string of its own per item cost about 57 bytes beside its text (its header
and its place in a list), a joined one 9 (a comma and an offset)."""


class _SpillLost(Exception):
    """The spill file could not be read (or cut) back: the cache renders the chat again."""


class _Spill:
    """The joined runs of item texts in a private file: no name (unlinked as it is made),
    readable by its owner only, gone when the process or the cache lets it go (decision 0128).
    Its bytes are the runs' texts with a comma between two runs, so that the first ``k`` runs
    joined with commas are one read from its start. Texts are ASCII (``ascii_dumps``): a
    character a byte. A failure to write or read is an ``OSError``: the caller holds the run
    in memory instead, or renders again from the chat."""

    def __init__(self) -> None:
        self._file: Any = None
        self.starts = array("q")
        """Where each run begins in the file (machine integers)."""
        self.size = 0

    def __len__(self) -> int:
        return len(self.starts)

    def append(self, run: str) -> None:
        if self._file is None:
            # 0600, unlinked; held as long as the cache (closed when it is let go)
            self._file = tempfile.TemporaryFile(prefix="selfctx-prompt-")  # noqa: SIM115
        data = ("," + run if self.starts else run).encode("ascii")
        at = self.size
        write_at(self._file.fileno(), data, at)
        self.starts.append(at + (1 if self.starts else 0))
        self.size = at + len(data)

    def end(self, run: int) -> int:
        """Where run ``run`` ends (before the comma that follows it)."""
        return self.starts[run + 1] - 1 if run + 1 < len(self.starts) else self.size

    def read(self, begin: int, end: int) -> str:
        try:
            return read_at(self._file.fileno(), begin, end).decode("ascii")
        except (OSError, ValueError) as exc:
            raise _SpillLost(str(exc)) from exc

    def cut(self, runs: int) -> None:
        """Keep the first ``runs`` runs."""
        if runs < len(self.starts):
            self.size = self.starts[runs] - 1 if runs else 0
            del self.starts[runs:]
            try:
                os.ftruncate(self._file.fileno(), self.size)
            except (OSError, ValueError) as exc:
                raise _SpillLost(str(exc)) from exc


class _Items:
    """The final items of the chat's rendering so far, as parallel lists (so that a request
    joins them without a loop in Python). The texts of older items are held joined, in runs of
    :data:`_JOINED_ITEMS` separated by commas as a request lists them, and those runs are
    written to a private file (:class:`_Spill`) and read from it for each request; a truncation
    into a run takes it apart again (decisions 0121, 0128)."""

    def __init__(
        self,
        values: bool = True,
        pieces: bool = False,
        texts: bool = True,
        apart: int = 0,
        spill: bool = True,
    ) -> None:
        self.keeps_values = values
        """False: only the texts are kept (``values`` holds nothing), and a value is read
        back from its text when it is asked for."""
        self.keeps_texts = texts or not values
        """False: no item's text is kept (``texts`` holds an empty string for each): a cache
        whose requests are wanted as values only (decision 0102)."""
        self.values: list[dict[str, Any] | None] = []
        """Each item's values (with ``keeps_values`` only)."""
        self.pieces: Pieces | None = Pieces(self.values) if pieces and values else None
        """The leading items' compact UTF-8 JSON as orjson writes it, joined (None: not
        kept)."""
        self.texts: list[str] = []
        """The texts of the items from :attr:`joined_items` on, one string each."""
        self.spill: _Spill | None = _Spill() if spill else None
        """The first joined runs, in a file (None: none is, ever)."""
        self.joined: list[str] = []
        """The texts of the joined runs not in :attr:`spill`, each run of
        :data:`_JOINED_ITEMS` items one string, the texts separated by commas."""
        self.joined_items = 0
        """Items in joined runs, those in the file and those in :attr:`joined`."""
        self._ends = array("q")
        """Where each joined item's text ends in its run (machine integers)."""
        self._apart = apart + _JOINED_ITEMS
        """How many of the last items' texts stay strings of their own before a run is joined:
        the last ones, which a rendering truncates and which the renderings kept by identity
        hold as strings anyway."""
        self.chars = array("q", [0])
        """``chars[n]``: the characters of the first ``n`` items (machine integers)."""

    def __len__(self) -> int:
        return self.joined_items + len(self.texts)

    @property
    def _spilled(self) -> int:
        return len(self.spill) if self.spill is not None else 0

    def _run(self, run: int) -> str:
        """The text of joined run ``run``."""
        spilled = self._spilled
        if run >= spilled:
            return self.joined[run - spilled]
        assert self.spill is not None
        return self.spill.read(self.spill.starts[run], self.spill.end(run))

    def text(self, n: int) -> str:
        """Item ``n``'s text."""
        joined = self.joined_items
        if n >= joined:
            return self.texts[n - joined]
        run = n // _JOINED_ITEMS
        first = n - n % _JOINED_ITEMS
        begin = 0 if n == first else self._ends[n - 1] + 1
        spilled = self._spilled
        if run >= spilled:
            return self.joined[run - spilled][begin : self._ends[n]]
        assert self.spill is not None
        at = self.spill.starts[run]
        return self.spill.read(at + begin, at + self._ends[n])

    def _runs(self, runs: int) -> list[str]:
        """Strings whose concatenation, with commas between them, is the first ``runs`` joined
        runs with commas between them: the ones in the file are one read."""
        spill, spilled = self.spill, self._spilled
        if spill is None or not spilled or not runs:
            return self.joined[:runs]
        first = [spill.read(0, spill.end(min(spilled, runs) - 1))]
        return first + self.joined[: runs - spilled] if runs > spilled else first

    def listed(self, n: int) -> list[str]:
        """Strings whose concatenation, with commas between them, is the texts of the first
        ``n`` items with commas between them (whole runs where they can be)."""
        joined = self.joined_items
        if n >= joined:
            return [*self._runs(joined // _JOINED_ITEMS), *self.texts[: n - joined]]
        runs = n // _JOINED_ITEMS
        return [*self._runs(runs), *(self.text(k) for k in range(runs * _JOINED_ITEMS, n))]

    def value(self, n: int) -> dict[str, Any]:
        """Item ``n`` as values (read from its text when the values are not kept)."""
        value = self.values[n] if self.keeps_values else None
        return value if value is not None else jsontext.loads(self.text(n))

    def append(self, item: _Item) -> None:
        if self.keeps_values:
            self.values.append(item.value)
        if self.pieces is not None:
            self.pieces.append(item.value)
        texts = self.texts
        texts.append(item.text if self.keeps_texts else "")
        self.chars.append(self.chars[-1] + item.chars)
        if self.keeps_texts and len(texts) >= self._apart + _JOINED_ITEMS:
            run = texts[:_JOINED_ITEMS]
            end = -1
            for text in run:
                end += len(text) + 1
                self._ends.append(end)
            self._join(",".join(run))
            self.joined_items += _JOINED_ITEMS
            del texts[:_JOINED_ITEMS]

    def _join(self, run: str) -> None:
        """Hold a joined run: in the file while every run before it is there, else here."""
        spill = self.spill
        if spill is not None and not self.joined and run.isascii():
            try:
                spill.append(run)
                return
            except OSError as exc:  # no file (a read-only temporary directory, say): held here
                log.info("the prompt's older texts are held in memory: %s", exc)
                self.spill = None if not len(spill) else spill
        self.joined.append(run)

    def __iadd__(self, items: list[_Item]) -> _Items:
        for item in items:
            self.append(item)
        return self

    def truncate(self, n: int) -> None:
        if self.pieces is not None:
            self.pieces.truncate(n)
        del self.values[n:]
        joined = self.joined_items
        if n < joined:  # into a joined run: its items before ``n`` are strings again
            first = n - n % _JOINED_ITEMS
            run = first // _JOINED_ITEMS
            self.texts = [self.text(k) for k in range(first, n)]
            spilled = self._spilled
            if run < spilled:
                assert self.spill is not None
                self.spill.cut(run)
                self.joined = []
            else:
                del self.joined[run - spilled :]
            del self._ends[first:]
            self.joined_items = first
        else:
            del self.texts[n - joined :]
        del self.chars[n + 1 :]


class Pieces:
    """The compact UTF-8 JSON of a rendering's leading items as orjson writes each inside a
    request body, held as one buffer with a comma between items (as a body lists them), for a
    caller that encodes the body with orjson at every request (the proxy: ``codec.dumps_with``).

    The items are those of ``values`` (the list of :class:`_Items`, which appends and truncates
    both), up to the first one orjson refuses (none after it is held: a body holding that item
    is not orjson's). :meth:`listed` finds them in a body's list by identity and position, so
    that a request's JSON copies the runs of items sent before in one piece each instead of
    looking each item up (decision 0135)."""

    def __init__(self, values: list[Any]) -> None:
        self.values = values
        self.joined = bytearray()
        """The held items' JSON, a comma between two."""
        self.ends = array("q")
        """``ends[n]``: where item ``n``'s JSON ends in :attr:`joined` (machine integers)."""
        self.refused = False
        """An item after the held ones was refused: nothing is held beyond it."""
        self.offset = 0
        """Where the items begin in the last request's list (after its head: the system
        prompt's messages)."""

    def __len__(self) -> int:
        return len(self.ends)

    def append(self, value: Any) -> None:
        """Hold the JSON of ``value``, the next item's."""
        if self.refused:
            return
        try:
            # as an item of a body's list: two levels down, so that an item orjson refuses
            # there for its depth is not held
            piece = orjson.dumps([[value]])[2:-2]
        except (TypeError, orjson.JSONEncodeError):
            self.refused = True
            return
        joined = self.joined
        if joined:
            joined += b","
        joined += piece
        self.ends.append(len(joined))

    def truncate(self, n: int) -> None:
        """Keep the first ``n`` items."""
        if n < len(self.ends):
            del self.joined[self.ends[n - 1] if n else 0 :]
            del self.ends[n:]
        if n <= len(self.ends):
            self.refused = False

    def span(self, first: int, end: int) -> bytes:
        """The JSON of items ``first`` to ``end`` (excluded), a comma between two."""
        ends = self.ends
        with memoryview(self.joined) as view:  # one copy, not two
            return bytes(view[ends[first - 1] + 1 if first else 0 : ends[end - 1]])

    def listed(self, items: Sequence[Any]) -> list[Any]:
        """``items`` for ``orjson.dumps``: each run of items that are, at their positions, the
        very values held (item ``offset + n`` value ``n``), one ``orjson.Fragment`` of their
        JSON; the others as they are. One pass in C over the items, and one turn in Python per
        item that is not a value held."""
        first = self.offset
        end = min(len(items), first + len(self.ends))
        if end <= first:
            return list(items)
        out = list(items[:first])
        start = first  # where the run of held values being read began
        differ = map(operator.is_not, self.values, islice(items, first, end))
        for at in itertools.compress(itertools.count(first), differ):
            if at > start:
                out.append(orjson.Fragment(self.span(start - first, at - first)))
            out.append(items[at])
            start = at + 1
        if end > start:
            out.append(orjson.Fragment(self.span(start - first, end - first)))
        out.extend(items[end:])
        return out


@attrs.define
class _Cut:
    """A closed point of the chat: chat position, and how far the rendering had got there."""

    chat: int
    items: int
    pending: tuple[str, list[dict[str, Any]]] | None = None
    """Anthropic: the last message (role, blocks), which what follows may still join."""


class _Cuts:
    """The closed points of the chat, in order: their positions as machine integers, 8 bytes
    each, and the few with something pending by their number (a :class:`_Cut` of its own was
    about 100 bytes a message; decision 0105)."""

    def __init__(self) -> None:
        self.chat = array("q", [0])
        """The chat position of each cut (for bisection)."""
        self._items = array("q", [0])
        self._pending: dict[int, tuple[str, list[dict[str, Any]]]] = {}

    def append(self, cut: _Cut) -> None:
        if cut.pending is not None:
            self._pending[len(self.chat)] = cut.pending
        self.chat.append(cut.chat)
        self._items.append(cut.items)

    def before(self, position: int) -> _Cut:
        """The last cut at or before chat position ``position``; the ones after it go."""
        k = bisect.bisect_right(self.chat, position) - 1
        if k + 1 < len(self.chat):
            del self.chat[k + 1 :]
            del self._items[k + 1 :]
            if self._pending:
                self._pending = {n: p for n, p in self._pending.items() if n <= k}
        return _Cut(self.chat[k], self._items[k], self._pending.get(k))


class RequestCache:
    """The requests of one session in one format (``openai``, ``anthropic``, ``responses``),
    each rendered from where the last one's chat changed. Not thread-safe: a session's
    requests are made in turn. The values handed out are shared with later requests and must
    not be changed in place."""

    def __init__(
        self,
        fmt: str,
        *,
        tool_prefix: str = "",
        cache_control: bool = True,
        text: bool = True,
        values: bool = True,
        pieces: bool = False,
        rendering_budget: int = RENDERING_BUDGET,
        spill: bool = True,
    ) -> None:
        """``text``: False when only the body is wanted (``Encoded.text`` is then empty, and
        no item's text is kept: the values alone, and the pieces if asked for).
        ``values``: False when mostly the text is wanted: the chat's items are kept as text
        only (about half the memory per message), and ``Encoded.body`` is read back from the
        text when asked for (:meth:`keep_values` switches to keeping both).
        ``pieces``: keep each chat item's compact UTF-8 JSON beside its values (:attr:`pieces`),
        for a caller that encodes the body with orjson at every request (the proxy).
        ``rendering_budget``: how many of the chat's last messages have their rendering kept by
        identity (:meth:`_make`); an older message's is made again when a rendering walks it
        (decision 0117: what the cache holds beside the items' texts does not grow with the
        session).
        ``spill``: False for a cache made for one request: its older items' texts are held, not
        written to a file (decision 0128)."""
        if fmt not in ("openai", "anthropic", "responses"):
            raise InvalidInput("format", fmt, "use 'openai', 'anthropic' or 'responses'")
        self.fmt = fmt
        self.tool_prefix = tool_prefix
        self.cache_control = cache_control
        self.text = text
        self.values = values or not text
        self.keeps_pieces = pieces
        self.rendering_budget = rendering_budget
        self._spills = spill
        """The older items' texts go to a file (decision 0128); False once one was lost."""
        self._reset()

    @property
    def pieces(self) -> Pieces | None:
        """The chat items of the last request as orjson wrote them (:class:`Pieces`; None
        unless made with ``pieces``): ``codec.dumps_with`` puts them in the body's JSON
        instead of encoding them again."""
        return self._items.pieces

    def keep_values(self) -> None:
        """Keep each item's values beside its text from now on (the next request renders the
        chat again once): for a user that asks for ``Encoded.body`` at every request."""
        if not self.values:
            self.values = True
            self._reset()

    def _reset(self) -> None:
        self._chat: tuple[RenderedMessage, ...] = ()
        self._items = _Items(
            self.values,
            self.keeps_pieces,
            self.text,
            self.rendering_budget + _STALE_RENDERINGS,
            spill=self._spills,
        )
        self._cuts = _Cuts()
        self._rendered: dict[int, tuple[RenderedMessage, Any]] = {}
        """The rendering of each of the last ``rendering_budget`` messages of the chat as last
        rendered, by identity (and up to :data:`_STALE_RENDERINGS` others: messages it held
        before, or older ones)."""

    # -- the chat -------------------------------------------------------------------------

    def _same(self, chat: tuple[RenderedMessage, ...]) -> int:
        """How many leading messages of ``chat`` are the very objects last rendered."""
        return identical_prefix(self._chat, chat)

    def _make(self, message: RenderedMessage, make: Callable[[RenderedMessage], Any]) -> Any:
        hit = self._rendered.get(id(message))
        if hit is None or hit[0] is not message:
            made = make(message)
            if not self.text and make is not _blocks:  # the values alone (decision 0102)
                made = (
                    _Item(made.value, "", made.chars)
                    if isinstance(made, _Item)
                    else [_Item(m.value, "", m.chars) for m in made]
                )
            elif not self.values and make is not _blocks:  # the texts alone
                made = (
                    _Item(None, made.text, made.chars)  # type: ignore[arg-type]
                    if isinstance(made, _Item)
                    else [_Item(None, m.text, m.chars) for m in made]  # type: ignore[arg-type]
                )
            hit = (message, made)
            self._rendered[id(message)] = hit
        return hit[1]

    def _chat_items(self, chat: tuple[RenderedMessage, ...]) -> tuple[_Items, Any]:
        """The final items of the rendering of ``chat``, and what is still open at its end
        (Anthropic's last message; OpenAI's images waiting for their message)."""
        same = self._same(chat)
        cut = self._cuts.before(same)
        self._items.truncate(cut.items)
        self._forget_renderings(chat)
        self._chat = chat
        pending = cut.pending
        if pending is not None:
            pending = (pending[0], list(pending[1]))
        return self._render_from(chat, cut.chat, pending)

    def _forget_renderings(self, chat: tuple[RenderedMessage, ...]) -> None:
        """The renderings of messages ``chat`` no longer holds (an output shown whole, since
        collapsed) and of its older messages go: at most a fixed number of them stay, whatever
        the session's length (decision 0117)."""
        kept = min(len(chat), self.rendering_budget)
        if self._rendered and len(self._rendered) > kept + _STALE_RENDERINGS:
            keep = {id(m) for m in chat[len(chat) - kept :]}
            self._rendered = {i: hit for i, hit in self._rendered.items() if i in keep}

    @property
    def renderings(self) -> int:
        """Messages whose rendering is kept (at most ``rendering_budget`` and the stale ones
        dropped together)."""
        return len(self._rendered)

    def settle(self) -> None:
        """What the next rendering would drop first, dropped now: a resumed session's first
        rendering (decision 0110) renders every message, and keeps a rendering of each until
        the next one (decision 0129)."""
        self._forget_renderings(self._chat)

    def _render_from(
        self, chat: tuple[RenderedMessage, ...], start: int, pending: Any
    ) -> tuple[_Items, Any]:
        fmt = self.fmt
        items = self._items
        results = {m.toolcall_id: m for m in chat[start:] if m.role == "tool"}
        open_calls: set[str | None] = set()
        orphans: set[str | None] = set()
        shown: list[dict[str, Any]] = []
        for position in range(start, len(chat)):
            message = chat[position]
            if message.role == "tool":  # rendered beside its call
                if message.toolcall_id in open_calls:
                    open_calls.discard(message.toolcall_id)
                    if not open_calls and not orphans and not shown:
                        # the last open call answered: closed here too (a chat of calls and
                        # their results is closed after each result, not only before a text)
                        kept = None if pending is None else (pending[0], list(pending[1]))
                        self._cuts.append(_Cut(position + 1, len(items), kept))
                else:
                    orphans.add(message.toolcall_id)
                continue
            paired = [message]
            for call in message.tool_calls:
                result = results.pop(call.id, None)
                open_calls.add(call.id)  # until its result comes, or for good if it never does
                if result is None:
                    result = RenderedMessage(
                        "tool", f"toolcall_ref id={call.id} ({_NO_RESULT})", toolcall_id=call.id
                    )
                orphans.discard(call.id)
                paired.append(result)
            if fmt == "openai":
                for each in paired:
                    if shown and each.role != "tool":
                        items.append(_item({"role": "user", "content": shown}))
                        shown = []
                    items.append(self._make(each, _final_openai))
                    if each.role == "tool" and each.images:
                        call_id = emitted_id(each.toolcall_id or "")
                        shown.append({"type": "text", "text": f"[images of tool call {call_id}]"})
                        shown += [_image_openai(image) for image in each.images]
            elif fmt == "anthropic":
                for each in paired:
                    blocks = self._make(each, _blocks)
                    role = "assistant" if each.role == "assistant" else "user"
                    if not blocks:
                        continue
                    if pending is not None and pending[0] == role:
                        merged = pending[1] + blocks
                        merged.sort(key=lambda b: 0 if b["type"] == "tool_result" else 1)
                        pending = (role, merged)
                    else:
                        if pending is not None:
                            items.append(_item({"role": pending[0], "content": pending[1]}))
                        pending = (role, list(blocks))
            else:
                for each in paired:
                    items += self._make(each, _final_responses)
            if not open_calls and not orphans:
                # Closed: what follows cannot change what precedes (OpenAI's images waiting
                # for their message go out now, as anything that follows would send them).
                if shown:
                    items.append(_item({"role": "user", "content": shown}))
                    shown = []
                kept = None if pending is None else (pending[0], list(pending[1]))
                self._cuts.append(_Cut(position + 1, len(items), kept))
        open_end: Any = shown if fmt == "openai" else pending
        if fmt == "anthropic" and pending is not None:
            open_end = (pending[0], list(pending[1]))
        return items, open_end

    # -- the request ----------------------------------------------------------------------

    def render(self, context: AssembledContext) -> Encoded:
        """The request for ``context``: ``render(context, fmt, tool_prefix=...)``, encoded."""
        try:
            return self._render(context)
        except _SpillLost as exc:  # the older texts are made again from the chat, held here
            log.warning("the prompt's spill file was lost (%s): rendering the chat again", exc)
            self._spills = False
            self._reset()
            return self._render(context)

    def _render(self, context: AssembledContext) -> Encoded:
        items, open_end = self._chat_items(tuple(context.chat))
        if self.fmt == "openai":
            return self._openai(context, items, open_end)
        if self.fmt == "anthropic":
            return self._anthropic(context, items, open_end)
        return self._responses(context, items)

    def _openai(
        self, context: AssembledContext, items: _Items, shown: list[dict[str, Any]]
    ) -> Encoded:
        prompt = _system_prompt(context, self.tool_prefix)
        head: list[dict[str, Any]] = []
        if prompt.strip():
            head.append({"role": "system", "content": prompt})
        if context.metadata:
            head.append({"role": "system", "content": _metadata_text(context, self.tool_prefix)})
        tail: list[dict[str, Any]] = []
        if shown:
            tail.append({"role": "user", "content": shown})
        if context.active:
            content = _openai_parts(_active_text(context), _active_images(context))
            tail.append({"role": "user", "content": content})
        if not head and not items and not tail:
            tail.append({"role": "user", "content": _SESSION_START})
        return _finish("messages", head, items, tail, {}, text=self.text)

    def _anthropic(
        self,
        context: AssembledContext,
        items: _Items,
        pending: tuple[str, list[dict[str, Any]]] | None,
    ) -> Encoded:
        system: list[dict[str, Any]] = []
        if context.system_prompt.strip():
            system.append({"type": "text", "text": _system_prompt(context, self.tool_prefix)})
        if context.metadata:
            system.append({"type": "text", "text": _metadata_text(context, self.tool_prefix)})
        head: list[dict[str, Any]] = []
        first_role = items.value(0)["role"] if items else (pending[0] if pending else None)
        if first_role != "user":
            opening: list[dict[str, Any]] = [{"type": "text", "text": _SESSION_START}]
            if pending is None and not items:
                pending = ("user", opening)
            else:
                head.append({"role": "user", "content": opening})
        last: dict[str, Any]
        shared = len(items)
        if pending is not None:
            last = {"role": pending[0], "content": list(pending[1])}
        else:  # the last message is final in the cache: change a copy of it
            final = items.value(len(items) - 1)
            last = {"role": final["role"], "content": list(final["content"])}
            shared -= 1
        blocks = last["content"]
        if last["role"] == "assistant" and not context.active and blocks[-1]["type"] == "text":
            # A final assistant message is a prefill, which may not end with whitespace.
            blocks[-1] = {**blocks[-1], "text": blocks[-1]["text"].rstrip()}
        if self.cache_control:
            if system:
                system[-1] = {**system[-1], "cache_control": {"type": "ephemeral"}}
            blocks[-1] = {**blocks[-1], "cache_control": {"type": "ephemeral"}}
        tail = [last]
        if context.active:
            active = [{"type": "text", "text": _active_text(context)}]
            active += [_image_anthropic(image) for image in _active_images(context)]
            if last["role"] == "user":
                last["content"] = blocks + active
            else:
                tail.append({"role": "user", "content": active})
        extra = {"system": system} if system else {}
        return _finish("messages", head, items, tail, extra, shared, text=self.text)

    def _responses(self, context: AssembledContext, items: _Items) -> Encoded:
        prompt = _system_prompt(context, self.tool_prefix)
        head: list[dict[str, Any]] = []
        if prompt.strip():
            head.append(_responses_message("developer", prompt))
        if context.metadata:
            head.append(_responses_message("developer", _metadata_text(context, self.tool_prefix)))
        tail: list[dict[str, Any]] = []
        if context.active:
            active = _responses_message("user", _active_text(context))
            active["content"] += [_image_responses(image) for image in _active_images(context)]
            tail.append(active)
        return _finish("input", head, items, tail, {}, text=self.text)


def _final_openai(message: RenderedMessage) -> _Item:
    value = _openai_message(message)
    if message.role == "tool":
        # The commonest item, written as ``ascii_dumps`` writes this three-key object (the
        # strings escaped by the same C function) at a third of its cost: a resumed session's
        # first request writes every one of them.
        call_id, content = value["tool_call_id"], value["content"]
        text = f'{{"role":"tool","tool_call_id":{_ascii(call_id)},"content":{_ascii(content)}}}'
        return _Item(value, text, len(content))
    if message.role != "user":
        # A tool or assistant message's only text is its ``content`` (calls' arguments are not
        # text the model reads): counted without walking the item (text_chars gives the same).
        content = value["content"]
        return _Item(value, ascii_dumps(value), len(content) if isinstance(content, str) else 0)
    return _item(value)


def _final_responses(message: RenderedMessage) -> list[_Item]:
    return [_item(value) for value in _responses_items(message)]


def _read(listed: list[str]) -> list[Any]:
    """The items whose texts, with commas between them, are ``listed`` joined with commas."""
    return list(jsontext.loads("[" + ",".join(listed) + "]")) if listed else []


def _finish(
    key: str,
    head: Sequence[dict[str, Any]],
    items: _Items,
    tail: Sequence[dict[str, Any]],
    extra: dict[str, Any],
    shared: int | None = None,
    *,
    text: bool = True,
) -> Encoded:
    """The request: ``head``, the first ``shared`` items (all by default), ``tail``."""
    n = len(items) if shared is None else shared
    count = len(head) + n + len(tail)
    if items.pieces is not None:
        items.pieces.offset = len(head)
    chars = items.chars[n] + sum(text_chars(v) for v in (*head, *tail))
    chars += sum(text_chars(value) for value in extra.values())
    kept = items.listed(n) if items.keeps_texts else []
    body: dict[str, Any] | Callable[[], dict[str, Any]]
    if items.keeps_values:
        values = items.values if n == len(items) else items.values[:n]
        body = {key: [*head, *values, *tail], **extra}
    else:  # read back from the texts, if it is ever asked for
        body = lambda: {key: [*head, *_read(kept), *tail], **extra}  # noqa: E731
    if not text:
        assert isinstance(body, dict)  # a cache without text keeps its values
        return Encoded(body, "", chars, count)
    listed = [*(ascii_dumps(v) for v in head), *kept, *(ascii_dumps(v) for v in tail)]
    # '{"key":[' item "," item ... "]" ',"name":value'... "}", joined once, when it is asked for
    pieces = [","] * (2 * len(listed) - 1) if listed else []
    pieces[0::2] = listed
    members = "".join(f",{ascii_dumps(name)}:{ascii_dumps(value)}" for name, value in extra.items())
    return Encoded(body, (f'{{"{key}":[', *pieces, "]" + members, "}"), chars, count)
