"""Reading host files safely: canonical paths, confined to allowed roots, no surprises from
special files."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Callable, Sequence

from selfctx.application.ports.files import (
    FileReader,
    FileSnapshot,
    SourceMissing,
    SourceOutsideRoots,
    SourceUnreachable,
)
from selfctx.domain.mounts import normalize_absolute
from selfctx.domain.objects import FilesystemSource, Source

__all__ = ["LocalFileReader"]

_CHUNK = 1 << 20


def _within(path: str, root: str) -> bool:
    return root == "/" or path == root or path.startswith(root + "/")


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


class LocalFileReader(FileReader):
    """Reads files of the host filesystem under the allowed roots; refuses everything else.

    A source on another filesystem (a container's) is never read on the host, even if a file
    with the same path exists here (SSOT §5.8).
    """

    def __init__(
        self,
        host_filesystem_id: str,
        roots: Sequence[str] | None = None,
        *,
        on_stat: Callable[[str, int], None] | None = None,
    ) -> None:
        self.host_filesystem_id = host_filesystem_id
        self.roots = tuple(os.path.realpath(normalize_absolute(r)) for r in roots) if roots else ()
        """Canonical allowed roots; empty means the whole host filesystem."""
        self.on_stat = on_stat
        """Told ``(canonical path, st_dev)`` of every file read, from the stat the read makes
        anyway (the mount detector of ``selfctx.adapters.mounts`` listens here)."""

    def _check_roots(self, source: Source, real: str) -> None:
        if self.roots and not any(_within(real, root) for root in self.roots):
            raise SourceOutsideRoots(
                source, f"resolves to {real}, outside the allowed roots {list(self.roots)}"
            )

    def canonical(self, source: Source) -> Source:
        if source.filesystem_id != self.host_filesystem_id:
            return source
        real = _realpath(source)
        self._check_roots(source, real)
        return FilesystemSource(filesystem_id=source.filesystem_id, path=real)

    def read(self, source: Source, max_bytes: int) -> FileSnapshot:
        if source.filesystem_id != self.host_filesystem_id:
            raise SourceUnreachable(source, "it lives on another filesystem, not readable here")
        real = _realpath(source)
        self._check_roots(source, real)
        try:
            # Look before opening: opening a device or a FIFO can have effects of its own.
            mode = os.stat(real).st_mode
            if not stat.S_ISREG(mode):
                raise SourceUnreachable(source, f"it is {_kind(mode)}")
            # O_NONBLOCK: should it have been swapped for a FIFO since, do not wait for a writer.
            fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except (FileNotFoundError, NotADirectoryError):
            if os.path.isdir(os.path.dirname(real)):
                raise SourceMissing(source, "the file does not exist") from None
            raise SourceUnreachable(source, "its directory is not there") from None
        except PermissionError:
            raise SourceUnreachable(source, "permission denied") from None
        except OSError as exc:
            raise SourceUnreachable(source, os.strerror(exc.errno or errno.EIO)) from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise SourceUnreachable(source, f"it is {_kind(info.st_mode)}")
            if self.on_stat is not None:
                self.on_stat(real, info.st_dev)
            digest = hashlib.sha256()
            chunks: list[bytes] = []
            size = 0
            while chunk := os.read(fd, _CHUNK):
                digest.update(chunk)
                size += len(chunk)
                if size <= max_bytes:
                    chunks.append(chunk)
                else:
                    chunks.clear()
            data = b"".join(chunks) if size <= max_bytes else None
            return FileSnapshot(data=data, size=size, file_hash=digest.hexdigest())
        except OSError as exc:
            raise SourceUnreachable(source, os.strerror(exc.errno or errno.EIO)) from None
        finally:
            os.close(fd)


def _realpath(source: Source) -> str:
    """``os.path.realpath``, its failures typed: a link swapped while it resolves (``readlink``
    of what ``lstat`` saw as a link), a path the OS cannot encode (a lone surrogate)."""
    try:
        return os.path.realpath(source.path)
    except OSError as exc:
        raise SourceUnreachable(source, os.strerror(exc.errno or errno.EIO)) from None
    except ValueError as exc:
        raise SourceUnreachable(source, f"the path cannot be used here: {exc}") from None
