"""StartSession and ResumeSession (docs/specification.md §2, lifecycle), and rebuilding a session as
it was."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Final

import attrs

from selfctx.application.persistence import (
    decode_events,
    entry_events,
    log_entry_tx,
    read_log_entries,
)
from selfctx.application.ports.files import FileSnapshot, SourceMissing, SourceUnavailable
from selfctx.application.runner import OpenSession, Reads, _Ahead
from selfctx.application.usecases.base import Deps, version_of
from selfctx.application.usecases.collapse_seen import answered_earlier, sent_earlier
from selfctx.domain.documents import from_document
from selfctx.domain.errors import InvalidInput, SessionExists, SessionNotFound
from selfctx.domain.infrastructure import (
    ChatObject,
    SessionObject,
    chat_id_for,
    session_id_for,
    state_from_snapshot,
)
from selfctx.domain.objects import FileObject, Source, SystemPromptObject, ToolcallObject
from selfctx.domain.rendering import AssembledContext
from selfctx.domain.session import commands as c
from selfctx.domain.session.events import ToolCallRecorded
from selfctx.domain.session.machine import fold, fold_many
from selfctx.domain.session.state import INITIAL, CollapseWindow, PolicyConfig, SessionState

__all__ = ["ResumeReport", "ResumeSession", "StartSession", "StateAt", "validate_session_id"]

_SESSION_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+=-]{0,199}")


def validate_session_id(session_id: object) -> str:
    """Session ids appear inside object ids: letters, digits and ``._@+=-``, at most 200."""
    if not isinstance(session_id, str) or not _SESSION_ID.fullmatch(session_id):
        raise InvalidInput(
            "session id",
            session_id,
            "use 1-200 letters, digits or ._@+=- characters, starting with a letter or digit",
        )
    return session_id


class StartSession:
    """Create a session: its system prompt, chat and session objects, and log entry 1."""

    def __init__(self, deps: Deps) -> None:
        self._deps = deps

    def __call__(
        self,
        session_id: str,
        system_prompt: str,
        window: CollapseWindow | None = None,
        policy: PolicyConfig | None = None,
    ) -> OpenSession:
        validate_session_id(session_id)
        if not isinstance(system_prompt, str):
            raise InvalidInput("system prompt", system_prompt, "must be text")
        runner = self._deps.runner
        if runner.exists(session_id):
            raise SessionExists(session_id)
        prompt = SystemPromptObject.build(f"system_prompt:{session_id}", system_prompt)
        session = OpenSession(
            session_id=session_id,
            state=INITIAL,
            seq=0,
            system_prompt=prompt,
            objects=runner.new_objects(),
            snapshot_bytes=0,
            log_bytes_since_snapshot=0,
            versions_at=runner.feed_position(),
            written=runner.new_written(),
        )
        command = c.StartSession(
            session_id=session_id,
            system_prompt=prompt,
            chat_id=chat_id_for(session_id),
            window=window or self._deps.settings.window,
            policy=policy or self._deps.settings.policy,
        )
        runner.execute(session, lambda reads, state: command)
        return session


@attrs.frozen
class ResumeReport:
    """What reconciliation found when a session was resumed."""

    session_id: str
    updated: tuple[str, ...] = ()
    """Files whose source changed while the session was paused (new versions written)."""
    deleted: tuple[str, ...] = ()
    """Files whose source is confirmed gone (null-content versions written)."""
    orphaned: tuple[str, ...] = ()
    """Files whose source cannot be reached from here (latest version kept)."""
    unchanged: int = 0


class ResumeSession:
    """Restore every set, then reconcile sourced objects with their sources (§3.6)."""

    def __init__(self, deps: Deps) -> None:
        self._deps = deps

    def __call__(self, session_id: str) -> tuple[OpenSession, ResumeReport]:
        validate_session_id(session_id)
        # The files' sources are read while the store still sends the tool calls (decision
        # 0104); the first reconciliation takes what was read then, a retry reads them again.
        # A read is kept as read: the version it shows is built only for a file whose hash
        # differs from the stored one (decision 0146).
        read_early: dict[str, tuple[Source, FileSnapshot | SourceUnavailable]] = {}
        files_reader, limit = self._deps.files, self._deps.settings.max_file_bytes

        def observe(files: Sequence[FileObject]) -> None:
            for obj in files:
                if obj.is_stub:
                    continue
                try:
                    read_early[obj.id] = (obj.source, files_reader.read(obj.source, limit))
                except SourceUnavailable as exc:
                    read_early[obj.id] = (obj.source, exc)

        session = self._deps.runner.load(session_id, on_files=observe)
        report: dict[str, list[str]] = {"updated": [], "deleted": [], "orphaned": []}
        unchanged = 0

        def source_of(obj: FileObject) -> FileSnapshot:
            early = read_early.pop(obj.id, None)
            if early is None or early[0] != obj.source:
                return files_reader.read(obj.source, limit)
            if isinstance(early[1], SourceUnavailable):
                raise early[1]
            return early[1]

        attempts = 0

        def build(reads: Reads, state: SessionState) -> c.Command:
            nonlocal unchanged, attempts
            attempts += 1
            report.update(updated=[], deleted=[], orphaned=[])
            unchanged = 0
            files = [
                obj
                for obj in (session.objects.meta(i, read=False) for i in state.index)
                if isinstance(obj, FileObject) and not obj.is_stub
            ]
            found: dict[str, FileSnapshot | SourceUnavailable] = {}
            for obj in files:
                try:
                    found[obj.id] = source_of(obj)
                except SourceUnavailable as exc:  # SourceMissing among them
                    found[obj.id] = exc
            # The files were read without their content (decision 0153): each is compared with
            # the version held, the latest stored when the session was read; the stored
            # version is read again only for one whose source differs from it, and for every
            # file when a commit was refused (something was written meanwhile).
            stored = reads.stored_files(
                obj for obj in files if attempts > 1 or _differs(obj, found[obj.id])
            )
            reconciled: list[c.IndexFile | c.RecordDeletion] = []
            for obj in files:
                latest = stored.get(obj.id) or obj
                try:
                    read = found[obj.id]
                    if isinstance(read, SourceUnavailable):
                        raise read
                except SourceMissing:
                    if not latest.is_deleted:
                        reconciled.append(c.RecordDeletion(latest, "resume"))
                        report["deleted"].append(obj.id)
                    else:
                        unchanged += 1
                    continue
                except SourceUnavailable:
                    report["orphaned"].append(obj.id)
                    continue
                if latest.file_hash == read.file_hash and not latest.is_stub:
                    unchanged += 1
                    continue
                reconciled.append(c.IndexFile(version_of(obj.source, read), latest, "resume"))
                report["updated"].append(obj.id)
            return c.Resume(tuple(reconciled))

        self._deps.runner.execute(session, build)
        read_early.clear()
        # What the server before the restart had looked at, so that the next request collapses
        # what it would have collapsed (decision 0093).
        session.relevance_memo.answered.update(answered_earlier(session.state))
        session.sent_before = sent_earlier(session.state)
        return session, ResumeReport(
            session_id,
            updated=tuple(report["updated"]),
            deleted=tuple(report["deleted"]),
            orphaned=tuple(report["orphaned"]),
            unchanged=unchanged,
        )


def _differs(held: FileObject, read: FileSnapshot | SourceUnavailable) -> bool:
    """Whether reconciling ``held`` with what its source showed may write a version: a file
    read whose hash is not the held one's, a missing source of a file not deleted."""
    if isinstance(read, SourceMissing):
        return not held.is_deleted
    if isinstance(read, SourceUnavailable):
        return False  # orphaned: nothing is written
    return held.file_hash != read.file_hash  # stubs are not reconciled


@attrs.frozen
class PastState:
    """A session as it was right after one log entry."""

    state: SessionState
    seq: int
    tx_id: int
    """The transaction that wrote that log entry: read objects as of it."""


@attrs.frozen
class PastContext:
    """A session's context as it was right after one log entry, with what it was rendered from."""

    state: SessionState
    seq: int
    tx_id: int
    """The transaction the object versions were read as of."""
    objects: Mapping[str, FileObject | ToolcallObject]
    context: AssembledContext


class StateAt:
    """Rebuild a session's state after any past command from stored versions alone."""

    def __init__(self, deps: Deps) -> None:
        self._deps = deps

    def __call__(
        self,
        session_id: str,
        seq: int,
        on_snapshot: Callable[[SessionState], None] | None = None,
        *,
        on_toolcalls: Callable[[Sequence[str]], None] | None = None,
    ) -> PastState:
        """``on_snapshot``: called with the snapshot's state before the log entries after it are
        folded into it (a caller may start reading that state's objects meanwhile);
        ``on_toolcalls``: called with the snapshot's tool calls (those of its chat's turns and
        the detached ones) as soon as its documents are read, before its state is built, and
        with those the log entries after it record, before they are folded (the node reads
        them meanwhile)."""
        if not isinstance(seq, int) or isinstance(seq, bool):
            raise InvalidInput("log position", seq, "must be an integer")
        store = self._deps.runner.store
        fast = self._from_entry(session_id, seq, on_snapshot, on_toolcalls) if seq > 0 else None
        if fast is not None:
            return fast
        history = store.history(session_id_for(session_id))
        if not history:
            raise SessionNotFound(session_id)
        snapshots = [v for v in history if int(v.document["seq"]) <= seq]
        if not snapshots:
            raise InvalidInput("log position", seq, "before the session started")
        snap = snapshots[-1]
        # The chat's version of the same transaction (one document, not the chat's history)
        chat_doc = store.get_as_of(chat_id_for(session_id), snap.tx_id)
        session_obj = from_document(snap.document)
        chat_obj = from_document(chat_doc) if chat_doc is not None else None
        assert isinstance(session_obj, SessionObject) and isinstance(chat_obj, ChatObject)
        state = state_from_snapshot(session_obj, chat_obj)
        entries = [
            entry
            for entry in store.session_log(session_id, after_seq=session_obj.seq)
            if int(entry["seq"]) <= seq
        ]
        for entry in entries:
            state = fold(decode_events(entry_events(entry)), state)
        last = log_entry_tx(store, session_id, int(entries[-1]["seq"])) if entries else None
        tx_id = snap.tx_id if last is None else last
        if seq > (int(entries[-1]["seq"]) if entries else session_obj.seq):
            raise InvalidInput("log position", seq, "after the session's last command")
        return PastState(state=state, seq=seq, tx_id=tx_id)

    def _from_entry(
        self,
        session_id: str,
        seq: int,
        on_snapshot: Callable[[SessionState], None] | None = None,
        on_toolcalls: Callable[[Sequence[str]], None] | None = None,
    ) -> PastState | None:
        """The state at ``seq`` from the snapshot in force when log entry ``seq`` was committed
        (one version, read as of that transaction) and the entries between them, read by id:
        the work grows with the distance to that snapshot, not with the session's length nor
        with how many snapshots it has. None when entry ``seq`` is not stored (the caller's
        slower path says why)."""
        store = self._deps.runner.store
        found_tx = log_entry_tx(store, session_id, seq)
        if found_tx is None:
            return None
        tx_id = found_tx
        # The chat is written with every snapshot and only then: as of the same transaction it
        # is the snapshot's chat (both in one read).
        snap_id, chat_id = session_id_for(session_id), chat_id_for(session_id)
        docs = store.get_many_as_of([snap_id, chat_id], tx_id)
        snap_doc, chat_doc = docs.get(snap_id), docs.get(chat_id)
        if snap_doc is None or int(snap_doc.get("seq", -1)) > seq:
            return None
        snap_seq = int(snap_doc["seq"])
        wanted = range(snap_seq + 1, seq + 1)
        # On a store whose reads wait on another process, the node reads the entries while
        # this process builds the snapshot's state.
        with _Ahead(store.reads_wait and bool(wanted)) as ahead:
            entries = ahead(read_log_entries, store, session_id, snap_seq + 1, seq)
            session_obj = from_document(snap_doc)
            chat_obj = from_document(chat_doc) if chat_doc is not None else None
            if not isinstance(session_obj, SessionObject) or not isinstance(chat_obj, ChatObject):
                return None
            if on_toolcalls is not None:
                on_toolcalls((*chat_obj.toolcall_refs, *session_obj.detached))
            state = state_from_snapshot(session_obj, chat_obj)
            if on_snapshot is not None:
                on_snapshot(state)
            found = entries()
        if len(found) != len(wanted):
            return None
        events = [ev for k in wanted for ev in decode_events(entry_events(found[k]))]
        if on_toolcalls is not None:
            later = [e.object_id for e in events if isinstance(e, ToolCallRecorded)]
            if later:
                on_toolcalls(later)
        state = fold_many(events, state)  # the same state as folding them one by one
        return PastState(state=state, seq=seq, tx_id=tx_id)


class SetSystemPrompt:
    """Give the session's system prompt a new version (nothing is written if it is unchanged)."""

    def __init__(self, deps: Deps) -> None:
        self._deps = deps

    def __call__(self, session: OpenSession, text: str) -> bool:
        if not isinstance(text, str):
            raise InvalidInput("system prompt", text, "must be text")
        prompt = SystemPromptObject.build(session.state.system_prompt_id, text)
        if prompt.object_hash == session.system_prompt.object_hash:
            return False
        command = c.SetSystemPrompt(prompt)
        self._deps.runner.execute(session, lambda reads, state: command)
        return True
