"""One watcher per file and store on a machine: processes claim the files they watch.

Several servers on one machine that share a store (agents of one team on one XTDB node) often
hold the same files. Each used to watch them all, so every edit was read, hashed and decided once
per server, and all but one found the version already written (decision 0066). Now a server
watches a file only if it *claims* it: a write lock on one byte of a lock file per store, at an
offset given by the file's source (Linux open-file-description locks: they belong to this open
file, and go away when the process does, however it ends). The others leave the file to the
claimant and learn its versions from the store; they try again to claim what they wait for every
few seconds, so that a file whose watcher exited is watched again.

The lock file is the owner's alone (0600, in a 0700 folder), like every file the project writes.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import struct
import threading
from pathlib import Path

__all__ = ["WatchClaims", "claims_path"]

_FLOCK = "hh4xqqi4x"
"""``struct flock`` on 64-bit Linux: type, whence, (padding), start, length, pid, (padding)."""
_OFD_SETLK = getattr(fcntl, "F_OFD_SETLK", None)


def claims_path(store: str) -> Path:
    """The lock file of a store (its address, as ``--store`` names it), under
    ``$XDG_STATE_HOME/self-context-manager/watch`` (``~/.local/state/...``)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    name = hashlib.sha256(store.encode("utf-8")).hexdigest()[:16]
    return Path(base) / "self-context-manager" / "watch" / f"{name}.lock"


def _offset(key: str) -> int:
    """Where a file's byte is: 62 bits of its key's SHA-256 (files never share one)."""
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big") >> 2


class WatchClaims:
    """The claims of this process on one store's lock file (thread-safe)."""

    def __init__(self, path: Path) -> None:
        if _OFD_SETLK is None:
            raise OSError(errno.ENOSYS, "this system has no open-file-description locks")
        for folder in (path.parent.parent, path.parent):
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            if folder.stat().st_uid == os.geteuid():
                folder.chmod(0o700)
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        self._lock = threading.Lock()
        self._held: set[int] = set()

    def _set(self, kind: int, offset: int) -> bool:
        request = struct.pack(_FLOCK, kind, os.SEEK_SET, offset, 1, 0)
        assert _OFD_SETLK is not None  # checked at construction
        try:
            fcntl.fcntl(self._fd, int(_OFD_SETLK), request)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                return False
            raise
        return True

    def claim(self, key: str) -> bool:
        """Claim the file ``key`` names; False if another open of the lock file (another
        process, or another client in this one) holds it."""
        offset = _offset(key)
        with self._lock:
            if offset in self._held:
                return True
            if self._fd < 0 or not self._set(fcntl.F_WRLCK, offset):
                return False
            self._held.add(offset)
            return True

    def release(self, key: str) -> None:
        """Give the file up (another may claim it)."""
        offset = _offset(key)
        with self._lock:
            if offset in self._held and self._fd >= 0:
                self._set(fcntl.F_UNLCK, offset)
                self._held.discard(offset)

    def holds(self, key: str) -> bool:
        with self._lock:
            return _offset(key) in self._held

    def close(self) -> None:
        """Give every claim up (closing the lock file does)."""
        with self._lock:
            fd, self._fd = self._fd, -1
            self._held.clear()
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
