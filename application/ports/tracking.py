"""The source tracker port: watchers that tell the application when a source may have changed
(docs/specification.md §3, Tracking).

A tracker delivers *hints*: "look at this source again". The application re-reads the source and
runs full indexing, so a spurious hint costs one read and writes nothing, and a missed one is
caught by the re-hash pass (on resume, and on demand). Deliveries happen on the tracker's own
thread; an exception raised while handling them is recorded in :meth:`SourceTracker.failures`
(and logged), never swallowed.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence

import attrs

from selfctx.domain.objects import Source

__all__ = ["ChangeHandler", "SourceChange", "SourceTracker", "TrackerFailure"]


@attrs.frozen
class SourceChange:
    """A hint that one source may have changed."""

    source: Source
    """The source to look at again (a watched source, or the new path of a renamed one)."""
    gone: bool = False
    """The tracker saw the file unlinked or moved away (or its directory removed), and nothing
    was at the path when it delivered the hint: a confirmed deletion even if the directory is
    gone too (docs/specification.md §3, Tracking)."""
    renamed_from: Source | None = None
    """Set when ``source`` is the new path of a watched source that was renamed."""


@attrs.frozen
class TrackerFailure:
    """An error raised while a tracker handled events or delivered changes."""

    paths: tuple[str, ...]
    """The paths being handled when it happened (empty if none in particular)."""
    error: BaseException = attrs.field(eq=False)
    """The exception itself, with its traceback."""


ChangeHandler = Callable[[Sequence[SourceChange]], None]
"""Receives coalesced changes, a batch at a time, on the tracker's thread."""


class SourceTracker(abc.ABC):
    """Watches sources and reports changes to one handler."""

    @abc.abstractmethod
    def start(self, on_changes: ChangeHandler) -> None:
        """Deliver every later change to ``on_changes``. Called once, before any :meth:`watch`."""

    @abc.abstractmethod
    def watch(self, source: Source) -> bool:
        """Start watching ``source`` (idempotent). Returns False when it cannot be watched from
        here: it lives on another filesystem (a container's), or its directory is gone. Never
        reads the file. A newly watched source is reported once after its watch is in place, so
        a change made between the caller's read and the watch is not lost."""

    @abc.abstractmethod
    def unwatch(self, source: Source) -> None:
        """Stop watching ``source``; unknown sources are ignored."""

    @abc.abstractmethod
    def watching(self) -> frozenset[Source]:
        """The sources being watched now."""

    @abc.abstractmethod
    def failures(self) -> list[TrackerFailure]:
        """Every error raised while handling events or delivering changes, oldest first."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop watching everything and stop the tracker's threads. Idempotent."""
