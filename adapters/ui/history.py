"""What the inspector reads of a session, kept between page loads: its log and its request
records. Both only grow (a log entry and a record version are never rewritten), so each is read
once and then only from where it ended."""

from __future__ import annotations

import bisect
import contextlib
import logging
import threading
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from typing import Any

import attrs

from selfctx.application.persistence import (
    decode_events,
    entry_events,
    log_entry_tx,
    read_log_entries,
)
from selfctx.application.requests import (
    MARKED,
    Line,
    Mark,
    RequestRecord,
    RequestRecords,
    context_digest,
    context_digests,
    record_from_document,
    requests_id,
)
from selfctx.application.service import ContextService
from selfctx.application.usecases.sessions import PastContext, validate_session_id
from selfctx.domain.chat import ToolResult
from selfctx.domain.documents import from_document
from selfctx.domain.errors import InvalidInput, SessionNotFound
from selfctx.domain.inline import MAX_LISTED_FILES, render_inline
from selfctx.domain.objects import FileObject, SystemPromptObject, ToolcallObject
from selfctx.domain.relevance import working_set_calls
from selfctx.domain.rendering import RenderedMessage, render_context
from selfctx.domain.session.machine import fold_many
from selfctx.domain.session.state import SessionState

__all__ = ["Collapse", "Marker", "SessionHistory", "Sessions"]

log = logging.getLogger("selfctx.ui")

STATE_EVERY = 128
"""A state this many log entries after one kept is folded from it; further, it is rebuilt."""
STATES_KEPT = 64
TAIL_PAGE = 32
"""Log entries asked for at once when catching up with a session's log."""
CONTEXTS_KEPT = 8
"""Contexts rebuilt lately, kept for a page loaded again."""

INLINE = ("inline", "relevance")
"""Policies whose prompts name objects by handle (``PolicyConfig.inline_layout``)."""


@attrs.frozen
class Marker:
    """Something that happened to the session at log position ``seq``."""

    seq: int
    kind: str
    """``collapse``, ``activation``, ``compaction``, ``checkpoint`` or ``rollback``."""
    text: str


@attrs.frozen
class Collapse:
    """An output (or file) leaving the active set: when, by whom and why."""

    seq: int
    by: str
    reason: str | None = None
    superseded_by: str | None = None


def _marker(
    seq: int, command: str, event: Mapping[str, Any], label: Callable[[str], str]
) -> Marker | None:
    name = event.get("event")
    kind = MARKED.get(str(name))
    if kind is None:
        return None
    object_id = str(event.get("object_id", ""))
    if name == "ObjectActivated":
        if command != "Activate":
            return None  # a new output, a file read: the prompt shows it, no need for a mark
        return Marker(seq, kind, f"activated {label(object_id)}")
    if name == "ObjectDeactivated":
        why = event.get("reason") or event.get("by")
        return Marker(seq, kind, f"collapsed {label(object_id)} ({why})")
    if name == "ChatCompacted":
        return Marker(
            seq, kind, f"compacted turns before {event.get('upto')} ({event.get('case')})"
        )
    if name == "CheckpointCreated":
        return Marker(seq, kind, f"checkpoint {event.get('label')}")
    return Marker(seq, kind, f"rolled back to {event.get('label')}")


class SessionHistory:
    """One session's log as the inspector needs it: marks, collapses, active spans, first
    encounters and times by log position (thread-safe)."""

    def __init__(self, service: ContextService, session_id: str) -> None:
        self.service = service
        self.session_id = session_id
        self._lock = threading.Lock()
        self.last_seq = 0
        self.seqs: list[int] = []
        self.times: list[str] = []
        self.markers: list[Marker] = []
        self.collapses: dict[str, list[Collapse]] = {}
        self.spans: dict[str, list[list[int | None]]] = {}
        """Object → ``[start, end]`` log positions of each span it was active (end None: still)."""
        self.first_seen: dict[str, int] = {}
        self.positions: dict[str, int] = {}
        """Object → its place in the session index (1 for the first object met)."""
        self.inline = False
        """The session's layout names objects by handles (``#12``)."""
        self.records: RequestRecords = RequestRecords()
        self._checked = False
        self._log_read = False
        """The whole log was read (and is followed since)."""
        self._record_collapses: dict[str, list[Collapse]] | None = None
        self._collapses_of = 0
        self._summary: tuple[int, RequestRecords | None, bool] = (0, None, False)
        self._states: dict[int, SessionState] = {}
        """States rebuilt lately, by log position (``_kept``: their positions, sorted)."""
        self._kept: list[int] = []
        self._txs: dict[int, int] = {}
        """The transaction of each log position a state was rebuilt at."""
        self._ahead: dict[int, threading.Thread] = {}
        self._finding: dict[int, threading.Thread] = {}
        """Requests whose log position is being found (:meth:`ahead_request`), by number."""
        """States being rebuilt on threads of their own (:meth:`ahead`), by log position."""
        self._objects: dict[str, FileObject | ToolcallObject] = {}
        self._contexts: dict[tuple[int, int], PastContext] = {}
        self._digests: dict[tuple[int, int], str] = {}
        self._partial: set[tuple[int, int]] = set()
        """Contexts kept whose objects are only the tool calls a request's page shows by more
        than their line (``few``): a log position's page does not take them."""
        self._preparing: threading.Thread | None = None
        self._refreshing = threading.Lock()
        self._loading = threading.Lock()
        """Held while objects are read, so that two pages do not read the same ones."""
        self._calls_of: object = None
        """The index (of a state) whose every tool call has been read."""
        self._lines_kept: tuple[RequestRecords, int, dict[str, Line] | None] | None = None
        """The records, the request and the lines :meth:`lines_of` gave last."""
        self._named_for: tuple[object, bool, object] | None = None
        """The state, ``lean`` and ``lined`` whose named files have been read: the files a
        state names depend on it and on its tool calls alone (never rewritten), so a later
        look at the same state (the page's, after the thread reading ahead) skips the walk."""

    def refresh(self, *, n: int | None = None, seq: int | None = None) -> SessionHistory:
        """Read what the records gained since the last call (their latest version; their
        history only when more than one is new), and the log's new entries if the log was
        read (by their ids, ``log:{session}:{seq}``: a lookup, whatever the log's length).
        While every record holds its marks (``RequestRecord.marks``) the timeline and the
        requests' pages need no log: it is read when a page asks for what only it says.

        A page that knows the log position it shows (``seq``) or the request (``n``) has its
        state rebuilt meanwhile (:meth:`ahead`, :meth:`ahead_request`): on XTDB the node reads
        the records and the state's documents at once."""
        store = self.service.store
        if seq is not None and store.reads_wait:
            self.ahead(seq)
        # Refreshes take turns; the records are read without the lock, which the threads
        # rebuilding a state ahead take meanwhile.
        with self._refreshing:
            if not self._checked:
                validate_session_id(self.session_id)
            known = len(self.records)
            if known == 0:  # nothing read yet: every record at once
                if n is not None and store.reads_wait:
                    self.ahead_request(n)
                records, latest = self.service.request_records(self.session_id), None
            else:
                doc = store.get(requests_id(self.session_id))
                latest = record_from_document(doc) if doc is not None else None
                records = self.records
                if latest is not None and latest.n not in (known, known + 1):
                    records, latest = self.service.request_records(self.session_id), None
            with self._lock:
                if latest is not None and latest.n == known + 1:
                    self.records.append(latest)  # its transaction is read when it is needed
                else:
                    self.records = records
                self._catch_up()
                self._checked = True
        return self

    def _catch_up(self) -> None:
        """Follow the log to its end, as far as it is read (the caller holds the lock)."""
        if self._log_read:
            for entry in self._tail(self.last_seq):
                self._take(entry)
        elif not self._summarised():
            self._read_log()
        else:  # the log's end: what follows the latest record's position, by id
            start = max(self.last_seq, self.records[-1].seq)
            tail = self._tail(start)
            self.last_seq = int(tail[-1]["seq"]) if tail else start

    def _summarised(self) -> bool:
        """Every record holds its marks (and there is one): the log need not be read."""
        records = self.records
        if self._summary[0] != len(records) or self._summary[1] is not records:
            whole = records.marked()
            self._summary = (len(records), records, whole)
        return self._summary[2]

    def _read_log(self) -> None:
        """Read the whole log (the caller holds the lock)."""
        if self._log_read:
            return
        entries = self.service.store.session_log(self.session_id)
        if not entries and self.session_id not in self.service.sessions():
            raise SessionNotFound(self.session_id)
        self.last_seq = 0
        for entry in entries:
            self._take(entry)
        self._log_read = True

    def log(self) -> SessionHistory:
        """This history with the session's whole log read (for the pages that need it: first
        encounters, active spans, times, positions without a record)."""
        with self._lock:
            self._read_log()
        return self

    def _entry(self, seq: int) -> Mapping[str, Any] | None:
        return read_log_entries(self.service.store, self.session_id, seq, seq).get(seq)

    def _tail(self, seq: int, until: int | None = None) -> list[Mapping[str, Any]]:
        """The log entries after ``seq`` (up to ``until``), read by id, a page at a time."""
        out: list[Mapping[str, Any]] = []
        while True:
            last = seq + TAIL_PAGE if until is None else min(seq + TAIL_PAGE, until)
            wanted = range(seq + 1, last + 1)
            found = read_log_entries(self.service.store, self.session_id, seq + 1, last)
            page = [found[k] for k in wanted if k in found]
            out += page
            if len(page) < len(wanted) or last == until or not wanted:
                return out
            seq = last

    def _take(self, entry: Mapping[str, Any]) -> None:
        seq = int(entry["seq"])
        if seq <= self.last_seq:
            return
        self.last_seq = seq
        self.seqs.append(seq)
        self.times.append(str(entry.get("at") or ""))
        command = str(entry.get("command", ""))
        for event in entry_events(entry):
            name = event.get("event")
            object_id = str(event.get("object_id", ""))
            if name == "SessionStarted":
                policy = event.get("policy")
                self.inline = isinstance(policy, Mapping) and policy.get("name") in INLINE
            elif name == "ObjectEncountered":
                self.first_seen.setdefault(object_id, seq)
                self.positions.setdefault(object_id, len(self.positions) + 1)
            marker = _marker(seq, command, event, self.label)
            if marker is not None:
                self.markers.append(marker)
            if name == "ObjectActivated":
                spans = self.spans.setdefault(object_id, [])
                if not spans or spans[-1][1] is not None:
                    spans.append([seq, None])
            elif name == "ObjectDeactivated":
                open_spans = self.spans.get(object_id)
                if open_spans and open_spans[-1][1] is None:
                    open_spans[-1][1] = seq
                self.collapses.setdefault(object_id, []).append(
                    Collapse(
                        seq, str(event.get("by")), event.get("reason"), event.get("superseded_by")
                    )
                )

    # -- the context at any point --------------------------------------------------------

    def state_at(self, seq: int, *, few: bool = False) -> SessionState:
        """The session's state right after log position ``seq``: folded from the nearest state
        kept, when it is at most ``STATE_EVERY`` entries before (the entries read by id);
        otherwise rebuilt from the store's snapshot (``ContextService.state_at``) and kept
        (``few``: for a request's page, which reads only the tool calls it shows by more than
        their lines: see :meth:`_rebuilt`)."""
        with self._lock:
            if not 1 <= seq <= self.last_seq:
                raise InvalidInput("log position", seq, f"the session has 1 to {self.last_seq}")
            rebuilding = self._ahead.get(seq)
        if rebuilding is not None:
            rebuilding.join()
        with self._lock:
            k = bisect.bisect_right(self._kept, seq) - 1
            start = self._kept[k] if k >= 0 else None
            near = start is not None and seq - start <= STATE_EVERY
            if near:
                assert start is not None
                state = self._states[start]
        entries: list[Mapping[str, Any]] = []
        if near:
            assert start is not None
            entries = self._tail(start, seq)
            if len(entries) != seq - start:
                raise InvalidInput("log position", seq, "the session's log has a gap there")
        else:
            state = self._open_state(seq) or self._rebuilt(seq, few=few)
        state = fold_many(
            [ev for entry in entries for ev in decode_events(entry_events(entry))], state
        )
        self._keep(seq, state)
        return state

    def _keep(self, seq: int, state: SessionState) -> None:
        with self._lock:
            if seq not in self._states:
                bisect.insort(self._kept, seq)
                self._states[seq] = state
                while len(self._kept) > STATES_KEPT:
                    del self._states[self._kept.pop(0)]

    def ahead_request(self, n: int, *, locked: bool = False) -> None:
        """If request ``n`` is the latest, rebuild the state at its log position on a thread
        of its own (:meth:`ahead`): the latest record is one read, the records' history all
        of them. (Finding another request's position without that history costs the store
        about half as much again: measured, the page gained nothing.) :meth:`settle` waits
        for the look."""

        def find() -> None:
            try:
                doc = self.service.store.get(requests_id(self.session_id))
                record = record_from_document(doc) if doc is not None else None
                if record is not None and record.n == n:
                    self.ahead(record.seq, few=True)
            except Exception:  # the page reads the records, and says what is wrong
                log.debug("session %s: finding request %d ahead failed", self.session_id, n)

        with self._lock if not locked else _NO_LOCK:
            if n < 1 or n in self._finding:
                return
            thread = threading.Thread(target=find, daemon=True)
            self._finding[n] = thread
        thread.start()

    def settle(self, n: int) -> None:
        """Wait until request ``n``'s position is found, if :meth:`ahead_request` looks."""
        with self._lock:
            finding = self._finding.pop(n, None)
        if finding is not None:
            finding.join()

    def ahead(self, seq: int, *, locked: bool = False, few: bool = False) -> None:
        """Start rebuilding the state at log position ``seq`` on a thread of its own, and
        reading its objects, unless it is held or being rebuilt (``locked``: the caller holds
        the lock; ``few``: for a request's page, see :meth:`_load_objects`). :meth:`state_at`
        waits for it; a position the session does not have fails there, not here."""

        def rebuild() -> None:
            try:
                if self._entry(seq) is None:
                    return  # no such position: the page says so, having read nothing more
                state = self._open_state(seq) or self._rebuilt(seq, few=few)
                self._keep(seq, state)
                self._load_objects(state, lean=True, few=few)
            except Exception:  # the page rebuilds it itself, and says what is wrong
                log.debug("session %s: rebuilding %d ahead failed", self.session_id, seq)
            finally:
                with self._lock:
                    self._ahead.pop(seq, None)

        with self._lock if not locked else _NO_LOCK:
            if seq < 1 or seq in self._states or seq in self._ahead:
                return
            thread = threading.Thread(target=rebuild, daemon=True)
            self._ahead[seq] = thread
        thread.start()

    def _rebuilt(self, seq: int, *, few: bool = False) -> SessionState:
        """The state at ``seq`` rebuilt from the store (``ContextService.state_at``); the
        objects of the snapshot it starts from are read on a thread of their own meanwhile
        (on XTDB the node reads them while this process reads and applies the log entries):
        its tool calls as soon as the snapshot's documents are read (while this process builds
        its state), then the files the state shows. ``few``: for a request's page, which reads
        only the tool calls it shows by more than their recorded lines (:meth:`_load_objects`):
        none is read before the snapshot's state is built, which says which they are."""
        early: list[threading.Thread] = []

        def read_calls(ids: Sequence[str]) -> None:
            def read() -> None:
                try:
                    self._read_calls(ids)
                except Exception:  # the page reads what it needs itself, and says why
                    log.warning("session %s: reading ahead failed", self.session_id, exc_info=True)

            thread = threading.Thread(target=read, daemon=True)
            thread.start()  # before it is listed: ``read_ahead`` may join it at once
            early.append(thread)

        def read_ahead(snapshot: SessionState) -> None:
            def read() -> None:
                try:
                    for thread in early:  # its tool calls first: none is read twice
                        thread.join()
                    self._load_objects(snapshot, lean=True, few=few)
                except Exception:  # the page reads what it needs itself, and says why
                    log.warning("session %s: reading ahead failed", self.session_id, exc_info=True)

            threading.Thread(target=read, daemon=True).start()

        wait = self.service.store.reads_wait
        past = self.service.state_at(
            self.session_id,
            seq,
            on_snapshot=read_ahead if wait else None,
            on_toolcalls=read_calls if wait and not few else None,
        )
        for thread in early:  # what the caller reads next: none read twice
            thread.join()
        with self._lock:
            self._txs[seq] = past.tx_id
        return past.state

    def prepare(self) -> None:
        """Read, on a thread of its own, what a page of the session's latest request needs
        (its state and its objects), once; a page asking for it meanwhile waits for the same
        reads rather than making them twice."""
        with self._lock:
            if self._preparing is not None or self._objects or not self.records:
                return
            seq = self.records[-1].seq

            lean = self.lines_of(len(self.records)) is not None

            def read() -> None:
                try:
                    self._load_objects(self.state_at(seq, few=lean), lean=lean, few=lean)
                except Exception:  # a page that needs them reads them itself, and says why
                    log.warning("session %s: reading ahead failed", self.session_id, exc_info=True)

            self._preparing = threading.Thread(target=read, daemon=True)
            self._preparing.start()

    def _load_objects(
        self,
        state: SessionState,
        *,
        lean: bool = False,
        lined: Container[str] | None = None,
        few: bool = False,
    ) -> None:
        """Read the objects of ``state``'s index a page of it needs and this history does not
        hold yet: every tool call (whole: on XTDB a pull of named fields costs more than the
        whole document), and under the inline layouts only the files a prompt names
        (:func:`_files_named`), every file under ``ssot`` (its metadata block lists them all).
        ``lean``: the collapsed outputs come from a request's recorded lines, so not the files
        only a collapsed line names; ``lined``: only those of the tool calls in it do.
        ``few``: a request's page whose every collapsed output is its recorded line: under the
        inline layouts not every tool call is read either, only those the page shows by more
        than their line (:func:`_calls_shown`: the active and pinned ones, those the working
        set looks at and, ``lined`` given, the collapsed ones without a recorded line and
        size). A prompt rendered from them is checked by the request's digest, and rendered
        again from every object when it differs (decision 0115)."""
        kinds = state.kinds
        few = few and state.policy.inline_layout
        with self._loading:
            self._take_held()
            with self._lock:
                # every indexed object has a kind; ``kinds[i]``, not Mapping's slower ``get``
                if self._calls_of is state.index:
                    calls = []
                elif few:
                    calls = [i for i in _calls_shown(state, lined) if i not in self._objects]
                else:
                    calls = [
                        i for i in state.index if kinds[i] == "toolcall" and i not in self._objects
                    ]
            self._read(calls)
            if not few:
                with self._lock:  # the next look at the same state (a page's) skips the walk
                    self._calls_of = state.index
            done = (state, lean, None if lean else lined)  # ``lean``: no line is listed
            with self._lock:
                found = self._named_for
                if found is not None and all(a is b for a, b in zip(found, done, strict=True)):
                    return
                if state.policy.inline_layout:
                    given = lined if lined is not None else ()
                    named = _files_named(
                        state, self._objects, listed=lambda i: not lean and i not in given
                    )
                else:
                    named = [i for i in state.index if kinds[i] != "toolcall"]
                files = [i for i in named if i not in self._objects]
            self._read(files)
            with self._lock:
                self._named_for = done

    def _take_held(self) -> None:
        """Before the first read: take the objects of a session this process holds open (no
        need to read them; the caller holds ``_loading``)."""
        with self._lock:
            empty = not self._objects
        if empty:
            try:
                held = self.service.open_objects(self.session_id)
            except SessionNotFound:
                held = {}
            with self._lock:
                for object_id, obj in held.items():
                    if isinstance(obj, FileObject | ToolcallObject):
                        self._objects[object_id] = obj

    def _read_calls(self, ids: Sequence[str]) -> None:
        """Read the tool calls among ``ids`` that this history does not hold yet (what a
        snapshot's chat names, before its state is built: anything else is skipped)."""
        with self._loading:
            self._take_held()
            with self._lock:
                wanted = [i for i in dict.fromkeys(ids) if i not in self._objects]
            found = self.service.store.get_many(wanted) if wanted else {}
            fresh = {i: _content_object(d) for i, d in found.items() if d.get("type") == "toolcall"}
            with self._lock:
                self._objects.update(fresh)

    def _read(self, ids: list[str]) -> None:
        """Read ``ids`` into this history (the caller holds ``_loading``)."""
        found = self.service.store.get_many(ids) if ids else {}
        fresh = {i: _content_object(d) for i, d in found.items()}
        with self._lock:
            self._objects.update(fresh)

    def _open_state(self, seq: int) -> SessionState | None:
        """The state of the session as this process holds it open, if that is the state at
        ``seq`` (the proxy serving the inspector: its latest request costs no rebuilding)."""
        try:
            if self.service.log_position(self.session_id) == seq:
                state = self.service.state(self.session_id)
                return state if self.service.log_position(self.session_id) == seq else None
        except SessionNotFound:
            pass
        return None

    def lines_of(self, n: int) -> dict[str, Line] | None:
        """The collapsed lines request ``n`` sent, by tool call id, from the records' lines
        (:class:`PromptLines`): the latest complete set up to ``n`` updated by each record
        after it. None when a record on the way kept none (written before records held lines,
        or under the ``ssot`` layout). The last answer is kept (a request's page asks twice;
        a record is never rewritten, so it holds while the records are the same) and a copy
        handed out."""
        records = self.records
        kept = self._lines_kept  # one attribute, read and set whole: no lock (callers hold it)
        if kept is not None and kept[0] is records and kept[1] == n:
            return dict(kept[2]) if kept[2] is not None else None
        found = self._lines_chain(records, n)
        self._lines_kept = (records, n, found)
        return dict(found) if found is not None else None

    @staticmethod
    def _lines_chain(records: RequestRecords, n: int) -> dict[str, Line] | None:
        out: dict[str, Line] = {}
        for k in range(n - 1, -1, -1):
            lines = records.lines(k)
            if lines is None:
                return None
            for line in lines.shown:
                out.setdefault(line.call_id, line)
            if lines.complete:
                return out
        return None

    def lines_at(self, seq: int) -> tuple[dict[str, Line] | None, RequestRecord | None]:
        """The collapsed lines of the context at log position ``seq`` that the records say, and
        the request whose digest the context must have (None: nothing to check it against).
        At a request's position, that request's lines (:meth:`lines_of`). Between request
        ``r`` and the next one, ``r``'s lines but those of the outputs the next one sent anew
        (their line changed meanwhile) or that its marks collapsed or activated up to ``seq``:
        those are rendered again. None at a compaction or a rollback on the way, after the
        last request (what changed since is recorded by no request), or without lines."""
        i = bisect.bisect_right(self.records.seqs(), seq)
        if i == 0:
            return None, None
        before = self.records[i - 1]
        lines = self.lines_of(before.n)
        if lines is None or before.seq == seq:
            return lines, before
        if i == len(self.records):
            return None, None
        after = self.records[i]
        if after.lines is None or after.marks is None:
            return None, None
        for mark in after.marks:
            if mark.seq > seq:
                continue
            if mark.event in ("ChatCompacted", "RolledBack"):
                return None, None
            lines.pop(mark.fields.get("object_id", ""), None)
        for line in after.lines.shown:
            lines.pop(line.call_id, None)
        return lines, None

    def past(self, seq: int, tx_id: int | None, n: int | None = None) -> PastContext:
        """What ``ContextService.past_context`` gives, from this history's log and objects: the
        state at ``seq``, the objects as of ``tx_id`` (the transaction of ``seq`` if None), the
        context rendered from them. Objects are read from the store once: a tool call is never
        rewritten, and the inline layouts show files only through tool calls (by their paths,
        which never change); the ``ssot`` layout's files are read as of ``tx_id`` every time.

        For request ``n`` whose record chain holds its collapsed lines (:meth:`lines_of`), those
        lines are shown as recorded and the files only they name are not read; the result
        stands if its digest is the one recorded, else the prompt is rebuilt whole. A log
        position that is no request's takes the lines :meth:`lines_at` gives."""
        store = self.service.store
        if tx_id is None:
            self.state_at(seq, few=n is not None)  # its transaction is known once rebuilt
            with self._lock:
                tx_id = self._txs.get(seq)
            if tx_id is None:
                tx_id = log_entry_tx(store, self.session_id, seq)
                if tx_id is None:
                    raise InvalidInput("log position", seq, "not in the session's log")
        key = (seq, tx_id)
        with self._lock:
            found = self._contexts.get(key)
            if n is None and key in self._partial:
                found = None
        if found is not None:
            return found
        state = self.state_at(seq, few=n is not None)
        lines, exact = None, None
        if n is not None and state.policy.inline_layout:
            lines, exact = self.lines_of(n), self.records[n - 1]
        elif state.policy.inline_layout:
            lines, exact = self.lines_at(seq)
        shown, sized = None, None
        if lines is not None:
            shown = {
                i: RenderedMessage("tool", x.text, toolcall_id=i, is_error=x.is_error)
                for i, x in lines.items()
            }
            sized = {i for i, x in lines.items() if x.size is not None}
        past = self._render(state, seq, tx_id, shown, lean=n is not None, sized=sized)
        if n is not None and past.context.active and exact is not None:
            # Having read only the tool calls it shows (``few``), the page shows as blocks
            # every active file none of those read or named, a superset of the prompt's; most
            # often the prompt has none (each active file came through a tool call): the
            # recorded digest says which (decision 0115).
            digest, bare = context_digests(past.context, (past.context.active, ()))
            if digest != exact.digest and bare == exact.digest:
                past = attrs.evolve(past, context=attrs.evolve(past.context, active=()))
                digest = bare
        else:
            digest = context_digest(past.context)
        partial = n is not None and lines is not None
        if exact is not None and lines is not None and digest != exact.digest:
            past = self._render(state, seq, tx_id, None)
            digest = context_digest(past.context)
            partial = False
        with self._lock:
            self._contexts.pop(key, None)  # a context read whole replaces a partial one
            self._contexts[key] = past
            self._digests[key] = digest
            if partial:
                self._partial.add(key)
            else:
                self._partial.discard(key)
            while len(self._contexts) > CONTEXTS_KEPT:
                oldest = next(iter(self._contexts))
                del self._digests[oldest], self._contexts[oldest]
                self._partial.discard(oldest)
        return past

    def digest(self, past: PastContext) -> str:
        """:func:`context_digest` of a context :meth:`past` gave (computed once)."""
        with self._lock:
            found = self._digests.get((past.seq, past.tx_id))
        return found if found is not None else context_digest(past.context)

    def _render(
        self,
        state: SessionState,
        seq: int,
        tx_id: int,
        lines: Mapping[str, RenderedMessage] | None,
        *,
        lean: bool = True,
        sized: Container[str] | None = None,
    ) -> PastContext:
        """The context of ``state`` with the objects as of ``tx_id`` (see :meth:`past`);
        ``lean``: ``lines`` holds every collapsed output's line (else only some may be given:
        the others are rendered, from the files they name); ``sized``: those of ``lines`` whose
        output's size was recorded too (the page shows it; the others' tool calls are read)."""
        store = self.service.store
        prompt_read = _Background(
            store.get_as_of, state.system_prompt_id, tx_id, apart=store.reads_wait
        )
        if lines is None:
            self._load_objects(state)
        else:
            given = sized if lean and sized is not None else lines
            self._load_objects(state, lean=lean, lined=given, few=lean)
        with self._lock:
            objects = {i: self._objects[i] for i in state.index if i in self._objects}
        if not state.policy.inline_layout:
            files = [i for i in state.pool if isinstance(objects.get(i), FileObject)]
            for object_id, doc in store.get_many_as_of(files, tx_id).items():
                objects[object_id] = _content_object(doc)
        prompt_doc = prompt_read.result()
        prompt = from_document(prompt_doc) if prompt_doc is not None else None
        text = prompt.content if isinstance(prompt, SystemPromptObject) else ""
        display = self.service.mounts.display_path
        if state.policy.inline_layout:
            context = render_inline(state, objects, text, display, lines=lines)
        else:
            context = render_context(state, objects, text, display)
        return PastContext(state, seq, tx_id, objects, context)

    # -- questions ------------------------------------------------------------------------

    def label(self, object_id: str) -> str:
        """How the session's prompt names an object: its handle under the inline layouts."""
        position = self.positions.get(object_id)
        return f"#{position}" if self.inline and position is not None else object_id

    def time_at(self, seq: int) -> str:
        """When the command at log position ``seq`` was recorded ('' if unknown)."""
        if not self._log_read:
            entry = self._entry(seq)
            return str(entry.get("at") or "") if entry is not None else ""
        i = bisect.bisect_right(self.seqs, seq) - 1
        return self.times[i] if i >= 0 else ""

    def _collapses(self, seq: int) -> dict[str, list[Collapse]]:
        """Every collapse up to ``seq`` by object: from the records' marks when they cover
        ``seq``, from the log otherwise."""
        with self._lock:
            if self._log_read or not self._summarised() or seq > self.records[-1].seq:
                self._read_log()
                return self.collapses
            if self._record_collapses is None or len(self.records) != self._collapses_of:
                found: dict[str, list[Collapse]] = {}
                records = self.records
                for i in range(len(records)):  # the marks only: no record decoded whole
                    for mark in records.marks(i) or ():
                        if mark.event == "ObjectDeactivated" and "object_id" in mark.fields:
                            f = mark.fields
                            why = (f.get("by", ""), f.get("reason"), f.get("superseded_by"))
                            found.setdefault(f["object_id"], []).append(Collapse(mark.seq, *why))
                self._record_collapses, self._collapses_of = found, len(self.records)
            return self._record_collapses

    def collapse_before(self, object_id: str, seq: int) -> Collapse | None:
        """The latest collapse of ``object_id`` at or before ``seq``."""
        return self.collapses_before(seq)(object_id)

    def collapses_before(self, seq: int) -> Callable[[str], Collapse | None]:
        """:meth:`collapse_before` at ``seq`` for any object: the collapses are gathered once
        (a request's page asks for each of its ~3,000 collapsed outputs), on the first ask (a
        page without a collapsed output reads none)."""
        gathered: list[dict[str, list[Collapse]]] = []

        def before(object_id: str) -> Collapse | None:
            if not gathered:
                gathered.append(self._collapses(seq))
            found = None
            for collapse in gathered[0].get(object_id, ()):
                if collapse.seq > seq:
                    break
                found = collapse
            return found

        return before

    def record(self, n: int) -> RequestRecord:
        """Request ``n``, with the transaction that recorded it."""
        if not 1 <= n <= len(self.records):
            have = f"requests 1 to {len(self.records)}" if self.records else "no recorded requests"
            raise InvalidInput("request", n, f"session {self.session_id!r} has {have}")
        if self.records[n - 1].tx_id is None:
            with self._lock:
                self.records = self.service.request_records(self.session_id)
        return self.records[n - 1]

    def request_at(self, seq: int) -> int | None:
        """The first request whose context included log position ``seq`` (None: none yet)."""
        i = bisect.bisect_left(self.records.seqs(), seq)
        return self.records[i].n if i < len(self.records) else None

    def request_after_tx(self, tx_id: int) -> int | None:
        """The first request recorded after transaction ``tx_id`` (None: none yet): the first
        that could show what that transaction wrote."""
        if self.records and self.records[-1].tx_id is None:
            self.record(len(self.records))  # reads the records' transactions
        txs = [r.tx_id or 0 for r in self.records]
        i = bisect.bisect_right(txs, tx_id)
        return self.records[i].n if i < len(self.records) else None

    def requests_between(self, spans: Iterable[Sequence[int | None]]) -> list[tuple[int, int]]:
        """The requests (first, last) sent while an object was active in ``spans``."""
        seqs = self.records.seqs()
        out = []
        for start, end in spans:
            assert start is not None
            first = bisect.bisect_left(seqs, start)
            last = len(seqs) if end is None else bisect.bisect_left(seqs, end)
            if first < last:
                out.append((self.records[first].n, self.records[last - 1].n))
        return out

    def markers_by_request(self) -> list[list[Marker]]:
        """For each request, the marks of what happened since the request before it: the
        marks its record holds, or (records without them) the log's."""
        with self._lock:
            if not self._log_read and self._summarised():
                return [[_record_marker(m) for m in r.marks or ()] for r in self.records]
            self._read_log()
        out: list[list[Marker]] = [[] for _ in self.records]
        seqs = self.records.seqs()
        for marker in self.markers:
            i = bisect.bisect_left(seqs, marker.seq)
            if i < len(out):
                out[i].append(marker)
        return out


def _record_marker(mark: Mark) -> Marker:
    """A record's mark as the timeline shows it (records keep marked events only)."""
    event = {"event": mark.event, **mark.fields}
    found = _marker(mark.seq, "Activate", event, lambda i: mark.fields.get("name") or i)
    return found if found is not None else Marker(mark.seq, mark.event, mark.event)


def _files_named(
    state: SessionState,
    objects: Mapping[str, FileObject | ToolcallObject],
    *,
    listed: Callable[[str], bool] = lambda _: True,
) -> list[str]:
    """The files an inline prompt of ``state`` names or shows: the active and pinned ones, those
    the tool calls' views show (the working set is found among them), and the first
    ``MAX_LISTED_FILES`` of the session's files each tool call that ``listed`` says names (a
    collapsed output lists them by path)."""
    kinds = state.kinds

    def is_file(object_id: str) -> bool:  # ``kinds.get`` is Mapping's: 3x the lookup below
        return object_id in kinds and kinds[object_id] == "file"

    out = dict.fromkeys(i for i in (*state.active, *state.pinned) if is_file(i))
    for object_id in state.index:
        call = objects.get(object_id)
        if not isinstance(call, ToolcallObject):
            continue
        out.update(dict.fromkeys(v.file for v in call.file_views or () if is_file(v.file)))
        if listed(object_id):
            refs = [r for r in call.file_refs or () if is_file(r)]
            out.update(dict.fromkeys(refs[:MAX_LISTED_FILES]))
    return list(out)


def _calls_shown(state: SessionState, lined: Container[str] | None) -> list[str]:
    """The tool calls a request's page of ``state`` shows by more than the collapsed line its
    record kept: the active ones (in full), the pinned ones (named), those the working set
    looks at (:func:`working_set_calls`) and, when the recorded lines are known (``lined``:
    the calls whose line and size were recorded), the collapsed outputs of the chat without
    one (rendered again)."""
    kinds = state.kinds
    out = dict.fromkeys(working_set_calls(state, state.policy.recent_messages))
    out.update(dict.fromkeys(i for i in state.ordered(state.pinned) if kinds.get(i) == "toolcall"))
    if lined is not None:
        active = state.active
        for turn in state.turns[state.compacted :]:
            for message in turn.messages:
                if isinstance(message, ToolResult):
                    call_id = message.toolcall_id
                    if call_id not in lined and call_id not in active:
                        out[call_id] = None
    return list(out)


_NO_LOCK = contextlib.nullcontext()


class _Background:
    """One call made on a thread of its own (a store read beside others; ``apart`` False: made
    at once, here); :meth:`result` waits for it and returns what it returned or raises what it
    raised."""

    def __init__(self, call: Callable[..., Any], *args: Any, apart: bool = True) -> None:
        self._call, self._args = call, args
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        if apart:
            self._thread.start()
        else:
            self._run()

    def _run(self) -> None:
        try:
            self._value = self._call(*self._args)
        except BaseException as exc:  # handed to the caller of result()
            self._error = exc

    def result(self) -> Any:
        if self._thread.is_alive() or self._thread.ident is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


def _content_object(doc: Mapping[str, Any]) -> FileObject | ToolcallObject:
    obj = from_document(doc)
    assert isinstance(obj, FileObject | ToolcallObject)
    return obj


class Sessions:
    """The histories of the sessions looked at so far (at most ``limit``, the least recently
    used dropped)."""

    def __init__(self, service: ContextService, limit: int = 64) -> None:
        self.service = service
        self.limit = limit
        self._lock = threading.Lock()
        self._held: dict[str, SessionHistory] = {}

    def get(
        self, session_id: str, *, n: int | None = None, seq: int | None = None
    ) -> SessionHistory:
        """The history of ``session_id``, brought up to date (``n``, ``seq``: the request or
        the log position the page shows, if it knows; see :meth:`SessionHistory.refresh`)."""
        with self._lock:
            found = self._held.pop(session_id, None)
            if found is None:
                found = SessionHistory(self.service, session_id)
            self._held[session_id] = found
            while len(self._held) > self.limit:
                del self._held[next(iter(self._held))]
        return found.refresh(n=n, seq=seq)
