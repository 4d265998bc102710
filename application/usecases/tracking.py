"""Tracking (docs/specification.md §3): keep the objects of open sessions in step with their
sources.

Two ways in, one protocol. A tracker's hint (a watcher event) and the re-hash pass (on demand)
both re-read the source and run full indexing: a new version only when ``file_hash`` differs, a
null-content version when the source is confirmed gone, nothing when it cannot be reached (the
object is orphaned; its latest version stays). Set membership never changes.

What is written is object versions only, each on top of the exact version it was decided against
(a commit precondition), so two clients reporting the same bytes produce one version. No session
log entry is written (decision 0009): the versions are in the store with their transaction times,
which is all that rebuilding a past context needs, and a change seen by one client is not one
session's event. Every open session holding the object adopts the new version, so its next
assembled context shows it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Final

import attrs

from selfctx.application.ports.files import SourceMissing, SourceUnavailable
from selfctx.application.ports.store import ConflictError, Document
from selfctx.application.ports.tracking import SourceChange, SourceTracker
from selfctx.application.runner import Contention, OpenSession, Reads
from selfctx.application.usecases.base import Deps, observe_source
from selfctx.domain.documents import from_document, to_document
from selfctx.domain.indexing import Outcome, decide_deletion, decide_full_index
from selfctx.domain.objects import FileObject, Source

__all__ = ["RefreshReport", "TrackSources"]


@attrs.frozen
class RefreshReport:
    """What one refresh (a batch of hints, or a re-hash pass) did."""

    updated: tuple[str, ...] = ()
    """Objects that got a new version with what is on disk now (created for a renamed file's new
    path)."""
    deleted: tuple[str, ...] = ()
    """Objects whose source is confirmed gone: a null-content version was written."""
    orphaned: tuple[str, ...] = ()
    """Objects whose source cannot be read from here now: nothing written, latest version kept."""
    unchanged: int = 0
    """Sources whose stored version already matched."""
    skipped: tuple[str, ...] = ()
    """New paths of renamed files that were not indexed (unreadable, or outside the roots)."""


_GONE: Final = "gone"


class TrackSources:
    """Watches the files open sessions hold, and refreshes objects from their sources.

    ``sessions`` returns the sessions open in this client right now; the tracker may be None (no
    watching: the re-hash pass still works).
    """

    def __init__(
        self,
        deps: Deps,
        tracker: SourceTracker | None,
        sessions: Callable[[], Iterable[OpenSession]],
    ) -> None:
        self._deps = deps
        self._tracker = tracker
        self._sessions = sessions
        self._lock = threading.Lock()
        self._watched: dict[str, Source] = {}
        """Object id -> the source watched for it."""
        self._ahead: ThreadPoolExecutor | None = None
        """The threads of :meth:`look_ahead`'s reads, started on first use."""

    # -- watching -----------------------------------------------------------------------------

    def track(self, session: OpenSession, object_ids: Iterable[str] | None = None) -> None:
        """Watch the sources of these objects of ``session`` (all of its index when None).

        Only files that have been read are watched: a discovery stub holds no content that
        could go stale (decision 0011), and tool calls have no source. Sources on another
        filesystem are refused by the tracker, which never reads them.
        """
        if self._tracker is None:
            return
        ids = list(session.state.index) if object_ids is None else list(object_ids)
        for object_id in ids:
            obj = session.objects.meta(object_id, read=False)
            if not isinstance(obj, FileObject) or obj.is_stub:
                continue
            # Asked every time (cheap, idempotent): a watch may have ended since, e.g. when its
            # directory was removed.
            if self._tracker.watch(obj.source):
                with self._lock:
                    self._watched[object_id] = obj.source

    def release(self, session: OpenSession) -> None:
        """Stop watching what ``session`` held and no other open session holds."""
        if self._tracker is None:
            return
        others = [s for s in self._sessions() if s is not session]
        with self._lock:
            candidates = [i for i in session.state.index if i in self._watched]
        for object_id in candidates:
            if any(object_id in other.objects for other in others):
                continue
            with self._lock:
                source = self._watched.pop(object_id, None)
            if source is not None:
                self._tracker.unwatch(source)

    def watched(self) -> dict[str, Source]:
        """Object id -> source, for every object watched now."""
        with self._lock:
            return dict(self._watched)

    # -- refreshing ---------------------------------------------------------------------------

    def on_changes(self, changes: Sequence[SourceChange]) -> None:
        """The tracker's handler: refresh what it reported (errors propagate to the tracker,
        which records them)."""
        self.refresh(changes)

    def rehash(self, session: OpenSession) -> RefreshReport:
        """Re-read every file ``session`` has read and index what changed: the pass that catches
        whatever the watcher missed. Discovery stubs are not read (decision 0004)."""
        with session.lock:
            files = [
                obj
                for obj in (session.objects.meta(i, read=False) for i in session.state.index)
                if isinstance(obj, FileObject) and not obj.is_stub
            ]
        report = self.refresh([SourceChange(f.source) for f in files])
        self.track(session, [f.id for f in files])
        return report

    def refresh(self, changes: Sequence[SourceChange]) -> RefreshReport:
        """Full indexing (trigger ``watcher``) of each changed source, written as object
        versions and adopted by every open session that holds the object."""
        observed: dict[str, FileObject | str] = {}
        orphaned: list[str] = []
        skipped: list[str] = []
        for change in changes:
            object_id = FileObject.identity_of(change.source)
            try:
                source = change.source
                if change.renamed_from is not None:
                    # A new path the tracker saw: canonicalise and confine it like any other.
                    source = self._deps.files.canonical(source)
                    object_id = FileObject.identity_of(source)
                observed[object_id] = observe_source(self._deps, source)
            except SourceMissing:
                if change.renamed_from is None:
                    observed[object_id] = _GONE
                else:
                    skipped.append(change.source.path)
            except SourceUnavailable:
                if change.renamed_from is not None:
                    skipped.append(change.source.path)
                elif change.gone:
                    observed[object_id] = _GONE  # the unlink was seen: confirmed deleted
                else:
                    orphaned.append(object_id)
        written, unchanged = self._persist(observed) if observed else ({}, 0)
        return RefreshReport(
            updated=tuple(i for i, v in written.items() if not v.is_deleted),
            deleted=tuple(i for i, v in written.items() if v.is_deleted),
            orphaned=tuple(orphaned),
            unchanged=unchanged,
            skipped=tuple(skipped),
        )

    def _persist(self, observed: dict[str, FileObject | str]) -> tuple[dict[str, FileObject], int]:
        """Write what changed in one commit, on top of the versions read; retry on conflict.

        A version an open session here holds, which the source no longer matches, is taken as
        the stored one without asking the store (decision 0124): the commit expects it, so a
        newer stored version refuses the commit, and the refusal says what is stored, as a read
        would have (decision 0106). What would write nothing is decided on the store's version
        only, never on a session's, and read once a session holding those bytes has ended its
        command (:meth:`_held`)."""
        store = self._deps.runner.store
        contention = Contention()
        current: Mapping[str, Document | None] = self._held(observed)
        while True:
            reads = Reads(store)
            # what sessions here hold (decision 0124), then what a refusal said is stored (0106)
            reads.seed(current)
            stored = reads.stored_many(observed)
            puts = []
            expect = []
            written: dict[str, FileObject] = {}
            latest: dict[str, FileObject] = {}
            unchanged = 0
            for object_id, seen in observed.items():
                previous = stored[object_id]
                if previous is not None and not isinstance(previous, FileObject):
                    continue  # not a file object: never overwrite another kind
                if isinstance(seen, FileObject):
                    outcome, version = decide_full_index(previous, seen)
                else:
                    outcome, version = decide_deletion(previous)
                if version is not None:
                    written[object_id] = version
                    puts.append(to_document(version))
                    expect.append(reads.expectation(object_id))
                if outcome is Outcome.UNCHANGED:
                    unchanged += 1
                if version is not None:
                    latest[object_id] = version
                elif previous is not None:
                    latest[object_id] = previous
            if puts:
                try:
                    store.commit(puts, expect)
                except ConflictError as exc:
                    # another client wrote first: decide again on what it wrote
                    contention.failed(exc, sessions_log=False)
                    current = exc.current
                    continue
            self._adopt(latest)
            return written, unchanged

    def _held(self, observed: Mapping[str, FileObject | str]) -> dict[str, Document]:
        """What the open sessions of this process hold of these files (decision 0124): the
        documents of the versions that what was observed replaces (a decision on them writes a
        new version), to be taken as the stored ones. A file whose observed content a session
        already holds was written by that session, or is being written: a session holds the
        versions its open batch decided before the batch's transaction is committed, under its
        lock (decision 0077). The store is then read once the session's lock is free (its
        transaction landed, or was refused and decided again, or failed and rolled back), so
        that it shows that version rather than the one before, which a commit would only be
        refused on top of. The first session holding a file whole decides. Sessions are looked
        at without their locks (:meth:`ObjectCache.whole_file`)."""
        held: dict[str, Document] = {}
        writing: list[OpenSession] = []
        left = dict(observed)
        for session in self._sessions():
            if not left:
                break
            for object_id in list(left):
                version = session.objects.whole_file(object_id)
                if version is None:
                    continue
                seen = left.pop(object_id)
                if isinstance(seen, FileObject):
                    _, new = decide_full_index(version, seen)
                else:
                    _, new = decide_deletion(version)
                if new is not None:
                    held[object_id] = to_document(version)
                elif not writing or writing[-1] is not session:
                    writing.append(session)
        for session in writing:
            with session.lock:  # what its turn commits has landed (or not) when it is free
                pass
        return held

    def learn(self, session: OpenSession) -> tuple[str, ...]:
        """Adopt the versions other clients wrote of the files ``session`` holds since it last
        looked (a file is watched by one process of a store; the others learn its versions
        from the store, decision 0066): one question to the store, and one batch read of the
        versions that are new to the session. Returns the ids adopted. The caller holds the
        session's lock."""
        store = self._deps.runner.store
        ahead, session.versions_ahead = session.versions_ahead, None
        if ahead is not None and ahead[0] == session.versions_at:
            held = ahead[1]
            feed = ahead[2]()  # asked before, from where the session still is
        else:
            held = session.objects.file_hashes()
            feed = store.file_versions(session.versions_at, held)
        if not feed.supported:
            return ()
        objects = session.objects
        if feed.complete:
            latest = {object_id: object_hash for _, object_id, object_hash in feed.versions}
            wanted = [
                object_id
                for object_id, object_hash in latest.items()
                if (known := objects.meta(object_id, read=False)) is not None
                and isinstance(known, FileObject)
                and known.object_hash != object_hash
            ]
        elif session.versions_at is None:
            wanted = []  # first contact: the session was read just now
        else:  # the store cannot say what changed: compare every file of the session
            wanted = [
                object_id
                for object_id in session.state.index
                if isinstance(objects.meta(object_id, read=False), FileObject)
            ]
        adopted = []
        if wanted:
            # The feed's answer carries the documents of the held files it knew to be newer
            # (decision 0106). One is taken only if the session still holds the version it held
            # when it asked (a read started ahead may precede a version the session took in
            # since, which may be the newer); the others are read as the latest.
            delivered = feed.documents
            docs: list[Document] = []
            missing = []
            for object_id in wanted:
                doc = delivered.get(object_id)
                known = objects.meta(object_id, read=False)
                if (
                    doc is not None
                    and known is not None
                    and held.get(object_id) == known.object_hash
                ):
                    docs.append(doc)
                else:
                    missing.append(object_id)
            if missing:
                docs += store.get_many(missing).values()
            for doc in docs:
                version = from_document(doc)
                known = objects.meta(version.id, read=False)
                if (
                    isinstance(version, FileObject)
                    and known is not None
                    and known.object_hash != version.object_hash
                ):
                    session.remember(version)
                    adopted.append(version.id)
        session.versions_at = feed.position
        return tuple(adopted)

    def look_ahead(self, session: OpenSession) -> None:
        """Start the read of the file versions feed that the session's next :meth:`learn`
        makes, on a thread of its own when the store's reads wait on another process, so that
        it overlaps what the caller does first (decision 0089). The next ``learn`` takes it if
        the session has not learned since; it then sees the versions written before this call,
        as it would have seen those written before it was made. The caller holds the
        session's lock."""
        store = self._deps.runner.store
        if not store.reads_wait:
            return
        held = session.objects.file_hashes()
        if store.versions_at_hand(session.versions_at, held) is not None:
            # Answered in this process (the node's feed pushed to it, decision 0148): nothing to
            # overlap, and no thread to wake; ``learn`` asks again, as late as it can.
            return
        with self._lock:
            if self._ahead is None:
                self._ahead = ThreadPoolExecutor(2, thread_name_prefix="selfctx-ahead")
            position = session.versions_at
            session.versions_ahead = (
                position,
                held,
                self._ahead.submit(store.file_versions, position, held).result,
            )

    def close(self) -> None:
        """Let the reads started ahead end."""
        with self._lock:
            ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead.shutdown(wait=True, cancel_futures=True)

    def _adopt(self, latest: dict[str, FileObject]) -> None:
        """Every open session holding one of these objects learns its latest version."""
        if not latest:
            return
        for session in self._sessions():
            with session.lock:
                for object_id, version in latest.items():
                    known = session.objects.meta(object_id, read=False)
                    if known is not None and known.object_hash != version.object_hash:
                        session.remember(version)
