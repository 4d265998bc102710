"""The indexing protocol's decisions (docs/specification.md §3) on their own."""

from __future__ import annotations

import hashlib

import pytest

from selfctx.domain.indexing import Outcome, decide_deletion, decide_discovery, decide_full_index
from selfctx.domain.objects import FileObject, FilesystemSource

SOURCE = FilesystemSource("host", "/p/a.py")
ELSEWHERE = FilesystemSource("host", "/p/b.py")


def text(content: str, source: FilesystemSource = SOURCE) -> FileObject:
    raw = content.encode()
    return FileObject.build(source, content=content, file_hash=hashlib.sha256(raw).hexdigest())


STUB = FileObject.stub(SOURCE)
V1 = text("v1")
V2 = text("v2")
DELETED = V1.deleted()
BINARY = FileObject.build(
    SOURCE, content=None, file_hash=hashlib.sha256(b"v1").hexdigest(), content_status="binary"
)


def test_versions_have_the_expected_shape() -> None:
    assert (STUB.is_stub, STUB.is_deleted, STUB.file_hash, STUB.char_count) == (
        True,
        False,
        None,
        0,
    )
    assert (DELETED.is_stub, DELETED.is_deleted, DELETED.content, DELETED.file_hash) == (
        False,
        True,
        None,
        None,
    )
    assert DELETED.id == V1.id == STUB.id
    assert len({STUB.object_hash, V1.object_hash, DELETED.object_hash, BINARY.object_hash}) == 4


@pytest.mark.parametrize(
    ("stored", "observed", "outcome"),
    [
        (None, V1, Outcome.CREATED),
        (STUB, V1, Outcome.UPDATED),  # a stub is upgraded
        (V1, V2, Outcome.UPDATED),  # the file changed
        (DELETED, V1, Outcome.UPDATED),  # it came back
        (V1, V1, Outcome.UNCHANGED),
        (V2, V2, Outcome.UNCHANGED),
        (BINARY, V1, Outcome.UPDATED),  # same bytes, a different verdict on them
        (V1, BINARY, Outcome.UPDATED),
        (BINARY, BINARY, Outcome.UNCHANGED),
    ],
)
def test_full_indexing(stored: FileObject | None, observed: FileObject, outcome: Outcome) -> None:
    decided, version = decide_full_index(stored, observed)
    assert decided is outcome
    assert version == (None if outcome is Outcome.UNCHANGED else observed)


def test_full_indexing_refuses_versions_of_different_objects() -> None:
    with pytest.raises(ValueError, match="is not the object"):
        decide_full_index(text("x", ELSEWHERE), V1)


@pytest.mark.parametrize("stored", [STUB, V1, DELETED, BINARY])
def test_discovery_never_overwrites(stored: FileObject) -> None:
    assert decide_discovery(stored, STUB) == (Outcome.UNCHANGED, None)


def test_discovery_creates_a_stub() -> None:
    assert decide_discovery(None, STUB) == (Outcome.CREATED, STUB)
    with pytest.raises(ValueError):
        decide_discovery(FileObject.stub(ELSEWHERE), STUB)


@pytest.mark.parametrize("stored", [V1, STUB, BINARY])
def test_a_confirmed_delete_writes_a_null_content_version(stored: FileObject) -> None:
    outcome, version = decide_deletion(stored)
    assert outcome is Outcome.UPDATED
    assert version == stored.deleted()
    assert version is not None and (version.content, version.content_status) == (None, "deleted")
    assert version.source == stored.source


@pytest.mark.parametrize("stored", [None, DELETED])
def test_a_delete_already_recorded_writes_nothing(stored: FileObject | None) -> None:
    assert decide_deletion(stored) == (Outcome.UNCHANGED, None)
