"""What a resume reads, and when (decision 0104): the snapshot once, with its chat; the files'
sources while the store still sends the tool calls. On real files, over the store
``store_factory`` chooses, wrapped so that its reads wait on another thread as a database's do."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

import selfctx.application.runner as runner
from selfctx.adapters.filesystem.reader import LocalFileReader
from selfctx.application.persistence import unpack_toolcalls
from selfctx.application.ports.files import FileSnapshot
from selfctx.application.ports.store import Document, ObjectStore
from selfctx.application.service import ContextService
from selfctx.domain.objects import Source
from tests.filesystem.conftest import MakeFsService
from tests.filesystem.helpers import write
from tests.support import WrappedStore

WAIT = 60.0
"""Seconds the tool calls' read waits for a source to be read before it gives up (a bound, so
that a resume which reads them one after the other fails the test instead of hanging it)."""


class _WaitingStore(WrappedStore):
    """Reads as a database's: on the loader's threads. Counts the whole documents read by id;
    the tool calls' metadata is held back until ``release`` is set (or ``WAIT`` has passed)."""

    reads_wait = True

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.read: list[str] = []
        self.requests: list[list[str]] = []
        self.release = threading.Event()
        self.released: bool | None = None
        """Whether the tool calls' read saw ``release`` set (None: it was not made)."""
        self.hold = False

    def get(self, object_id: str) -> Document | None:
        self.read.append(object_id)
        self.requests.append([object_id])
        return super().get(object_id)

    def get_many(self, object_ids: Iterable[str]) -> dict[str, Document]:
        ids = list(object_ids)
        self.read += ids
        self.requests.append(ids)
        return super().get_many(ids)

    def get_many_fields(
        self, object_ids: Iterable[str], fields: Sequence[str]
    ) -> dict[str, Document]:
        ids = list(object_ids)
        if self.hold and ids and "content_length" in fields:
            self.released = self.release.wait(WAIT)
        return {
            i: {k: v for k, v in doc.items() if k == "xt/id" or k in fields}
            for i, doc in super().get_many(ids).items()
        }


@pytest.fixture
def sid(ns: str) -> str:
    return f"{ns}reads"


def _session(
    make_fs_service: MakeFsService, workspace: Path, sid: str
) -> tuple[dict[str, str], ObjectStore]:
    """A session of two files and three tool calls, stored; its ids, and the store."""
    first = make_fs_service(track=False)
    first.start_session(sid)
    ids = {}
    for name in ("a.py", "b.py"):
        write(workspace / name, f"# {name}\n")
        ids[name] = first.index_file(sid, str(workspace / name)).object_id
    for n in range(3):
        first.record_tool_call(
            sid, f"{sid}-call-{n}", tool="bash", args={"cmd": "ls"}, output="x" * n
        )
    first.close()
    return ids, first.store


def test_a_resume_reads_the_snapshot_once_and_its_chat_with_it(
    make_fs_service: MakeFsService, workspace: Path, sid: str
) -> None:
    _, store = _session(make_fs_service, workspace, sid)
    waiting = _WaitingStore(store)
    make_fs_service(track=False, store=waiting).open_session(sid)
    snapshot, chat = f"session:{sid}", f"chat:{sid}"
    assert waiting.read.count(snapshot) == 1  # not once more to learn that the session exists
    assert [r for r in waiting.requests if snapshot in r] == [[snapshot, chat]]


def test_a_resume_reads_the_files_sources_while_the_tool_calls_are_being_read(
    make_fs_service: MakeFsService,
    workspace: Path,
    sid: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ids, store = _session(make_fs_service, workspace, sid)
    write(workspace / "a.py", "# a.py, edited while nobody watched\n")
    waiting = _WaitingStore(store)
    observed: list[str] = []
    read = LocalFileReader.read

    def observing(reader: LocalFileReader, source: Source, max_bytes: int) -> FileSnapshot:
        found = read(reader, source, max_bytes)
        observed.append(source.path)
        if len(observed) == 2:  # both files read: the tool calls may come now
            waiting.release.set()
        return found

    monkeypatch.setattr(LocalFileReader, "read", observing)
    waiting.hold = True
    report = make_fs_service(track=False, store=waiting).open_session(sid)
    assert report is not None and waiting.released is True
    # each source read once, and what was read then is what the resume reconciled
    assert sorted(observed) == [str(workspace / "a.py"), str(workspace / "b.py")]
    assert report.updated == (ids["a.py"],) and report.unchanged == 1


class _CountingStore(_WaitingStore):
    """Also records each read of metadata fields, and can hide the packs (a store written by a
    version before decision 0123)."""

    def __init__(self, inner: ObjectStore, *, hide_packs: bool = False) -> None:
        super().__init__(inner)
        self.fields_requests: list[list[str]] = []
        self.hide_packs = hide_packs

    def get_many(self, object_ids: Iterable[str]) -> dict[str, Document]:
        found = super().get_many(object_ids)
        if self.hide_packs:
            return {i: doc for i, doc in found.items() if not i.startswith("calls:")}
        return found

    def get_many_fields(
        self, object_ids: Iterable[str], fields: Sequence[str]
    ) -> dict[str, Document]:
        ids = list(object_ids)
        if ids and "content_length" in fields:
            self.fields_requests.append(ids)
        return super().get_many_fields(ids, fields)


def _calls_read(store: _CountingStore) -> list[str]:
    """The tool calls a resume read one by one (their metadata fields)."""
    return [i for ids in store.fields_requests for i in ids]


def _record_calls(service: ContextService, sid: str, first: int, n: int) -> list[str]:
    ids = [f"{sid}-c{k}" for k in range(first, first + n)]
    for k, call in zip(range(first, first + n), ids, strict=True):
        service.record_tool_call(sid, call, tool="bash", args={"cmd": f"ls {k}"}, output="y" * k)
    return ids


def test_a_resume_reads_the_tool_calls_from_their_packs_and_the_rest_one_by_one(
    make_fs_service: MakeFsService,
    workspace: Path,
    sid: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Decision 0123: every PACK_CALLS tool calls, their metadata is written in one document,
    which a resume reads instead of each call; the calls after the last full block, and those
    of a pack it cannot read (a session stored before packs), are read one by one, and every
    call's metadata is what reading the call itself gives."""
    monkeypatch.setattr(runner, "PACK_CALLS", 4)
    writer = make_fs_service(track=False)
    writer.start_session(sid)
    write(workspace / "a.py", "# a\n")
    writer.index_file(sid, str(workspace / "a.py"))
    calls = _record_calls(writer, sid, 0, 11)  # blocks 0 and 1 full, 3 calls after them
    store = writer.store
    writer.close()

    packs = store.get_many([f"calls:{sid}:{b:09d}" for b in range(4)])
    assert sorted(packs) == [f"calls:{sid}:000000000", f"calls:{sid}:000000001"]
    held = {}
    for doc in packs.values():
        held.update(unpack_toolcalls(doc, sid))
    assert sorted(held) == sorted(calls[:8])
    assert held == store.get_many_fields(calls[:8], runner._TOOLCALL_METADATA)

    counting = _CountingStore(store)
    resumed = make_fs_service(track=False, store=counting)
    resumed.open_session(sid)
    assert sorted(_calls_read(counting)) == sorted(calls[8:])
    # it goes on packing where the stored calls left it: the block of calls 8-11 and 12-15
    calls += _record_calls(resumed, sid, 11, 5)
    resumed.close()
    packs = store.get_many([f"calls:{sid}:{b:09d}" for b in range(5)])
    assert len(packs) == 4
    held = {}
    for doc in packs.values():
        held.update(unpack_toolcalls(doc, sid))
    assert sorted(held) == sorted(calls)
    assert held == store.get_many_fields(calls, runner._TOOLCALL_METADATA)
    again = _CountingStore(store)
    make_fs_service(track=False, store=again).open_session(sid)
    assert _calls_read(again) == []

    # a session stored before packs: every call read one by one, the same objects held
    old = _CountingStore(store, hide_packs=True)
    service = make_fs_service(track=False, store=old)
    service.open_session(sid)
    assert sorted(_calls_read(old)) == sorted(calls)
    packed = make_fs_service(track=False, store=_CountingStore(store))
    packed.open_session(sid)
    for call in calls:
        assert service.object(sid, call) == packed.object(sid, call)


def test_a_resume_reads_the_files_it_does_not_show_without_their_content(
    make_fs_service: MakeFsService, workspace: Path, sid: str
) -> None:
    """Decision 0153: the files of the snapshot's index that it does not show in full are read
    without their content; one whose source changed has its stored version read whole (the
    new version written against it); every file's content is there when asked for."""
    first = make_fs_service(track=False)
    first.start_session(sid)
    ids = {}
    for name in ("a.py", "b.py", "c.py"):
        write(workspace / name, f"# {name}\n")
        ids[name] = first.index_file(sid, str(workspace / name)).object_id
    for name in ("b.py", "c.py"):
        first.deactivate(sid, ids[name])
    seq = first.log_position(sid)
    store = first.store
    for n in range(500):  # until a snapshot is written after them (bounded)
        snapshot = store.get(f"session:{sid}")
        if snapshot is not None and int(snapshot["seq"]) > seq:
            break
        first.record_tool_call(sid, f"{sid}-c{n}", tool="bash", args={"cmd": "ls"}, output="x")
    else:
        pytest.fail("no snapshot was written after the files were deactivated")
    first.close()
    write(workspace / "c.py", "# c.py, edited while nobody watched\n")

    waiting = _WaitingStore(store)
    service = make_fs_service(track=False, store=waiting)
    report = service.open_session(sid)
    assert report is not None
    assert report.updated == (ids["c.py"],) and report.unchanged == 2
    assert ids["a.py"] in waiting.read  # shown: read whole
    assert ids["b.py"] not in waiting.read  # neither shown nor changed: its content never read
    assert ids["c.py"] in waiting.read  # changed: its stored version read to write the new one
    assert service.object(sid, ids["b.py"]).content == "# b.py\n"
    assert service.object(sid, ids["c.py"]).content == "# c.py, edited while nobody watched\n"
