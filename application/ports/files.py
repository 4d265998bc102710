"""The file reader port: how the application reads a source's bytes (docs/specification.md §3, full
indexing)."""

from __future__ import annotations

import abc

import attrs

from selfctx.domain.errors import SelfContextError
from selfctx.domain.objects import Source


@attrs.frozen
class FileSnapshot:
    """What one read of a source found."""

    data: bytes | None
    """The raw bytes, or None when the file is larger than the reader's limit."""
    size: int
    """Size in bytes."""
    file_hash: str
    """SHA-256 of the raw bytes (computed while streaming when ``data`` is None)."""


class SourceUnavailable(SelfContextError):
    """A source could not be read. ``reason`` says why in a few words."""

    kind = "source_unavailable"

    def __init__(self, source: Source, reason: str) -> None:
        self.source = source
        self.reason = reason
        super().__init__(
            f"cannot read {source.path} (filesystem {source.filesystem_id[:12]}): {reason}"
        )


class SourceMissing(SourceUnavailable):
    """The source is confirmed deleted: its directory exists, the file does not."""

    kind = "source_missing"


class SourceUnreachable(SourceUnavailable):
    """Whether the source exists cannot be told from here: the mount is gone, permission is
    denied, or it lives on a filesystem this client does not read (an orphaned object)."""

    kind = "source_unreachable"


class SourceOutsideRoots(SourceUnreachable):
    """The path (or a symlink on it) leads outside the roots this client may read."""

    kind = "path_outside_roots"


class FileReader(abc.ABC):
    """Reads files for full indexing: agent reads without content, activation of stubs, resume
    reconciliation, and watcher events."""

    @abc.abstractmethod
    def read(self, source: Source, max_bytes: int) -> FileSnapshot:
        """Read ``source``: its bytes when no larger than ``max_bytes``, its size and hash.

        Raises :class:`SourceMissing` when the file is confirmed deleted, and
        :class:`SourceUnreachable` (or a subclass) when it cannot be read from this client.
        """

    def canonical(self, source: Source) -> Source:
        """The source with its path canonicalised on the real filesystem (symlinks and ``..``
        resolved) and checked against the allowed roots; the default returns it unchanged."""
        return source


class SourceChanged(SelfContextError):
    """A file was not written back: what is on disk is not the version the caller expected
    (someone changed it since)."""

    kind = "source_changed"

    def __init__(self, source: Source, expected: str | None, found: str | None) -> None:
        self.source = source
        self.expected = expected
        self.found = found
        now = "absent" if found is None else f"sha256 {found[:12]}…"
        want = "absent" if expected is None else f"sha256 {expected[:12]}…"
        super().__init__(f"{source.path} changed on disk: it is {now}, expected {want}")


class FileRestorer(abc.ABC):
    """Writes files back to what they were (a rollback): only where reads are allowed, and
    only over the content the caller expects to find there."""

    @abc.abstractmethod
    def restore(
        self, source: Source, data: bytes | None, expected_hash: str | None, max_bytes: int
    ) -> None:
        """Make ``source`` hold ``data`` (None: delete it), if it now holds bytes whose hash is
        ``expected_hash`` (by the reading rule, ``max_bytes`` being the reading limit; None: if
        it does not exist). The write replaces the file whole (a reader never sees half of it);
        its directory must exist.

        Raises :class:`SourceChanged` when the file is not as expected, and
        :class:`SourceUnreachable` (or :class:`SourceOutsideRoots`) when it may not or cannot be
        written from here. Nothing is written when it raises.
        """
