"""What each model request held: one small record per request, kept as the versions of one
document per session, so that the inspector (``selfctx ui``) can show every request exactly and
cheaply (decision 0055).

A record says when the request went out, at which log position the context was assembled, the
client, API and model, its size naive and managed with the part of each a provider's prompt cache
could serve (the prefix shared with the session's previous request), the managed prompt's size by
part (system, metadata lines, chat, active outputs and files), a digest of the context that was
sent, and running totals. The context itself is not stored again: the log and the object versions
rebuild it (``ContextService.context_at``), and the digest says whether the rebuild is the prompt
that was sent.

The figures come from a :class:`RequestMeter` per session that remembers, by identity, the
messages of the previous request: both renderers hand back the very message objects of an
unchanged prefix, so a request costs what is new in it, not the conversation's length.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final, overload

import attrs

from selfctx.application.ports.store import Document, Version
from selfctx.domain.chat import thaw_json
from selfctx.domain.prompt_cache import OPENAI, CacheRules, rules_for
from selfctx.domain.rendering import ActiveBlock, AssembledContext, RenderedMessage

__all__ = [
    "MARKED",
    "PARTS",
    "REQUEST_TYPE",
    "Line",
    "Mark",
    "PromptLines",
    "RequestFacts",
    "RequestMeter",
    "RequestRecord",
    "cache_cost",
    "context_digest",
    "context_digests",
    "entry_marks",
    "record_from_version",
    "request_document",
    "requests_id",
    "rules_of",
]

REQUEST_TYPE: Final = "request_log"
PARTS: Final = ("system", "metadata", "chat", "active")
"""What a managed prompt holds, in the order of :attr:`RequestRecord.parts`."""

_MAX_LABEL = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def cache_cost(size: int, shared: int, rules: CacheRules, *, alive: bool = True) -> float:
    """What a provider bills for a prompt of ``size`` tokens whose first ``shared`` tokens repeat
    the previous request's, in units of an uncached input token, by ``rules`` (the prices,
    minimum, lifetime and granularity of ``selfctx.domain.prompt_cache``, decision 0047).
    ``alive``: the previous request is recent enough for its cache entry to live. The prefix is
    read, the rest written to the cache (the proxy marks the end of the conversation)."""
    read = min(shared, size) if alive else 0
    if read < rules.min_tokens:
        read = 0
    read -= read % rules.granularity
    written = size - read if size >= rules.min_tokens else 0
    uncached = size - read - written
    return rules.read * read + rules.write * written + uncached


def rules_of(api: str | None) -> CacheRules:
    """The caching rules of a request format; automatic prefix caching for one the model does
    not know (most providers cache that way)."""
    try:
        return rules_for(api or "")
    except ValueError:
        return OPENAI


def _seconds_between(earlier: str, later: str) -> float | None:
    try:
        return (datetime.fromisoformat(later) - datetime.fromisoformat(earlier)).total_seconds()
    except ValueError:
        return None


def requests_id(session_id: str) -> str:
    """The id of the document whose versions are a session's request records."""
    return f"requests:{session_id}"


def _label(value: object) -> str | None:
    """A client-given name kept short and on one line (a model name, a user agent)."""
    if not isinstance(value, str) or not value:
        return None
    return _CONTROL.sub(" ", value)[:_MAX_LABEL]


MARKED: Final = {
    "ObjectDeactivated": "collapse",
    "ObjectActivated": "activation",
    "ChatCompacted": "compaction",
    "CheckpointCreated": "checkpoint",
    "RolledBack": "rollback",
}
"""Events a request's record keeps as marks, by the name of their mark (an activation only when
the agent or a user asked for it: a new output or a file read is shown by the prompt itself)."""
MARK_FIELDS: Final = (
    "object_id", "name", "by", "reason", "superseded_by", "upto", "case", "label"
)  # fmt: skip
"""What a mark keeps of its event (``name``: how the session's prompt named the object, its
handle under the inline layouts; ``label``: a checkpoint's)."""
MAX_GAP: Final = 512
"""Log entries a record reads back at most to find the marks since the previous request (the
first request recorded after a session was opened): a longer gap leaves them to the log."""
MAX_PENDING: Final = 4096
"""Marks an open session keeps between two recorded requests at most."""
MAX_LINES: Final = 4096
"""Collapsed lines one record keeps at most (:class:`PromptLines`); beyond, it keeps none."""


@attrs.frozen
class PromptLines:
    """The one-line forms of collapsed tool outputs a request sent, as sent: those that changed
    since the previous record (``complete`` False), or every one the prompt held (``complete``
    True: the first record a meter makes, which knows nothing of the records before). The lines
    of request ``n`` are those of the latest complete record up to ``n`` updated by each record
    after it, so the inspector shows a prompt without rebuilding its collapsed lines (which
    name files it would otherwise read); the record's digest says whether they are the ones
    sent (decision 0076)."""

    complete: bool
    shown: tuple[Line, ...] = ()
    """One per tool call."""

    def to_json(self) -> dict[str, Any]:
        return {
            "complete": self.complete,
            "shown": [[x.call_id, x.text, x.size, x.is_error] for x in self.shown],
        }


@attrs.frozen
class Line:
    """A collapsed output as one request sent it."""

    call_id: str
    text: str
    """The tool message's text: the one line."""
    size: int | None
    """Characters of the output's content (None: not known when it was recorded)."""
    is_error: bool


@attrs.frozen
class Mark:
    """One marked event of a session's log (see :data:`MARKED`)."""

    seq: int
    event: str
    fields: Mapping[str, str] = attrs.field(factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "event": self.event, **self.fields}


def entry_marks(entry: Mapping[str, Any], events: Iterable[Mapping[str, Any]]) -> list[Mark]:
    """The marks of one log entry (``events``: its events as stored)."""
    out = []
    seq = _int(entry.get("seq"))
    for event in events:
        name = event.get("event")
        if name not in MARKED:
            continue
        if name == "ObjectActivated" and entry.get("command") != "Activate":
            continue
        fields = {
            k: str(event[k])
            for k in MARK_FIELDS
            if isinstance(event.get(k), str | int) and not isinstance(event.get(k), bool)
        }
        out.append(Mark(seq, str(name), fields))
    return out


@attrs.frozen
class RequestFacts:
    """What only the caller knows about a request: who sent it, and the naive request."""

    api: str | None = None
    """``anthropic``, ``openai``, ``responses``, or a harness's format."""
    model: str | None = None
    client: str | None = None
    """The client's name (its User-Agent's first word, say)."""
    naive_tokens: int | None = None
    """The client's own request, in tokens (None: unknown; 0: the client made no such request,
    as for a second round the proxy made on its own)."""
    naive_shared: int = 0
    """Tokens of the client's request that repeat its previous one (the cacheable prefix)."""
    round: int = 0
    """0 for the request a client's call caused; 1, 2, ... for the proxy's context-tool rounds."""
    note: str | None = None
    """What the caller changed between the context and the request it sent, if anything (the
    inspector shows it beside a rebuilt prompt that differs)."""


@attrs.frozen
class RequestRecord:
    """One model request of a session (see the module docstring)."""

    n: int
    """1 for the session's first recorded request."""
    at: str
    seq: int
    """The session's log position when the context was assembled: ``context_at(seq)``."""
    facts: RequestFacts
    managed_tokens: int
    managed_shared: int
    parts: tuple[int, int, int, int]
    """Tokens of the managed prompt by :data:`PARTS`."""
    digest: str
    """:func:`context_digest` of the context sent."""
    total_naive: int
    total_managed: int
    cost_direct: float
    """Running total of :func:`cache_cost` over the client's own requests (token units)."""
    cost_managed: float
    tx_id: int | None = None
    """The transaction that recorded it (known once read back from the store)."""
    tx_time: str | None = None
    marks: tuple[Mark, ...] | None = None
    """What the log recorded since the previous request that the inspector marks on the
    timeline (:data:`MARKED`), oldest first; None when it was not summarised (records written
    before they held marks, or a gap too long to read): the log says it then."""
    lines: PromptLines | None = None
    """The collapsed outputs' lines this request sent anew (None: not kept, as by records
    written before lines were, under the ``ssot`` layout, or beyond :data:`MAX_LINES`)."""

    def to_json(self) -> dict[str, Any]:
        f = self.facts
        marks = None if self.marks is None else [m.to_json() for m in self.marks]
        return {
            "marks": marks,
            "lines": None if self.lines is None else self.lines.to_json(),
            "at": self.at,
            "seq": self.seq,
            "api": f.api,
            "model": f.model,
            "client": f.client,
            "round": f.round,
            "note": f.note,
            "naive": f.naive_tokens,
            "naive_shared": f.naive_shared,
            "managed": self.managed_tokens,
            "managed_shared": self.managed_shared,
            "parts": list(self.parts),
            "digest": self.digest,
            "totals": [self.total_naive, self.total_managed],
            "cost": [round(self.cost_direct, 2), round(self.cost_managed, 2)],
        }


def request_document(session_id: str, record: RequestRecord) -> dict[str, Any]:
    """The version of ``requests:{session}`` that records ``record``: the record as one value
    (a store that indexes every attribute indexes it once; decision 0017)."""
    return {
        "xt/id": requests_id(session_id),
        "type": REQUEST_TYPE,
        "session_id": session_id,
        "n": record.n,
        "record": record.to_json(),
    }


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _ints(value: Any, size: int) -> list[int]:
    if isinstance(value, list) and len(value) == size:
        return [_int(v) for v in value]
    return [0] * size


def _numbers(value: Any, size: int) -> list[float]:
    if isinstance(value, list) and len(value) == size:
        return [float(v) if isinstance(v, int | float) else 0.0 for v in value]
    return [0.0] * size


def record_from_document(
    doc: Document, tx_id: int | None = None, tx_time: str | None = None
) -> RequestRecord | None:
    """The record a version holds (None for anything that is not one)."""
    data = doc.get("record")
    if doc.get("type") != REQUEST_TYPE or not isinstance(data, Mapping):
        return None
    parts = _ints(data.get("parts"), 4)
    totals = _ints(data.get("totals"), 2)
    cost = _numbers(data.get("cost"), 2)
    naive = data.get("naive")
    facts = RequestFacts(
        api=_label(data.get("api")),
        model=_label(data.get("model")),
        client=_label(data.get("client")),
        naive_tokens=naive if isinstance(naive, int) else None,
        naive_shared=_int(data.get("naive_shared")),
        round=_int(data.get("round")),
        note=_label(data.get("note")),
    )
    return RequestRecord(
        n=_int(doc.get("n")),
        at=str(data.get("at") or ""),
        seq=_int(data.get("seq")),
        facts=facts,
        managed_tokens=_int(data.get("managed")),
        managed_shared=_int(data.get("managed_shared")),
        parts=(parts[0], parts[1], parts[2], parts[3]),
        digest=str(data.get("digest") or ""),
        total_naive=totals[0],
        total_managed=totals[1],
        cost_direct=cost[0],
        cost_managed=cost[1],
        tx_id=tx_id,
        tx_time=tx_time,
        marks=_marks(data.get("marks")),
        lines=_lines(data.get("lines")),
    )


def _lines(value: Any) -> PromptLines | None:
    if not isinstance(value, Mapping) or not isinstance(value.get("shown"), list):
        return None
    shown = tuple(
        Line(x[0], x[1], x[2] if isinstance(x[2], int) else None, x[3] is True)
        for x in value["shown"]
        if isinstance(x, list) and len(x) == 4 and isinstance(x[0], str) and isinstance(x[1], str)
    )
    if len(shown) != len(value["shown"]):
        return None  # damaged: the inspector rebuilds the prompt instead
    return PromptLines(value.get("complete") is True, shown)


def _marks(value: Any) -> tuple[Mark, ...] | None:
    if not isinstance(value, list):
        return None
    out = []
    for item in value:
        if isinstance(item, Mapping) and isinstance(item.get("event"), str):
            fields = {
                k: str(v) for k, v in item.items() if k in MARK_FIELDS and isinstance(v, str | int)
            }
            out.append(Mark(_int(item.get("seq")), str(item["event"]), fields))
    return tuple(out)


def record_from_version(version: Version) -> RequestRecord | None:
    return record_from_document(version.document, version.tx_id, version.tx_time)


def _is_record(doc: Document) -> bool:
    """The version holds a record (exactly when :func:`record_from_document` gives one)."""
    return doc.get("type") == REQUEST_TYPE and isinstance(doc.get("record"), Mapping)


class RequestRecords(Sequence[RequestRecord]):
    """A session's request records, oldest first, each decoded when it is first read: a page
    of one request reads that record and the few before it that its lines need, not all of
    them. ``seqs`` and ``marked`` answer from the stored documents without decoding. Records
    may be appended (the latest, read on its own) or replaced; reading from several threads is
    safe (a record decoded twice is the same record)."""

    def __init__(self, versions: Iterable[Version] = ()) -> None:
        self._versions: list[Version | None] = [v for v in versions if _is_record(v.document)]
        self._records: list[RequestRecord | None] = [None] * len(self._versions)
        self._seqs: list[int] | None = None

    def __len__(self) -> int:
        return len(self._records)

    def _at(self, i: int) -> RequestRecord:
        record = self._records[i]
        if record is None:
            version = self._versions[i]
            assert version is not None
            record = record_from_version(version)
            assert record is not None
            self._records[i] = record
        return record

    @overload
    def __getitem__(self, i: int) -> RequestRecord: ...

    @overload
    def __getitem__(self, i: slice) -> list[RequestRecord]: ...

    def __getitem__(self, i: int | slice) -> RequestRecord | list[RequestRecord]:
        if isinstance(i, slice):
            return [self._at(k) for k in range(*i.indices(len(self._records)))]
        if i < 0:
            i += len(self._records)
        if not 0 <= i < len(self._records):
            raise IndexError(i)
        return self._at(i)

    def __setitem__(self, i: int, record: RequestRecord) -> None:
        if i < 0:
            i += len(self._records)
        if not 0 <= i < len(self._records):
            raise IndexError(i)
        self._records[i] = record
        self._seqs = None

    def append(self, record: RequestRecord) -> None:
        self._versions.append(None)
        self._records.append(record)
        if self._seqs is not None:
            self._seqs.append(record.seq)

    def seqs(self) -> list[int]:
        """Each record's log position (what ``record.seq`` says), without decoding them."""
        if self._seqs is None or len(self._seqs) != len(self._records):
            self._seqs = [
                r.seq if r is not None else _int(_data(v).get("seq"))
                for r, v in zip(self._records, self._versions, strict=True)
            ]
        return self._seqs

    def lines(self, i: int) -> PromptLines | None:
        """``self[i].lines``, decoding only the lines of a record not decoded yet (a request's
        lines are those of every record back to the latest complete one: often all of them)."""
        if not 0 <= i < len(self._records):
            raise IndexError(i)
        record = self._records[i]
        return record.lines if record is not None else _lines(_data(self._versions[i]).get("lines"))

    def marks(self, i: int) -> tuple[Mark, ...] | None:
        """``self[i].marks``, decoding only the marks of a record not decoded yet (the
        collapses a request page explains are every record's marks)."""
        if not 0 <= i < len(self._records):
            raise IndexError(i)
        record = self._records[i]
        return record.marks if record is not None else _marks(_data(self._versions[i]).get("marks"))

    def marked(self) -> bool:
        """There is a record, and every one holds its marks (``record.marks is not None``)."""
        return bool(self._records) and all(
            r.marks is not None if r is not None else isinstance(_data(v).get("marks"), list)
            for r, v in zip(self._records, self._versions, strict=True)
        )


def _data(version: Version | None) -> Mapping[str, Any]:
    assert version is not None
    data = version.document["record"]
    assert isinstance(data, Mapping)
    return data


# -- the digest of a context ----------------------------------------------------------------


_DIGESTED = json.JSONEncoder(ensure_ascii=True, sort_keys=True).encode
"""``json.dumps(..., ensure_ascii=True, sort_keys=True)`` without building an encoder a call."""


def _sha(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def _message_digest(message: RenderedMessage) -> bytes:
    calls = [[c.id, c.name, thaw_json(c.arguments)] for c in message.tool_calls]
    body = [
        message.role,
        message.text,
        calls,
        message.toolcall_id,
        message.is_error,
        [thaw_json(r) for r in message.reasoning],
        [thaw_json(i) for i in message.images],
    ]
    return _sha(_DIGESTED(body))


def _block_digest(block: ActiveBlock) -> bytes:
    body = [block.object_id, block.content, [thaw_json(i) for i in block.images]]
    return _sha(_DIGESTED(body))


_START = bytes(32)


def _chain(previous: bytes, digest: bytes) -> bytes:
    """The digest of a chat so far: each message's digest chained onto the one before, so that
    a chat that grows at its end costs the new messages only."""
    return hashlib.sha256(previous + digest).digest()


def _combine(system: bytes, metadata: bytes, chat: bytes, active: Iterable[bytes]) -> str:
    whole = hashlib.sha256(system + metadata + chat)
    for part in active:
        whole.update(part)
    return whole.hexdigest()


def context_digest(context: AssembledContext) -> str:
    """SHA-256 over everything the context shows (every section, every message's role, text,
    tool calls, reasoning and images): equal digests mean the same prompt."""
    return context_digests(context, (context.active,))[0]


def context_digests(
    context: AssembledContext, actives: Iterable[Sequence[ActiveBlock]]
) -> list[str]:
    """:func:`context_digest` of ``context`` with each of ``actives`` as its active blocks in
    turn (its chat digested once)."""
    chat = _START
    for message in context.chat:
        chat = _chain(chat, _message_digest(message))
    system, metadata = _sha(context.system_prompt), _sha("\n".join(context.metadata))
    return [
        _combine(system, metadata, chat, (_block_digest(b) for b in active)) for active in actives
    ]


# -- measuring successive requests ----------------------------------------------------------


@attrs.define
class _Seen:
    message: RenderedMessage
    tokens: int
    part: int
    digest: bytes
    through: int
    """Tokens of the chat up to and including this message."""
    chain: bytes
    """The chat's digest up to and including this message."""


_SYSTEM, _METADATA, _CHAT, _ACTIVE = range(4)


def _message_tokens(message: RenderedMessage, count: Callable[[str], int]) -> int:
    n = count(message.text)
    for call in message.tool_calls:
        n += count(call.name) + count(json.dumps(thaw_json(call.arguments), ensure_ascii=False))
    return n


class RequestMeter:
    """The figures of one session's successive requests (not thread-safe: the caller holds the
    session's lock). Messages that are the very objects of the previous request are not counted
    or hashed again; they are also the prefix a provider's cache serves."""

    def __init__(self, last: RequestRecord | None = None) -> None:
        self.last = last
        """The session's latest record (read from the store when the meter was made)."""
        self._chat: list[_Seen] = []
        self._system: tuple[str, int, bytes] | None = None
        self._metadata: tuple[tuple[str, ...], int, bytes] | None = None
        self._active: list[tuple[ActiveBlock, int, bytes]] = []
        self._parts = [0, 0, 0, 0]
        """Tokens of the remembered chat messages by part."""
        self._lines: dict[str, bytes] | None = None
        """Tool call id → digest of its collapsed line as last recorded (None: no record of
        this meter holds lines yet: its next lines are complete)."""
        self._unrecorded: dict[str, tuple[Line, bytes]] = {}
        """Lines measured but not yet recorded: tool call id → (line, digest)."""
        self.lines: PromptLines | None = None
        """The lines of the context :meth:`measure` saw last, for its record (kept as recorded
        once :meth:`lines_recorded` says the record was written)."""

    def measure(
        self,
        context: AssembledContext,
        count: Callable[[str], int],
        is_active: Callable[[str], bool],
        inline: bool,
        size_of: Callable[[str], int | None] = lambda _: None,
    ) -> tuple[int, int, tuple[int, int, int, int], str]:
        """``(tokens, tokens shared with the previous request, tokens by part, digest)`` of
        ``context``; ``is_active`` tells whether a tool call's output is shown in full,
        ``size_of`` the characters of its content (for :attr:`lines`)."""
        shared = 0
        cached = True  # still inside the prefix the previous request had
        if self._system is not None and self._system[0] == context.system_prompt:
            system = self._system
        else:
            text = context.system_prompt
            system = self._system = (text, count(text), _sha(text))
            cached = False
        if cached:
            shared += system[1]
        metadata = context.metadata
        if self._metadata is not None and self._metadata[0] == metadata:
            meta = self._metadata
        else:
            text = "\n".join(metadata)
            meta = self._metadata = (metadata, count(text) if metadata else 0, _sha(text))
            cached = False
        if cached:
            shared += meta[1]
        chat = context.chat
        memo = self._chat
        same = _identical_prefix(memo, chat)
        before = memo[same:]
        for seen in before:
            self._parts[seen.part] -= seen.tokens
        del memo[same:]
        repeated = same  # messages equal to the previous request's, from the first on
        through = memo[-1].through if memo else 0
        chain = memo[-1].chain if memo else _START
        for k, message in enumerate(chat[same:]):
            mine = _message_digest(message)
            old = before[k] if repeated == same + k and k < len(before) else None
            if old is not None and old.digest == mine:
                # rendered again, the same to a provider: its cache serves it too
                tokens, part = old.tokens, old.part
                repeated += 1
            else:
                tokens = _message_tokens(message, count)
                if message.role != "tool":
                    part = _CHAT
                elif inline and is_active(message.toolcall_id or ""):
                    part = _ACTIVE
                else:
                    part = _METADATA
            through += tokens
            chain = _chain(chain, mine)
            memo.append(_Seen(message, tokens, part, mine, through, chain))
            self._parts[part] += tokens
        parts = [system[1], meta[1], 0, 0]
        for part, tokens in enumerate(self._parts):
            parts[part] += tokens
        if cached:
            shared += memo[repeated - 1].through if repeated else 0
            cached = repeated == len(chat)
        blocks = []
        previous = {id(b): (b, n, d) for b, n, d in self._active}
        for position, block in enumerate(context.active):
            hit = previous.get(id(block))
            if hit is None or hit[0] is not block:
                hit = (block, count(block.text), _block_digest(block))
            if cached and (position >= len(self._active) or self._active[position][0] is not block):
                cached = False
            if cached:
                shared += hit[1]
            blocks.append(hit)
            parts[_ACTIVE] += hit[1]
        self._active = blocks
        self._collect_lines(chat, same, is_active, inline, size_of)
        digest = _combine(
            system[2], meta[2], memo[-1].chain if memo else _START, (d for _, _, d in blocks)
        )
        return sum(parts), shared, (parts[0], parts[1], parts[2], parts[3]), digest

    def _collect_lines(
        self,
        chat: Sequence[RenderedMessage],
        same: int,
        is_active: Callable[[str], bool],
        inline: bool,
        size_of: Callable[[str], int | None],
    ) -> None:
        """Set :attr:`lines`: the collapsed lines of ``chat`` unlike those last recorded. Only
        the messages after the ``same`` identical ones can differ, unless no lines were
        recorded yet: then every collapsed line of the chat (their digests are those the chat's
        memo holds)."""
        if not inline:
            self.lines, self._unrecorded = None, {}
            return
        recorded = self._lines
        complete = recorded is None
        start = 0 if complete else same
        # lines of a measured context whose record was not written stay due
        due = {} if complete else self._unrecorded
        for k in range(start, len(chat)):
            message = chat[k]
            call_id = message.toolcall_id
            if message.role != "tool" or not call_id or is_active(call_id):
                continue
            mine = self._chat[k].digest
            if recorded is None or recorded.get(call_id) != mine:
                due.pop(call_id, None)
                line = Line(call_id, message.text, size_of(call_id), message.is_error)
                due[call_id] = (line, mine)
        self._unrecorded = due
        if len(due) > MAX_LINES:
            self.lines, self._unrecorded = None, {}
            self._lines = None  # the next record holds them all, if it can
            return
        self.lines = PromptLines(complete, tuple(line for line, _ in due.values()))

    def lines_recorded(self) -> None:
        """The record of the last :meth:`measure` was written with its :attr:`lines`. (A record
        not written leaves the lines it held to the next one.)"""
        if self.lines is None:
            return
        if self.lines.complete or self._lines is None:
            self._lines = {}
        self._lines.update((i, digest) for i, (_, digest) in self._unrecorded.items())
        self._unrecorded = {}

    def next_record(
        self,
        *,
        at: str,
        seq: int,
        facts: RequestFacts,
        managed: int,
        shared: int,
        parts: tuple[int, int, int, int],
        digest: str,
        marks: tuple[Mark, ...] | None = None,
        lines: PromptLines | None = None,
    ) -> RequestRecord:
        """The record that follows :attr:`last` (not yet remembered: :meth:`keep_last` does)."""
        last = self.last
        naive = facts.naive_tokens or 0
        rules = rules_of(facts.api)
        gap = _seconds_between(last.at, at) if last is not None else None
        alive = gap is not None and gap <= rules.ttl
        direct = cache_cost(naive, facts.naive_shared, rules, alive=alive) if naive else 0.0
        return RequestRecord(
            n=(last.n if last else 0) + 1,
            at=at,
            seq=seq,
            facts=facts,
            managed_tokens=managed,
            managed_shared=shared,
            parts=parts,
            digest=digest,
            total_naive=(last.total_naive if last else 0) + naive,
            total_managed=(last.total_managed if last else 0) + managed,
            cost_direct=(last.cost_direct if last else 0.0) + direct,
            cost_managed=(last.cost_managed if last else 0.0)
            + cache_cost(managed, shared, rules, alive=alive),
            marks=marks,
            lines=lines,
        )

    def keep_last(self, record: RequestRecord | None) -> None:
        """The session's latest record is now ``record``."""
        self.last = record


def _identical_prefix(memo: Sequence[_Seen], chat: Sequence[RenderedMessage]) -> int:
    """How many leading messages of ``chat`` are the very objects ``memo`` holds. Renderers
    replace every message after the first that changes, so the identical ones are a prefix."""
    known = len(memo)
    if known and known <= len(chat) and memo[-1].message is chat[known - 1]:
        return known
    low, high = 0, min(known, len(chat))
    while low < high:
        middle = (low + high + 1) // 2
        if memo[middle - 1].message is chat[middle - 1]:
            low = middle
        else:
            high = middle - 1
    return low
