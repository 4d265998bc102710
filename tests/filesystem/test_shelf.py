"""The chat's written text in a private file between snapshots (decision 0143)."""

from __future__ import annotations

import os
import stat

import pytest

from selfctx.adapters.filesystem.shelf import FileShelf
from selfctx.domain.infrastructure import ShelfLost


def test_the_shelf_holds_bytes_in_a_private_file_and_cuts_what_follows_a_write() -> None:
    shelf = FileShelf()
    shelf.keep(0, '{"a":"é"}'.encode())
    shelf.keep(4, b"x")  # what followed byte 4 is gone
    assert shelf.read(5) == b'{"a"x'
    assert shelf.read(2) == b'{"'
    mode = os.fstat(shelf._file.fileno()).st_mode
    assert stat.S_IMODE(mode) == 0o600 and os.fstat(shelf._file.fileno()).st_nlink == 0
    assert os.fstat(shelf._file.fileno()).st_size == 5
    with pytest.raises(ShelfLost):
        shelf.read(6)  # more than it holds
    with pytest.raises(ValueError):
        shelf.keep(6, b"")


def test_a_shelf_whose_file_fails_loses_its_text_once_then_keeps_it_in_memory() -> None:
    shelf = FileShelf()
    shelf.keep(0, b"abc")
    shelf._file.close()  # the descriptor gone: a read is lost, a write moves to memory
    with pytest.raises(ShelfLost):
        shelf.read(3)
    with pytest.raises(ShelfLost):
        shelf.keep(3, b"def")
    shelf.keep(0, b"ghi")
    assert shelf.read(3) == b"ghi" and shelf._file is None
