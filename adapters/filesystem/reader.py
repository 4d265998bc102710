"""Reading host files safely: canonical paths, confined to allowed roots (also while the files
change), links resolved as the agent sees them, no surprises from special files or huge files."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
from collections.abc import Callable, Sequence

from selfctx.adapters.filesystem.walk import Walked, walk
from selfctx.application.ports.files import (
    FileReader,
    FileRestorer,
    FileSnapshot,
    SourceChanged,
    SourceMissing,
    SourceOutsideRoots,
    SourceUnreachable,
)
from selfctx.domain.hashing import stat_file_hash
from selfctx.domain.mounts import MountTable, normalize_absolute
from selfctx.domain.objects import FilesystemSource, Source

__all__ = ["LocalFileReader"]

_CHUNK = 1 << 20
_CLOEXEC: int = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW: int = getattr(os, "O_NOFOLLOW", 0)


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


class LocalFileReader(FileReader, FileRestorer):
    """Reads files of the host filesystem under the allowed roots; refuses everything else.

    A source on another filesystem (a container's) is never read on the host, even if a file with
    the same path exists here (docs/specification.md §3). Paths are resolved one component at a
    time, following links only where the walk has read them (:mod:`.walk`), so that no change to the
    files meanwhile can lead a read outside the roots. With ``mounts``, a file under a mount is
    resolved as the agent sees it: its links point at paths of the agent's namespace.

    A file larger than the limit is not read at all: its size and modification time stand for it
    (decision 0025).

    It also writes files back for a rollback (:meth:`restore`), under the same roots and through
    the same walk: the write lands in the directory the walk holds, by name, never through a link.
    """

    def __init__(
        self,
        host_filesystem_id: str,
        roots: Sequence[str] | None = None,
        *,
        on_stat: Callable[[str, int], None] | None = None,
        mounts: MountTable | None = None,
    ) -> None:
        self.host_filesystem_id = host_filesystem_id
        self.roots = tuple(os.path.realpath(normalize_absolute(r)) for r in roots) if roots else ()
        """Canonical allowed roots; empty means the whole host filesystem."""
        self.on_stat = on_stat
        """Told ``(canonical path, st_dev)`` of every file read, from the stat the read makes
        anyway (the mount detector of ``selfctx.adapters.mounts`` listens here)."""
        self.mounts = mounts
        """The agent's mount table: links under a mount resolve in the agent's namespace."""
        self._host_only = MountTable(host_filesystem_id)

    def _check_roots(self, source: Source, real: str) -> None:
        if self.roots and not any(_within(real, root) for root in self.roots):
            raise SourceOutsideRoots(
                source, f"resolves to {real}, outside the allowed roots {list(self.roots)}"
            )

    def _walk(self, source: Source) -> Walked:
        """Resolve a host source: in the agent's namespace if a mount holds it, else the host's.
        A path the OS cannot be asked about (a lone surrogate: ``UnicodeEncodeError``) is
        unreachable, like any other failure of the walk (a typed error)."""
        host = FilesystemSource(source.filesystem_id, normalize_absolute(source.path))
        try:
            if self.mounts is not None and self.mounts.covering(host) is not None:
                return walk(self.mounts.display_path(host), self.mounts, self.host_filesystem_id)
            return walk(host.path, self._host_only, self.host_filesystem_id)
        except ValueError as exc:
            raise SourceUnreachable(source, f"the path cannot be used here: {exc}") from None

    def _resolve(self, source: Source) -> Walked:
        """Walk ``source`` and check where it ends; the caller closes the result."""
        try:
            walked = self._walk(source)
        except OSError as exc:
            raise SourceUnreachable(source, os.strerror(exc.errno or errno.EIO)) from None
        try:
            if walked.state == "foreign":
                raise SourceUnreachable(
                    source,
                    f"it leads to {walked.agent_path} on another filesystem, not readable here",
                )
            if walked.state == "loop":
                raise SourceUnreachable(source, os.strerror(errno.ELOOP))
            assert walked.host_path is not None
            self._check_roots(source, walked.host_path)
        except BaseException:
            walked.close()
            raise
        return walked

    def canonical(self, source: Source) -> Source:
        if source.filesystem_id != self.host_filesystem_id:
            return source
        walked = self._resolve_for_identity(source)
        if walked.state == "foreign" and self.mounts is not None:
            # A link to a file of the agent's own filesystem: that file is what the path names.
            return self.mounts.to_source(walked.agent_path)
        assert walked.host_path is not None
        self._check_roots(source, walked.host_path)
        return FilesystemSource(filesystem_id=source.filesystem_id, path=walked.host_path)

    def _resolve_for_identity(self, source: Source) -> Walked:
        try:
            walked = self._walk(source)
        except OSError as exc:
            raise SourceUnreachable(source, os.strerror(exc.errno or errno.EIO)) from None
        walked.close()
        if walked.state == "loop":
            raise SourceUnreachable(source, os.strerror(errno.ELOOP))
        return walked

    def read(self, source: Source, max_bytes: int) -> FileSnapshot:
        if source.filesystem_id != self.host_filesystem_id:
            raise SourceUnreachable(source, "it lives on another filesystem, not readable here")
        walked = self._resolve(source)
        try:
            if walked.state == "missing":
                raise SourceMissing(source, "the file does not exist")
            if walked.state == "no_parent":
                raise SourceUnreachable(source, "its directory is not there")
            if walked.state == "denied":
                raise SourceUnreachable(source, "permission denied")
            assert walked.st is not None and walked.host_path is not None
            # Look before opening: opening a device or a FIFO can have effects of its own.
            if not stat.S_ISREG(walked.st.st_mode):
                raise SourceUnreachable(source, f"it is {_kind(walked.st.st_mode)}")
            fd = self._open(source, walked)
        finally:
            walked.close()
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise SourceUnreachable(source, f"it is {_kind(info.st_mode)}")
            if self.on_stat is not None:
                self.on_stat(walked.host_path, info.st_dev)
            return _snapshot(fd, info, max_bytes)
        except OSError as exc:
            raise SourceUnreachable(source, os.strerror(exc.errno or errno.EIO)) from None
        finally:
            os.close(fd)

    def _open(self, source: Source, walked: Walked) -> int:
        """A readable descriptor of exactly the file the walk found."""
        # O_NONBLOCK: should it be a FIFO after all, do not wait for a writer.
        flags = os.O_RDONLY | os.O_NONBLOCK | _CLOEXEC | _NOFOLLOW
        assert walked.st is not None and walked.host_path is not None
        try:
            if walked.fd is not None:
                try:
                    # Reopening the walk's own descriptor: the same file, whatever its path shows.
                    return os.open(f"/proc/self/fd/{walked.fd}", flags & ~_NOFOLLOW)
                except FileNotFoundError:
                    pass  # no /proc: open it by name and check that it is the same file
            if walked.parent_fd is not None:
                fd = os.open(walked.name, flags, dir_fd=walked.parent_fd)
            else:
                fd = os.open(walked.host_path, flags)
        except PermissionError:
            raise SourceUnreachable(source, "permission denied") from None
        except OSError as exc:
            raise SourceUnreachable(source, os.strerror(exc.errno or errno.EIO)) from None
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (walked.st.st_dev, walked.st.st_ino):
            os.close(fd)
            raise SourceUnreachable(source, "it changed while it was opened")
        return fd

    def restore(
        self, source: Source, data: bytes | None, expected_hash: str | None, max_bytes: int
    ) -> None:
        if source.filesystem_id != self.host_filesystem_id:
            raise SourceUnreachable(source, "it lives on another filesystem, not written here")
        path = normalize_absolute(source.path)
        folder, name = os.path.split(path)
        parent = self._resolve(FilesystemSource(source.filesystem_id, folder or "/"))
        try:
            if parent.state != "found" or parent.st is None or not stat.S_ISDIR(parent.st.st_mode):
                reason = "permission denied" if parent.state == "denied" else None
                raise SourceUnreachable(source, reason or "its directory is not there")
            assert parent.fd is not None and parent.host_path is not None
            self._check_roots(source, os.path.join(parent.host_path, name))
            current, mode = self._current(source, parent.fd, name, max_bytes)
            if current != expected_hash:
                raise SourceChanged(source, expected_hash, current)
            try:
                if data is None:
                    os.unlink(name, dir_fd=parent.fd)
                else:
                    _replace(parent.fd, name, data, mode)
            except PermissionError:
                raise SourceUnreachable(source, "permission denied") from None
            except OSError as exc:
                raise SourceUnreachable(source, os.strerror(exc.errno or errno.EIO)) from None
        finally:
            parent.close()

    def _current(
        self, source: Source, dir_fd: int, name: str, max_bytes: int
    ) -> tuple[str | None, int]:
        """The file's hash (by the reading rule) and mode; (None, 0o644) when it is absent."""
        try:
            st = os.lstat(name, dir_fd=dir_fd)
        except FileNotFoundError:
            return None, 0o644
        if not stat.S_ISREG(st.st_mode):
            raise SourceUnreachable(source, f"it is {_kind(st.st_mode)}, not written over")
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | _CLOEXEC | _NOFOLLOW, dir_fd=dir_fd)
        except PermissionError:
            raise SourceUnreachable(source, "permission denied") from None
        try:
            info = os.fstat(fd)
            return _snapshot(fd, info, max_bytes).file_hash, stat.S_IMODE(info.st_mode)
        finally:
            os.close(fd)


def _replace(dir_fd: int, name: str, data: bytes, mode: int) -> None:
    """Write ``data`` to a new file beside ``name`` and rename it over ``name``: a reader sees
    the old file or the new one, never half of one."""
    temporary = f".{name}.selfctx-restore-{os.getpid()}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _CLOEXEC | _NOFOLLOW
    fd = os.open(temporary, flags, mode, dir_fd=dir_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, mode)  # the umask does not decide the restored file's mode
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=dir_fd)
        raise


def _snapshot(fd: int, info: os.stat_result, max_bytes: int) -> FileSnapshot:
    """Read at most ``max_bytes + 1`` bytes. A file over the limit is not read in full, however
    large it is (a 12 GB sparse file was once hashed on every read; decision 0025): its size and
    modification time stand in for its bytes."""
    if info.st_size > max_bytes:
        return _too_large(info)
    digest = hashlib.sha256()
    chunks: list[bytes] = []
    size = 0
    while size <= max_bytes:
        chunk = os.read(fd, min(_CHUNK, max_bytes + 1 - size))
        if not chunk:
            break
        digest.update(chunk)
        chunks.append(chunk)
        size += len(chunk)
    if size > max_bytes:  # it grew after the stat
        return _too_large(os.fstat(fd))
    return FileSnapshot(data=b"".join(chunks), size=size, file_hash=digest.hexdigest())


def _too_large(info: os.stat_result) -> FileSnapshot:
    return FileSnapshot(
        data=None, size=info.st_size, file_hash=stat_file_hash(info.st_size, info.st_mtime_ns)
    )
