"""The text a session's last chat snapshot wrote, kept in a private file between snapshots
(``selfctx.domain.infrastructure.TextShelf``; decision 0143), as the prompt's older texts are
(decision 0128)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Any

from selfctx.adapters.privatefile import read_at, write_at
from selfctx.domain.infrastructure import ShelfLost

__all__ = ["FileShelf"]


class FileShelf:
    """A :class:`~selfctx.domain.infrastructure.TextShelf` in a file with no name (unlinked as
    it is made), readable by its owner only (0600), made at the first write and closed when the
    session lets it go. A file that cannot be made or written leaves the bytes in memory from
    then on (nothing lost); one that cannot be read back raises ``ShelfLost`` (the snapshot
    writes the chat's text again from its messages)."""

    __slots__ = ("_file", "_memory", "_size")

    def __init__(self) -> None:
        self._file: Any = None
        self._memory: bytearray | None = None
        """The bytes, once the file failed (None: they are in the file)."""
        self._size = 0

    def keep(self, at: int, data: bytes) -> None:
        if not 0 <= at <= self._size:
            raise ValueError(f"keep at {at}: the shelf holds {self._size} bytes")
        if self._memory is None:
            try:
                self._write(at, data)
                self._size = at + len(data)
                return
            except (OSError, ValueError):  # no file: the text held so far is lost with it
                self._close()
                self._memory = bytearray()
                self._size = 0
                raise ShelfLost("the chat's text file could not be written") from None
        del self._memory[at:]
        self._memory += data
        self._size = len(self._memory)

    def _write(self, at: int, data: bytes) -> None:
        if self._file is None:
            # 0600, unlinked; held as long as the session (closed when it is let go)
            self._file = tempfile.TemporaryFile(prefix="selfctx-chat-")  # noqa: SIM115
        fd = self._file.fileno()
        write_at(fd, data, at)
        if at + len(data) < self._size:
            os.ftruncate(fd, at + len(data))

    def read(self, size: int) -> bytes:
        if not 0 <= size <= self._size:
            raise ShelfLost(f"read of {size} bytes: the shelf holds {self._size}")
        if self._memory is not None:
            return bytes(self._memory[:size])
        try:
            return read_at(self._file.fileno(), 0, size)
        except (OSError, ValueError, AttributeError) as exc:
            raise ShelfLost(str(exc)) from exc

    def _close(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None
