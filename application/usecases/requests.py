"""RecordRequest: keep one record per model request (``selfctx.application.requests``), as a new
version of the session's ``requests:{session}`` document. ListRequests reads them back."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

import attrs

from selfctx.application.persistence import entry_events, read_log_entries
from selfctx.application.ports.store import ConflictError, Document, Expect
from selfctx.application.requests import (
    MAX_GAP,
    Mark,
    RequestFacts,
    RequestMeter,
    RequestRecord,
    RequestRecords,
    entry_marks,
    record_from_document,
    record_from_version,
    request_document,
    requests_id,
)
from selfctx.application.runner import OpenSession, Rider
from selfctx.application.usecases.base import Deps
from selfctx.domain.inline import handle
from selfctx.domain.objects import ToolcallObject
from selfctx.domain.rendering import AssembledContext

__all__ = ["ListRequests", "RecordRequest"]

_ATTEMPTS = 5
"""Commits tried when other writers of the same session's records get there first."""


class RecordRequest:
    """Measure a context about to be sent and record it (one small commit)."""

    def __init__(self, deps: Deps) -> None:
        self._deps = deps
        self._meters: dict[str, tuple[RequestMeter, Document | None]] = {}
        self._guard = threading.Lock()

    def forget(self, session_id: str) -> None:
        """The session was closed: drop what its meter remembers."""
        with self._guard:
            self._meters.pop(session_id, None)

    def __call__(
        self,
        session: OpenSession,
        context: AssembledContext,
        facts: RequestFacts,
        count: Callable[[str], int],
    ) -> RequestRecord:
        """Record ``context`` as the session's next request (the caller holds its lock). In a
        batch (``SessionRunner.batch``) the record goes with the batch's transaction: written
        with it, or, when the store refuses it, not at all (``BatchProgress.redone``)."""
        store = self._deps.runner.store
        doc_id = requests_id(session.session_id)
        with self._guard:
            known = self._meters.get(session.session_id)
        if known is None:
            latest = store.get(doc_id)
            known = (RequestMeter(_record(latest)), latest)
        meter, previous = known
        state = session.state
        tokens, shared, parts, digest = meter.measure(
            context,
            count,
            state.active.__contains__,
            state.policy.inline_layout,
            lambda call_id: _size(session, call_id),
        )
        marks = self._marks(session, meter.last)
        at = self._deps.runner.clock.now()

        def record_of() -> RequestRecord:
            return meter.next_record(
                at=at,
                seq=session.seq,
                facts=facts,
                managed=tokens,
                shared=shared,
                parts=parts,
                digest=digest,
                marks=marks,
                lines=meter.lines,
            )

        if session.batch is not None:
            # In a batch: the record goes with the batch's transaction (decision 0089).
            record = record_of()
            doc = request_document(session.session_id, record)
            rider = Rider(
                (doc,),
                (Expect(doc_id, previous),),
                lambda: self._kept(session, meter, record, doc),
            )
            if self._deps.runner.ride(session, rider):
                return record
        for _attempt in range(_ATTEMPTS):
            record = record_of()
            doc = request_document(session.session_id, record)
            try:
                store.commit([doc], [Expect(doc_id, previous)])
            except ConflictError:
                previous = store.get(doc_id)  # another writer recorded a request of this session
                meter.keep_last(_record(previous))
                continue
            self._kept(session, meter, record, doc)
            return record
        raise ConflictError([doc_id])

    def _kept(
        self, session: OpenSession, meter: RequestMeter, record: RequestRecord, doc: Document
    ) -> None:
        """``record`` (as ``doc``) is committed: the meter and the session move past it."""
        meter.keep_last(record)
        meter.lines_recorded()
        del session.marks[: sum(1 for m in session.marks if m.seq <= record.seq)]
        session.marks_from = max(session.marks_from, record.seq)
        with self._guard:
            self._meters[session.session_id] = (meter, doc)

    def _marks(self, session: OpenSession, last: RequestRecord | None) -> tuple[Mark, ...] | None:
        """The marks since the previous request: those the session kept as it folded its log,
        and, for a session opened after that request, those of the entries in between (read
        back by id, at most ``MAX_GAP``; None beyond)."""
        after = last.seq if last is not None else 0
        found: list[Mark] = []
        if after < session.marks_from:
            sid = session.session_id
            wanted = range(after + 1, session.marks_from + 1)
            if len(wanted) > MAX_GAP:
                return None
            entries = read_log_entries(self._deps.runner.store, sid, after + 1, session.marks_from)
            if len(entries) != len(wanted):
                return None
            for k in wanted:
                entry = entries[k]
                found += entry_marks(entry, entry_events(entry))
        found += (m for m in session.marks if after < m.seq <= session.seq)
        state = session.state
        named = []
        for mark in found:
            object_id = mark.fields.get("object_id")
            if object_id and state.policy.inline_layout and object_id in state.positions:
                mark = attrs.evolve(mark, fields={**mark.fields, "name": handle(state, object_id)})
            named.append(mark)
        return tuple(named)


def _size(session: OpenSession, call_id: str) -> int | None:
    obj = session.objects.meta(call_id)
    return obj.content_length if isinstance(obj, ToolcallObject) else None


def _record(doc: Document | None) -> RequestRecord | None:
    return record_from_document(doc) if doc is not None else None


class ListRequests:
    """A session's request records, oldest first, each with the transaction that wrote it."""

    def __init__(self, deps: Deps) -> None:
        self._deps = deps

    def __call__(self, session_id: str) -> list[RequestRecord]:
        versions = self._deps.runner.store.history(requests_id(session_id))
        return [r for r in map(record_from_version, versions) if r is not None]

    def lazily(self, session_id: str) -> RequestRecords:
        """The same records, each decoded when it is first read."""
        return RequestRecords(self._deps.runner.store.history(requests_id(session_id)))

    def latest(self, session_ids: Iterable[str]) -> dict[str, RequestRecord]:
        """The latest record of each session that has any (one store read)."""
        ids = {requests_id(s): s for s in session_ids}
        docs = self._deps.runner.store.get_many(ids)
        out = {}
        for doc_id, doc in docs.items():
            record = record_from_document(doc)
            if record is not None:
                out[ids[doc_id]] = record
        return out
