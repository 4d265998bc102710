"""Watching host files with watchdog (docs/specification.md §3, Tracking): one watch per parent
directory, not per file.

Events are hints (STYLE.md): each one only marks a watched path as worth a look. Marks are
coalesced per path (:mod:`selfctx.adapters.filesystem.coalesce`), so a burst of writes, or an
editor's save by writing a temporary file and renaming it over the original, becomes one look at the
file once it is quiet, and the application indexes whatever is there then: one ``updated`` version.

* A watched file unlinked or moved away, and absent when the look happens, is reported ``gone``.
* A watched file renamed within its directory also reports the new path (``renamed_from``), which
  the application indexes if it still exists when the look happens. A move to another directory
  looks like a delete: watchdog pairs the two halves of a move only within one watch.
* A watched directory that is deleted or moved away reports all its watched files; its watch
  ends, and watching one of its files again re-creates it.
* When the kernel drops events (inotify queue overflow), every watched file is reported.

A newly watched file is looked at once, after its watch is in place, so that a change made
between the read that preceded the watch and the watch itself is not lost (the look writes nothing
when the file did not change).

Only sources on the host filesystem are watched; a container's paths are refused without any
host access. Errors raised while handling events or delivering changes are logged and kept in
:meth:`WatchdogTracker.failures` (and passed to ``on_error``), never swallowed.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
from collections.abc import Callable

import attrs
import watchdog.events
from watchdog.events import (
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
    FileSystemMovedEvent,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch

from selfctx.adapters.filesystem.coalesce import Coalescer
from selfctx.application.ports.tracking import (
    ChangeHandler,
    SourceChange,
    SourceTracker,
    TrackerFailure,
)
from selfctx.domain.objects import FilesystemSource, Source

__all__ = ["WatchdogTracker"]

_log = logging.getLogger(__name__)

# Events worth a look. Opens, reads and close-without-write are left out of the kernel mask: the
# application's own reads of a changed file must not trigger another look.
_EVENTS: list[type[FileSystemEvent]] = [
    FileCreatedEvent,
    FileModifiedEvent,
    FileClosedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    DirDeletedEvent,
    DirMovedEvent,
]
_attrib = getattr(watchdog.events, "FileAttribEvent", None)
if _attrib is not None:  # watchdog >= 6 reports chmod separately (permission changes matter)
    _EVENTS.append(_attrib)

_OVERFLOW_LOGGER = "watchdog.observers.inotify_c"


@attrs.frozen
class _Note:
    """What the events for one path since its last delivery said."""

    gone_seen: bool = False
    """The path was unlinked or moved away (it may have come back since)."""
    renamed_from: str | None = None
    """The watched path this path was renamed from (for a path not watched itself)."""


def _merge(old: _Note, new: _Note) -> _Note:
    return _Note(
        gone_seen=old.gone_seen or new.gone_seen,
        renamed_from=new.renamed_from or old.renamed_from,
    )


def _absent(path: str) -> bool:
    """True when nothing is at ``path`` (not even a dangling symlink); False if unsure."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        return False
    return False


def _under(path: str, directory: str) -> bool:
    return path.startswith(directory.rstrip("/") + "/")


@attrs.define
class _Dir:
    watch: ObservedWatch | None
    files: set[str] = attrs.field(factory=set)


class _Handler(FileSystemEventHandler):
    def __init__(self, tracker: WatchdogTracker) -> None:
        self._tracker = tracker

    def dispatch(self, event: FileSystemEvent) -> None:
        self._tracker._on_event(event)


class _OverflowListener(logging.Handler):
    """watchdog reports a kernel queue overflow only as a log line: turn it into a re-scan."""

    def __init__(self, on_overflow: Callable[[], None]) -> None:
        super().__init__(logging.WARNING)
        self._on_overflow = on_overflow

    def emit(self, record: logging.LogRecord) -> None:
        if "overflow" in record.getMessage().lower():
            self._on_overflow()


class WatchdogTracker(SourceTracker):
    """A :class:`SourceTracker` on watchdog's native observer (inotify on Linux).

    ``delay`` is the quiet spell a path waits for before it is delivered, ``max_delay`` the
    longest any path waits after its first event. ``on_error(failure)`` is called for every
    failure, in addition to :meth:`failures` and the log.
    """

    def __init__(
        self,
        host_filesystem_id: str,
        *,
        delay: float = 0.05,
        max_delay: float = 0.5,
        on_error: Callable[[TrackerFailure], None] | None = None,
        observer: BaseObserver | None = None,
    ) -> None:
        self.host_filesystem_id = host_filesystem_id
        self._on_error = on_error
        self._on_changes: ChangeHandler | None = None
        self._lock = threading.Lock()
        """Guards the maps below; taken by the event handler, never held while calling watchdog."""
        self._schedule_lock = threading.Lock()
        """Serialises schedule/unschedule; the event handler never takes it."""
        self._sources: dict[str, Source] = {}
        self._dirs: dict[str, _Dir] = {}
        self._dead: list[ObservedWatch] = []
        self._failures: list[TrackerFailure] = []
        self._closed = False
        self._handler = _Handler(self)
        self._coalescer: Coalescer[str, _Note] = Coalescer(
            self._deliver,
            self._delivery_failed,
            delay=delay,
            max_delay=max_delay,
            merge=_merge,
            name="selfctx-tracker",
        )
        self._observer = observer if observer is not None else Observer()
        self._observer.daemon = True
        self._observer.start()
        self._overflow = _OverflowListener(self.rescan)
        logging.getLogger(_OVERFLOW_LOGGER).addHandler(self._overflow)

    # -- the port -------------------------------------------------------------------------------

    def start(self, on_changes: ChangeHandler) -> None:
        self._on_changes = on_changes

    def watch(self, source: Source) -> bool:
        if source.filesystem_id != self.host_filesystem_id:
            return False  # a container's file: never watched, never touched on the host
        path = source.path
        directory = os.path.dirname(path)
        with self._schedule_lock:
            self._reap_dead_watches()
            with self._lock:
                if self._closed:
                    return False
                if path in self._sources:
                    return True
                entry = self._dirs.get(directory)
            if entry is None:
                try:
                    watch = self._observer.schedule(
                        self._handler, directory, recursive=False, event_filter=_EVENTS
                    )
                except OSError as exc:
                    if exc.errno in (errno.ENOSPC, errno.EMFILE):
                        # The kernel's watch limit: the user has to act, so say so loudly.
                        self._record(TrackerFailure((path,), exc))
                    return False  # the directory is gone or unreadable: orphaned, not watched
                entry = _Dir(watch)
            with self._lock:
                self._dirs[directory] = entry
                entry.files.add(path)
                self._sources[path] = source
        # One look once the watch is in place: a change made between the caller's read and this
        # moment raised no event, and would otherwise wait for the next one.
        self._coalescer.note(path, _Note())
        return True

    def unwatch(self, source: Source) -> None:
        path = source.path
        directory = os.path.dirname(path)
        with self._schedule_lock:
            with self._lock:
                if self._sources.pop(path, None) is None:
                    return
                entry = self._dirs.get(directory)
                if entry is None:
                    return
                entry.files.discard(path)
                if entry.files:
                    return
                del self._dirs[directory]
            if entry.watch is not None:
                self._unschedule(entry.watch)

    def watching(self) -> frozenset[Source]:
        with self._lock:
            return frozenset(self._sources.values())

    def watched_directories(self) -> int:
        """How many directory watches are active."""
        with self._lock:
            return len(self._dirs)

    def failures(self) -> list[TrackerFailure]:
        with self._lock:
            return list(self._failures)

    def close(self) -> None:
        with self._schedule_lock, self._lock:
            if self._closed:
                return
            self._closed = True
        logging.getLogger(_OVERFLOW_LOGGER).removeHandler(self._overflow)
        self._observer.stop()
        if threading.current_thread() is not self._observer:
            self._observer.join(timeout=5)
        self._coalescer.close()  # what was seen before closing is still delivered

    # -- beyond the port ------------------------------------------------------------------------

    def rescan(self) -> None:
        """Report every watched file (events may have been lost)."""
        with self._lock:
            paths = list(self._sources)
        for path in paths:
            self._coalescer.note(path, _Note())

    def idle(self, timeout: float = 5.0) -> bool:
        """Wait until every change seen so far has been delivered; False on timeout."""
        return self._coalescer.idle(timeout)

    # -- events (watchdog's dispatcher thread) --------------------------------------------------

    def _on_event(self, event: FileSystemEvent) -> None:
        try:
            self._note_event(event)
        except Exception as exc:  # recorded, never swallowed
            _log.exception("handling %r failed", event)
            self._record(TrackerFailure((os.fsdecode(event.src_path),), exc))

    def _note_event(self, event: FileSystemEvent) -> None:
        src = os.fsdecode(event.src_path)
        dest = os.fsdecode(event.dest_path) if isinstance(event, FileSystemMovedEvent) else ""
        notes: list[tuple[str, _Note]] = []
        with self._lock:
            if event.is_directory:
                if isinstance(event, DirDeletedEvent | DirMovedEvent):
                    notes = [(p, _Note(gone_seen=True)) for p in self._sources if _under(p, src)]
                    entry = self._dirs.get(src)
                    if entry is not None and isinstance(event, DirDeletedEvent):
                        # The directory itself is gone and its watch has ended: forget it, so
                        # that watching one of its files again starts a new watch.
                        del self._dirs[src]
                        for path in entry.files:
                            self._sources.pop(path, None)
                        if entry.watch is not None:
                            self._dead.append(entry.watch)
            else:
                away = isinstance(event, FileDeletedEvent | FileMovedEvent)
                if src in self._sources:
                    notes.append((src, _Note(gone_seen=away)))
                if dest:
                    if dest in self._sources:
                        notes.append((dest, _Note()))
                    elif src in self._sources:
                        notes.append((dest, _Note(renamed_from=src)))
        for path, note in notes:
            self._coalescer.note(path, note)

    # -- delivery (the coalescer's thread) ------------------------------------------------------

    def _deliver(self, batch: dict[str, _Note]) -> None:
        with self._schedule_lock:
            self._reap_dead_watches()
        changes: list[SourceChange] = []
        for path, note in batch.items():
            with self._lock:
                source = self._sources.get(path)
                old = self._sources.get(note.renamed_from) if note.renamed_from else None
            if source is None and note.gone_seen and note.renamed_from is None:
                # Its directory's watch ended (the directory was removed): still report it.
                source = FilesystemSource(filesystem_id=self.host_filesystem_id, path=path)
            if source is not None:
                gone = note.gone_seen and _absent(path)
                changes.append(SourceChange(source, gone=gone))
            elif note.renamed_from is not None and not _absent(path):
                if old is None:
                    old = FilesystemSource(self.host_filesystem_id, note.renamed_from)
                new = FilesystemSource(filesystem_id=self.host_filesystem_id, path=path)
                changes.append(SourceChange(new, renamed_from=old))
        if changes and self._on_changes is not None:
            self._on_changes(changes)

    def _delivery_failed(self, batch: dict[str, _Note], exc: BaseException) -> None:
        self._record(TrackerFailure(tuple(batch), exc))

    def _reap_dead_watches(self) -> None:
        """Unschedule the watches of removed directories (the caller holds the schedule lock)."""
        with self._lock:
            dead, self._dead = self._dead, []
        for watch in dead:
            self._unschedule(watch)

    def _unschedule(self, watch: ObservedWatch) -> None:
        # KeyError: watchdog already dropped it (its emitter stopped when the directory went).
        with contextlib.suppress(KeyError):
            self._observer.unschedule(watch)

    def _record(self, failure: TrackerFailure) -> None:
        _log.error("file tracking failed for %s: %s", failure.paths, failure.error)
        with self._lock:
            self._failures.append(failure)
        if self._on_error is not None:
            try:
                self._on_error(failure)
            except Exception:  # the reporter itself failed: the log keeps it
                _log.exception("the on_error callback failed")
