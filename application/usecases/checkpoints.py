"""Checkpoints and rollback (decision 0041).

A checkpoint is one event in the session log; it stands for the session as it was right before
the log entry holding it, which the store keeps (``StateAt``). A rollback appends events that make
the session's sets and chat what they were then (the conversation), writes back the files the
session wrote since (the files), or both; nothing is erased, and the rollback first checkpoints
the session as it is, so that it can be rolled back in turn.

The files a rollback writes back are those the session itself wrote after the checkpoint (indexed
with trigger ``agent_write``, or written back by an earlier rollback). A file is refused, and
listed, when someone else changed it since the session last wrote it (its latest stored version,
or what is on disk, is not the session's), when it lies outside the allowed roots or on another
filesystem, or when its content at the checkpoint is not stored (binary, too large, unread).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import attrs

from selfctx.application.persistence import entry_events
from selfctx.application.ports.files import (
    FileRestorer,
    SourceChanged,
    SourceMissing,
    SourceUnavailable,
)
from selfctx.application.runner import OpenSession, Reads
from selfctx.application.usecases.base import Deps
from selfctx.application.usecases.sessions import StateAt
from selfctx.domain.documents import from_document
from selfctx.domain.errors import InvalidInput, SessionNotFound, UnknownCheckpoint
from selfctx.domain.hashing import file_hash
from selfctx.domain.objects import FileObject
from selfctx.domain.session import commands as c
from selfctx.domain.session import events as e
from selfctx.domain.session.state import SessionState

__all__ = [
    "MODES",
    "CheckpointInfo",
    "CreateCheckpoint",
    "FilePlan",
    "ListCheckpoints",
    "Mode",
    "RollbackReport",
    "RollbackSession",
]

Mode = Literal["conversation", "files", "both"]
MODES: tuple[Mode, ...] = ("conversation", "files", "both")
_WRITES = ("agent_write", "restore")


@attrs.frozen
class CheckpointInfo:
    """One checkpoint of a session."""

    label: str
    position: int
    """The log position it restores: the session as it was after this many commands."""
    at: str
    """When it was taken."""
    auto: bool
    """Taken by the policy (every N turns) or by a rollback (before rolling back)."""
    turn: int
    """User messages the session had recorded by then."""


@attrs.frozen
class FilePlan:
    """What a rollback does, or would do, with one file the session wrote."""

    object_id: str
    path: str
    action: Literal["write", "delete", "unchanged", "refused"]
    reason: str = ""
    """Why it is refused."""


@attrs.frozen
class RollbackReport:
    """What a rollback did (or, for a dry run, would do)."""

    label: str
    mode: Mode
    dry_run: bool
    position: int
    """The log position restored."""
    turns_before: int
    """Turns of the chat before the rollback."""
    turns_after: int
    """Turns of the chat after it (the checkpoint's, for the conversation)."""
    leaving: tuple[str, ...] = ()
    """Objects that leave the metadata pool (met after the checkpoint)."""
    files: tuple[FilePlan, ...] = ()
    saved_as: str | None = None
    """The checkpoint holding the session as it was before the rollback (None for a dry run)."""

    @property
    def refused(self) -> tuple[FilePlan, ...]:
        return tuple(f for f in self.files if f.action == "refused")


def _checkpoints(entries: Sequence[Mapping[str, Any]]) -> list[CheckpointInfo]:
    out = []
    turn = 0
    for entry in entries:
        before = turn
        for event in entry_events(entry):
            if event.get("event") == "UserMessageRecorded":
                turn += 1
        for event in entry_events(entry):
            if event.get("event") == "CheckpointCreated":
                out.append(
                    CheckpointInfo(
                        label=str(event["label"]),
                        position=int(entry["seq"]) - 1,
                        at=str(entry.get("at", "")),
                        auto=bool(event.get("auto")),
                        turn=before,
                    )
                )
    return out


class ListCheckpoints:
    """The checkpoints of a stored session, oldest first (from its log; nothing is opened)."""

    def __init__(self, deps: Deps) -> None:
        self._deps = deps

    def __call__(self, session_id: str) -> list[CheckpointInfo]:
        runner = self._deps.runner
        if not runner.exists(session_id):
            raise SessionNotFound(session_id)
        return _checkpoints(runner.store.session_log(session_id))


class CreateCheckpoint:
    """Take a checkpoint now."""

    def __init__(self, deps: Deps) -> None:
        self._deps = deps

    def __call__(self, session: OpenSession, label: str | None) -> CheckpointInfo:
        command = c.Checkpoint(label)
        events = self._deps.runner.execute(session, lambda reads, state: command)
        [name] = [ev.label for ev in events if isinstance(ev, e.CheckpointCreated)]
        entries = self._deps.runner.store.session_log(session.session_id)
        return next(cp for cp in reversed(_checkpoints(entries)) if cp.label == name)


class RollbackSession:
    """Plan a rollback from the store, write back the files it may, and commit it."""

    def __init__(self, deps: Deps, restorer: FileRestorer | None) -> None:
        self._deps = deps
        self._restorer = restorer
        self._state_at = StateAt(deps)

    def plan(
        self, session_id: str, state: SessionState, label: str, mode: Mode
    ) -> tuple[RollbackReport, dict[str, tuple[FileObject, FileObject | None]]]:
        """What rolling ``session_id`` (now in ``state``) back to ``label`` does, without doing
        it; and, for each file to write back, (its latest version, its version at the
        checkpoint)."""
        if mode not in MODES:
            raise InvalidInput("rollback mode", mode, f"use one of {list(MODES)}")
        store = self._deps.runner.store
        entries = store.session_log(session_id)
        found = [cp for cp in _checkpoints(entries) if cp.label == label]
        if not found:
            raise UnknownCheckpoint(label, session_id, tuple(state.checkpoints))
        checkpoint = found[-1]
        past = self._state_at(session_id, checkpoint.position)
        leaving: tuple[str, ...] = ()
        turns_after = len(state.turns) - 1
        if mode != "files":
            leaving = tuple(state.ordered(frozenset(state.pool - past.state.pool)))
            turns_after = len(past.state.turns) - 1
        plans: list[FilePlan] = []
        writes: dict[str, tuple[FileObject, FileObject | None]] = {}
        if mode != "conversation":
            plans, writes = self._files(entries, checkpoint.position, past.tx_id)
        report = RollbackReport(
            label=label,
            mode=mode,
            dry_run=True,
            position=checkpoint.position,
            turns_before=len(state.turns) - 1,
            turns_after=turns_after,
            leaving=leaving,
            files=tuple(plans),
        )
        return report, writes

    def _files(
        self, entries: Sequence[Mapping[str, Any]], position: int, tx_id: int
    ) -> tuple[list[FilePlan], dict[str, tuple[FileObject, FileObject | None]]]:
        written: dict[str, str] = {}  # id -> object_hash of the last version the session wrote
        for entry in entries:
            if int(entry["seq"]) <= position:
                continue
            for event in entry_events(entry):
                if event.get("event") in ("FileIndexed", "FileDeleted") and (
                    event.get("trigger") in _WRITES
                ):
                    written[str(event["object_id"])] = str(event["object_hash"])
        if not written:
            return [], {}
        store = self._deps.runner.store
        latest_docs = store.get_many(written)
        then_docs = store.get_many_as_of(written, tx_id)
        plans: list[FilePlan] = []
        writes: dict[str, tuple[FileObject, FileObject | None]] = {}
        for object_id, ours in written.items():
            latest = from_document(latest_docs[object_id])
            assert isinstance(latest, FileObject)
            then_doc = then_docs.get(object_id)
            then = from_document(then_doc) if then_doc is not None else None
            assert then is None or isinstance(then, FileObject)
            path = self._deps.mounts.display_path(latest.source)
            refusal = self._refusal(latest, then, ours)
            if refusal:
                plans.append(FilePlan(object_id, path, "refused", refusal))
            elif _same(latest, then):
                plans.append(FilePlan(object_id, path, "unchanged"))
            else:
                action: Literal["write", "delete"] = "write" if _has_text(then) else "delete"
                plans.append(FilePlan(object_id, path, action))
                writes[object_id] = (latest, then)
        return plans, writes

    def _refusal(self, latest: FileObject, then: FileObject | None, ours: str) -> str:
        """Why a file may not be written back ('' if it may)."""
        if latest.object_hash != ours:
            return "changed by someone else since this session wrote it"
        if then is not None and not then.is_deleted and not _has_text(then):
            status = then.content_status or "unread"
            return f"its content at the checkpoint is not stored ({status.replace('_', ' ')})"
        if self._restorer is None:
            return "this client cannot write files"
        try:
            snapshot = self._deps.files.read(latest.source, self._deps.settings.max_file_bytes)
            on_disk: str | None = snapshot.file_hash
        except SourceMissing:
            on_disk = None
        except SourceUnavailable as exc:
            return exc.reason
        if on_disk != latest.file_hash:
            return "changed on disk since this session wrote it"
        return ""

    def __call__(
        self, session: OpenSession, label: str, mode: Mode, *, dry_run: bool = False
    ) -> RollbackReport:
        report, writes = self.plan(session.session_id, session.state, label, mode)
        if dry_run:
            return report
        past = self._state_at(session.session_id, report.position).state
        target = None
        if mode != "files":
            target = c.RollbackTarget(
                turns=tuple(past.turns),
                pool=frozenset(past.pool),
                active=frozenset(past.active),
                pinned=frozenset(past.pinned),
                auto_active=frozenset(past.auto_active),
                compacted=past.compacted,
                summary=past.summary,
            )
        plans = {p.object_id: p for p in report.files}
        restored: dict[str, FileObject | None] = {}
        for object_id, (latest, then) in writes.items():
            text = then.content if then is not None else None
            data = text.encode("utf-8") if text is not None else None
            try:
                assert self._restorer is not None  # a plan without one refuses every file
                limit = self._deps.settings.max_file_bytes
                self._restorer.restore(latest.source, data, latest.file_hash, limit)
            except (SourceChanged, SourceUnavailable) as exc:
                plans[object_id] = attrs.evolve(plans[object_id], action="refused", reason=str(exc))
                continue
            restored[object_id] = (
                None
                if data is None
                else FileObject.build(latest.source, content=text, file_hash=file_hash(data))
            )

        def build(reads: Reads, state: SessionState) -> c.Command:
            stored = reads.stored_many(restored)
            files: list[c.IndexFile | c.RecordDeletion] = []
            for object_id, observed in restored.items():
                current = stored[object_id]
                assert isinstance(current, FileObject)
                if observed is None:
                    files.append(c.RecordDeletion(current, "restore"))
                else:
                    files.append(c.IndexFile(observed, current, "restore"))
            return c.Rollback(label, target, tuple(files))

        events = self._deps.runner.execute(session, build)
        saved = next((ev.label for ev in events if isinstance(ev, e.CheckpointCreated)), None)
        return attrs.evolve(
            report,
            dry_run=False,
            files=tuple(plans[p.object_id] for p in report.files),
            saved_as=saved,
        )


def _has_text(obj: FileObject | None) -> bool:
    return obj is not None and obj.content is not None


def _same(latest: FileObject, then: FileObject | None) -> bool:
    """Whether the file already holds what it held at the checkpoint."""
    if then is None or then.is_deleted:
        return latest.is_deleted
    return latest.file_hash == then.file_hash and not latest.is_deleted
