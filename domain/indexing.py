"""The indexing protocol (docs/specification.md §3) as pure decisions over the stored and the
observed version.

The caller (the application) resolves identity, reads the source, fetches the stored version and
builds the observed version with :meth:`FileObject.build`; these functions say what happens.
"""

from __future__ import annotations

import enum

from selfctx.domain.objects import FileObject

__all__ = ["Outcome", "decide_deletion", "decide_discovery", "decide_full_index"]


class Outcome(enum.StrEnum):
    """What indexing did to the stored object."""

    CREATED = "created"
    """No version existed; the first one was written."""
    UPDATED = "updated"
    """A new version was written (a stub upgraded, the file changed, or it came back)."""
    UNCHANGED = "unchanged"
    """Nothing was written."""


def _check_same(stored: FileObject | None, observed: FileObject) -> None:
    if stored is not None and stored.id != observed.id:
        raise ValueError(f"stored version {stored.id} is not the object {observed.id}")


def decide_full_index(
    stored: FileObject | None, observed: FileObject
) -> tuple[Outcome, FileObject | None]:
    """Full indexing, step 3: ``created``, ``updated`` (stub upgraded or file_hash differs) or
    ``unchanged`` (same file_hash: nothing to write). Returns the version to write, if any."""
    _check_same(stored, observed)
    if stored is None:
        return Outcome.CREATED, observed
    if stored.file_hash is None or stored.file_hash != observed.file_hash:
        return Outcome.UPDATED, observed
    if stored.content_status != observed.content_status:
        # Same bytes, different verdict (e.g. the size cap changed): record the new reading.
        return Outcome.UPDATED, observed
    if stored.reported_by is not None and observed.reported_by is None:
        # A session's report, now read from the source: the file's own version (0031).
        return Outcome.UPDATED, observed
    return Outcome.UNCHANGED, None


def decide_discovery(
    stored: FileObject | None, stub: FileObject
) -> tuple[Outcome, FileObject | None]:
    """Discovery, step 2: a stub when nothing is stored; otherwise nothing (never overwrites)."""
    _check_same(stored, stub)
    if stored is None:
        return Outcome.CREATED, stub
    return Outcome.UNCHANGED, None


def decide_deletion(stored: FileObject | None) -> tuple[Outcome, FileObject | None]:
    """A confirmed delete: a new version with null content, unless it is already recorded (or
    there is nothing to delete). History stays."""
    if stored is None or stored.is_deleted:
        return Outcome.UNCHANGED, None
    return Outcome.UPDATED, stored.deleted()
