"""Whole reads and writes at an offset of a private file (the unnamed 0600 files that hold a
session's written chat, decision 0143, and the prompt's older texts, decision 0128)."""

from __future__ import annotations

import os

__all__ = ["read_at", "write_at"]


def write_at(fd: int, data: bytes, at: int) -> None:
    """Write all of ``data`` at byte ``at``. Each pass writes at least a byte, or raises
    ``OSError``."""
    done = 0
    while done < len(data):
        written = os.pwrite(fd, memoryview(data)[done:], at + done)
        if written <= 0:
            raise OSError("the file took no bytes")
        done += written


def read_at(fd: int, begin: int, end: int) -> bytes:
    """The bytes from ``begin`` to ``end``. Each pass reads at least a byte, or raises
    ``OSError`` (a file that ends early too)."""
    parts, at = [], begin
    while at < end:
        chunk = os.pread(fd, end - at, at)
        if not chunk:
            raise OSError("the file ended early")
        parts.append(chunk)
        at += len(chunk)
    return b"".join(parts)
