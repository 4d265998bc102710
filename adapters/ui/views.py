"""What each page of the inspector shows, gathered from the context service: plain data, no HTML
(``selfctx.adapters.ui.pages`` renders it)."""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from selfctx.adapters.ui.history import Collapse, Marker, SessionHistory, Sessions
from selfctx.application.ports.search import SearchUnavailable
from selfctx.application.requests import PARTS, Line, RequestRecord
from selfctx.application.service import ContextService
from selfctx.domain.chat import json_from_stored, thaw_json
from selfctx.domain.errors import InvalidInput, SessionNotFound, UnknownObject
from selfctx.domain.inline import handle
from selfctx.domain.objects import FileObject, ToolcallObject
from selfctx.domain.relevance import relevance
from selfctx.domain.rendering import RenderedMessage
from selfctx.domain.session.state import SessionState

__all__ = [
    "ObjectView",
    "PromptItem",
    "RequestView",
    "SearchView",
    "SessionRow",
    "TimelineView",
    "met_view",
    "object_view",
    "request_view",
    "search_view",
    "session_rows",
    "timeline_view",
]

MAX_DIFF_LINES = 20_000
"""Versions with more lines than this are not diffed line by line (the page says so)."""
MAX_SESSIONS_DETAILED = 20
"""An object page details when and where it was active in this many sessions at most."""


# -- the sessions page ------------------------------------------------------------------------


@attrs.frozen
class SessionRow:
    session_id: str
    client: str | None
    api: str | None
    model: str | None
    requests: int
    naive: int
    managed: int
    cost_direct: float
    cost_managed: float
    last: str | None
    home: str | None = None
    """Where the session's pages are, when not under the page's own base (the front of
    ``selfctx proxy --workers N`` lists the sessions of every worker)."""


def session_rows(service: ContextService) -> list[SessionRow]:
    """Every session of the store with its latest request record's figures (one store read
    for the list, one for the records)."""
    ids = service.sessions()
    latest = service.latest_requests(ids)
    rows = []
    for session_id in ids:
        record = latest.get(session_id)
        if record is None:
            rows.append(SessionRow(session_id, None, None, None, 0, 0, 0, 0.0, 0.0, None))
            continue
        f = record.facts
        rows.append(
            SessionRow(
                session_id,
                f.client,
                f.api,
                f.model,
                record.n,
                record.total_naive,
                record.total_managed,
                record.cost_direct,
                record.cost_managed,
                record.at,
            )
        )
    rows.sort(key=lambda r: (r.last or "", r.session_id), reverse=True)
    return rows


# -- a session's timeline -------------------------------------------------------------------------


@attrs.frozen
class TimelineView:
    session_id: str
    records: Sequence[RequestRecord]
    markers: Sequence[Sequence[Marker]]
    log_position: int


def record_json(record: RequestRecord, markers: Sequence[Marker]) -> dict[str, Any]:
    """A request as the timeline's script draws it."""
    f = record.facts
    return {
        "n": record.n,
        "at": record.at,
        "seq": record.seq,
        "round": f.round,
        "naive": f.naive_tokens,
        "naive_shared": f.naive_shared,
        "managed": record.managed_tokens,
        "shared": record.managed_shared,
        "parts": dict(zip(PARTS, record.parts, strict=True)),
        "marks": [{"kind": m.kind, "text": m.text, "seq": m.seq} for m in markers],
    }


def timeline_view(sessions: Sessions, session_id: str) -> TimelineView:
    history = sessions.get(session_id)
    history.prepare()  # the next page is likely one of its requests
    return TimelineView(session_id, history.records, history.markers_by_request(), history.last_seq)


def timeline_json(sessions: Sessions, session_id: str, after: int) -> dict[str, Any]:
    """The requests after request ``after``, for a timeline being watched."""
    history = sessions.get(session_id)
    marks = history.markers_by_request()
    new = [record_json(r, marks[r.n - 1]) for r in history.records[after:]]
    return {"session": session_id, "requests": new, "log_position": history.last_seq}


# -- one request, exactly -------------------------------------------------------------------------


@attrs.frozen
class PromptItem:
    """One piece of the prompt as it was sent."""

    section: str
    """``system``, ``metadata``, ``chat`` or ``active``."""
    text: str
    role: str | None = None
    object_id: str | None = None
    label: str | None = None
    """The object's handle (``#12``) or id, for objects."""
    state: str | None = None
    """``active`` (shown in full) or ``collapsed`` (shown by its one line), for objects."""
    reason: str | None = None
    """Why a collapsed object was collapsed."""
    size: int | None = None
    """Characters of a collapsed object's content."""
    calls: tuple[tuple[str, str, str], ...] = ()
    """An assistant message's tool calls: ``(id, name, arguments as JSON)``."""


@attrs.frozen
class WorkingFile:
    object_id: str
    label: str
    path: str
    weight: float


@attrs.frozen
class RequestView:
    session_id: str
    record: RequestRecord | None
    requests: int
    seq: int
    last_seq: int
    tx_id: int
    at: str
    policy: str
    digest: str
    identical: bool | None
    """The rebuilt context's digest equals the one recorded when the request was sent (None:
    no record to compare with)."""
    items: Sequence[PromptItem]
    working_set: Sequence[WorkingFile]
    active: Sequence[tuple[str, str]]
    pinned: Sequence[tuple[str, str]]
    pool: int
    index: int
    tokens: Mapping[str, int]


_BATCH = "a batch collapse once the prompt passed trigger_tokens"
REASONS = {
    "batch:superseded": f"{_BATCH}: a later output shows its lines again",
    "batch:unused": f"{_BATCH}: it shows nothing of the working set",
    "batch:over-keep": f"{_BATCH}: it shows the working set, beyond keep_tokens",
    "batch:lru": f"{_BATCH}: least recently used first",
    "seen:unused": "the agent answered it and it shows nothing of the working set",
    "seen:superseded": "a later output among the agent's last answers shows its lines again",
    "shed": "shed: the prompt was over 90% of max_input_tokens",
    "budget": "the hard token budget (least recently used, then largest)",
}
"""What each rule of ``ObjectDeactivated.reason`` means."""


def reason_text(collapse: Collapse | None, label: str | None) -> str:
    """Why an object was collapsed, in words."""
    if collapse is None:
        return "never active in this session's recorded log"
    if collapse.by == "window":
        text = "the collapse window: no longer among the recent tool calls of the recent turns"
    elif collapse.by == "agent":
        text = "the agent deactivated it"
    elif collapse.by == "rollback":
        text = "a rollback to a checkpoint at which it was not active"
    elif collapse.reason is not None:
        text = REASONS.get(collapse.reason, collapse.reason)
    else:
        text = "token limits (the rule was not recorded then)"
    if collapse.superseded_by is not None:
        text += f"; superseded by {label or collapse.superseded_by}"
    return f"{text} (log position {collapse.seq})"


def _label(state: SessionState, object_id: str) -> str:
    if state.policy.inline_layout and object_id in state.positions:
        return handle(state, object_id)
    return object_id


_ARGUMENTS = json.JSONEncoder(ensure_ascii=False).encode
"""``json.dumps(..., ensure_ascii=False)`` without building an encoder a call."""


def _stored_arguments(value: Any) -> Any:
    """A call's arguments as its document stores them, in the client's order: an object, or,
    holding one of more than 8 keys, its JSON text (decision 0132); a damaged text as it is."""
    try:
        return json_from_stored(value)
    except InvalidInput:
        return value


def _calls(message: RenderedMessage) -> tuple[tuple[str, str, str], ...]:
    return tuple((c.id, c.name, _ARGUMENTS(thaw_json(c.arguments))) for c in message.tool_calls)


def _size(obj: FileObject | ToolcallObject | None) -> int | None:
    """Characters of an object's content (a tool call may be held without it)."""
    if isinstance(obj, ToolcallObject):
        return obj.content_length
    return len(obj.content or "") if obj is not None else None


def _line_size(lines: Mapping[str, Line], object_id: str) -> int | None:
    line = lines.get(object_id)
    return line.size if line is not None else None


def request_view(
    service: ContextService, sessions: Sessions, session_id: str, *, n: int | None, seq: int | None
) -> RequestView:
    """Request ``n`` of the session as it was sent, or the context at log position ``seq``
    (the latest when both are None)."""
    history = sessions.get(session_id, n=n, seq=seq)
    record = None
    if n is not None:
        record = history.record(n)
        seq = record.seq
        history.settle(n)
    elif seq is None:
        if history.records:
            record = history.record(len(history.records))
            seq = record.seq
        else:
            seq = history.last_seq
    if not 1 <= seq <= history.last_seq:
        raise InvalidInput("log position", seq, f"the session has 1 to {history.last_seq}")
    past = history.past(seq, record.tx_id if record else None, record.n if record else None)
    state, objects, context = past.state, past.objects, past.context
    lines = history.lines_of(record.n) if record is not None else None
    digest = history.digest(past)

    collapse_before = history.collapses_before(seq)

    def why(object_id: str) -> str:
        collapse = collapse_before(object_id)
        later = collapse.superseded_by if collapse else None
        shown = _label(state, later) if later is not None and later in state.positions else None
        return reason_text(collapse, shown)

    items: list[PromptItem] = [PromptItem("system", context.system_prompt)]
    pool = state.ordered(state.pool) if context.metadata else []  # inline layouts: no block
    paired = len(pool) == len(context.metadata)
    for k, line in enumerate(context.metadata):
        object_id = pool[k] if paired else None
        shown = object_id in state.active if object_id else None
        items.append(
            PromptItem(
                "metadata",
                line,
                object_id=object_id,
                label=object_id,
                state=None if object_id is None else "active" if shown else "collapsed",
            )
        )
    for message in context.chat:
        object_id = message.toolcall_id if message.role == "tool" else None
        if object_id is None:
            items.append(PromptItem("chat", message.text, message.role, calls=_calls(message)))
            continue
        obj = objects.get(object_id)
        active = object_id in state.active
        items.append(
            PromptItem(
                "chat",
                message.text,
                "tool",
                object_id=object_id,
                label=_label(state, object_id),
                state="active" if active else "collapsed",
                reason=None if active else why(object_id),
                size=_size(obj) if obj is not None or not lines else _line_size(lines, object_id),
            )
        )
    for block in context.active:
        items.append(
            PromptItem(
                "active",
                block.text,
                object_id=block.object_id,
                label=block.object_id,
                state="active",
            )
        )
    found = relevance(state, objects, service.mounts.display_path, state.policy.recent_messages)
    working = []
    for object_id, weight in sorted(found.working_set.items(), key=lambda kv: -kv[1]):
        obj = objects.get(object_id)
        path = service.mounts.display_path(obj.source) if isinstance(obj, FileObject) else ""
        working.append(WorkingFile(object_id, _label(state, object_id), path, weight))

    def named(ids: Sequence[str]) -> list[tuple[str, str]]:
        out = []
        for object_id in ids:
            obj = objects.get(object_id)
            if isinstance(obj, FileObject):
                name = service.mounts.display_path(obj.source)
            elif isinstance(obj, ToolcallObject):
                name = f"{obj.tool} {obj.status}"
            else:
                name = ""
            out.append((_label(state, object_id), name))
        return out

    tokens = dict(zip(PARTS, record.parts, strict=True)) if record else {}
    return RequestView(
        session_id=session_id,
        record=record,
        requests=len(history.records),
        seq=seq,
        last_seq=history.last_seq,
        tx_id=past.tx_id,
        at=record.at if record else history.time_at(seq),
        policy=state.policy.name,
        digest=digest,
        identical=None if record is None else digest == record.digest,
        items=items,
        working_set=working,
        active=named(state.ordered(state.active)),
        pinned=named(state.ordered(state.pinned)),
        pool=len(state.pool),
        index=len(state.index),
        tokens=tokens,
    )


# -- an object ----------------------------------------------------------------------------


@attrs.frozen
class VersionRow:
    number: int
    tx_id: int
    tx_time: str
    hashes: Mapping[str, str]
    chars: int | None
    status: str | None


@attrs.frozen
class Seen:
    """One session that met the object."""

    session_id: str
    first_seq: int | None
    first_at: str
    first_request: int | None
    active: Sequence[tuple[int, int]]
    """Requests (first, last) during which it was shown in full."""
    detailed: bool


@attrs.frozen
class ObjectView:
    object_id: str
    kind: str
    title: str
    versions: Sequence[VersionRow]
    diff: Sequence[tuple[str, str]] | None
    """``(kind, line)`` of a unified diff between versions ``a`` and ``b``: kind is ``add``,
    ``del``, ``hunk`` or ``same``."""
    diff_note: str | None
    a: int | None
    b: int | None


@attrs.frozen
class MetView:
    """The sessions that met an object (a page of its own: it may need the search index)."""

    object_id: str
    sessions: Sequence[Seen]
    note: str | None


_HASHES = ("object_hash", "content_hash", "metadata_hash", "file_hash", "identity_hash")


def _content(doc: Mapping[str, Any]) -> str | None:
    content = doc.get("content")
    return content if isinstance(content, str) else None


def object_view(
    service: ContextService,
    sessions: Sessions,
    object_id: str,
    a: int | None = None,
    b: int | None = None,
) -> ObjectView:
    versions = service.history(object_id)
    if not versions:
        raise UnknownObject(object_id, "this store")
    rows = []
    for k, version in enumerate(versions, 1):
        doc = version.document
        content = _content(doc)
        rows.append(
            VersionRow(
                k,
                version.tx_id,
                version.tx_time,
                {h: str(doc[h]) for h in _HASHES if isinstance(doc.get(h), str)},
                len(content) if content is not None else None,
                doc.get("content_status") if isinstance(doc.get("content_status"), str) else None,
            )
        )
    latest = versions[-1].document
    kind = str(latest.get("type", ""))
    source = latest.get("source")
    if isinstance(source, Mapping):
        title = str(source.get("path", object_id))
    elif kind == "toolcall":
        title = f"{latest.get('tool')} {_ARGUMENTS(_stored_arguments(latest.get('args')))}"
    else:
        title = object_id
    diff, note = None, None
    if a is not None or b is not None:
        if a is None or b is None or not (1 <= a <= len(rows) and 1 <= b <= len(rows)):
            raise InvalidInput("versions", (a, b), f"choose two of 1 to {len(rows)}")
        diff, note = _diff(versions[a - 1].document, versions[b - 1].document, a, b)
    return ObjectView(object_id, kind, title, rows, diff, note, a, b)


def met_view(service: ContextService, sessions: Sessions, object_id: str) -> MetView:
    """The sessions that met ``object_id``: when first, and in which requests it was shown."""
    latest = service.store.get(object_id)
    if latest is None:
        raise UnknownObject(object_id, "this store")
    kind = str(latest.get("type", ""))
    seen, note = _sessions_of(service, sessions, object_id, kind, latest)
    return MetView(object_id, seen, note)


def _diff(
    old: Mapping[str, Any], new: Mapping[str, Any], a: int, b: int
) -> tuple[list[tuple[str, str]] | None, str | None]:
    before, after = _content(old), _content(new)
    if before is None or after is None:
        return None, "one of the two versions holds no content (a stub, a deletion, binary)"
    lines_a, lines_b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    if max(len(lines_a), len(lines_b)) > MAX_DIFF_LINES:
        return None, f"over {MAX_DIFF_LINES:,} lines: not diffed here"
    out: list[tuple[str, str]] = []
    for line in difflib.unified_diff(lines_a, lines_b, f"version {a}", f"version {b}", n=3):
        if line.startswith(("---", "+++")):
            continue
        kind = {"+": "add", "-": "del", "@": "hunk"}.get(line[:1], "same")
        out.append((kind, line.rstrip("\n")))
    if not out:
        return out, "the two versions have the same content"
    return out, None


def _sessions_of(
    service: ContextService,
    sessions: Sessions,
    object_id: str,
    kind: str,
    latest: Mapping[str, Any],
) -> tuple[list[Seen], str | None]:
    note = None
    if kind == "toolcall":
        chat = str(latest.get("chat_ref") or "")
        ids = [chat[len("chat:") :]] if chat.startswith("chat:") else []
    else:
        try:
            ids = service.sessions_with(object_id)
        except SearchUnavailable as exc:
            return [], f"the sessions that met it are not known here: {exc}"
    try:  # when each session met it and where it was active, without reading their logs
        known = {e.session_id: e for e in service.encounters(object_id) or ()}
    except SearchUnavailable:
        known = {}
    out = []
    for k, session_id in enumerate(ids):
        if k >= MAX_SESSIONS_DETAILED:
            out.append(Seen(session_id, None, "", None, (), False))
            continue
        encounter = known.get(session_id)
        try:
            history: SessionHistory = sessions.get(session_id)
            if encounter is None or encounter.first_seq is None:
                history.log()
        except SessionNotFound:
            continue
        if encounter is not None and encounter.first_seq is not None:
            first: int | None = encounter.first_seq
            spans: Iterable[Sequence[int | None]] = encounter.spans
        else:
            first = history.first_seen.get(object_id)
            spans = history.spans.get(object_id, ())
        out.append(
            Seen(
                session_id,
                first,
                history.time_at(first) if first else "",
                history.request_at(first) if first else None,
                history.requests_between(spans),
                True,
            )
        )
    if len(ids) > MAX_SESSIONS_DETAILED:
        note = f"details for the first {MAX_SESSIONS_DETAILED} of {len(ids)} sessions"
    return out, note


# -- search -------------------------------------------------------------------------------


@attrs.frozen
class Hit:
    kind: str
    title: str
    snippet: str
    object_id: str
    role: str | None
    request: int | None
    version: int
    latest: bool
    turn: int | None


@attrs.frozen
class SearchView:
    session_id: str
    query: str
    hits: Sequence[Hit]
    note: str | None


def search_view(
    service: ContextService, sessions: Sessions, session_id: str, query: str
) -> SearchView:
    history = sessions.get(session_id)
    if not query.strip():
        return SearchView(session_id, query, (), None)
    try:
        found = service.search(query, session_id=session_id, limit=50)
    except SearchUnavailable as exc:
        return SearchView(session_id, query, (), str(exc))
    hits = []
    for hit in found:
        request = None
        if hit.seq is not None:
            request = history.request_at(hit.seq)
        elif hit.kind == "toolcall":  # written once: the first request after its transaction
            request = history.request_after_tx(hit.tx_id)
        hits.append(
            Hit(
                hit.kind,
                hit.title,
                hit.snippet,
                hit.object_id,
                hit.role,
                request,
                hit.version,
                hit.latest,
                hit.turn,
            )
        )
    return SearchView(session_id, query, hits, None)
