"""Resume after changes made while no client ran (docs/specification.md §2), and the re-hash pass
that catches what a watcher missed, on real files. The re-hash tests run without watchdog: events
are hints, this path must stand on its own (STYLE.md)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

from selfctx.application.ports.store import (
    ConflictError,
    Document,
    Expect,
    ObjectStore,
    Receipt,
)
from selfctx.application.ports.tracking import SourceChange
from selfctx.application.usecases.tracking import RefreshReport
from selfctx.domain.objects import FileObject, FilesystemSource
from tests.conftest import StoreFactory
from tests.filesystem.conftest import MakeFsService
from tests.filesystem.helpers import eventually, history, write
from tests.support import WrappedStore


@pytest.fixture
def sid(ns: str) -> str:
    return f"{ns}resume"


def test_resume_reconciles_edits_and_deletes_made_while_no_client_ran(
    make_fs_service: MakeFsService, workspace: Path, sid: str
) -> None:
    edited, deleted, same = workspace / "edited.py", workspace / "deleted.py", workspace / "same.py"
    for path in (edited, deleted, same):
        write(path, f"# {path.name}\n")
    first = make_fs_service()
    first.start_session(sid)
    ids = {p.name: first.index_file(sid, str(p)).object_id for p in (edited, deleted, same)}
    first.deactivate(sid, ids["same.py"])
    before = first.state(sid)
    first.close()  # the client stops: nobody watches any more

    write(edited, "# edited while paused\n")
    deleted.unlink()

    second = make_fs_service()
    report = second.resume_session(sid)

    assert report.updated == (ids["edited.py"],)
    assert report.deleted == (ids["deleted.py"],)
    assert report.unchanged == 1 and report.orphaned == ()
    assert history(second, ids["edited.py"])[-1] == ("# edited while paused\n", None)
    assert history(second, ids["deleted.py"])[-1] == (None, "deleted")
    state = second.state(sid)
    assert (state.index, state.pool, state.active) == (before.index, before.pool, before.active)

    # Watchers are re-established for every file that was read, deleted ones included.
    assert second.tracker is not None
    assert {s.path for s in second.tracker.watching()} == {str(edited), str(deleted), str(same)}
    write(same, "# changed after resume\n")
    eventually(lambda: len(second.history(ids["same.py"])) == 2, "the watcher after resume")
    write(deleted, "# back again\n")
    eventually(
        lambda: history(second, ids["deleted.py"])[-1] == ("# back again\n", None),
        "the deleted file's return",
    )


def test_rehash_catches_changes_no_watcher_saw(
    make_fs_service: MakeFsService, workspace: Path, sid: str
) -> None:
    changed, removed, kept = workspace / "c.txt", workspace / "r.txt", workspace / "k.txt"
    for path in (changed, removed, kept):
        write(path, path.name)
    service = make_fs_service(track=False)
    service.start_session(sid)
    ids = {p.name: service.index_file(sid, str(p)).object_id for p in (changed, removed, kept)}
    service.discover(sid, [str(workspace / "stub.txt")])  # stubs are not re-read
    seq = service.log_position(sid)

    write(changed, "c.txt, changed")
    removed.unlink()
    report = service.rehash(sid)

    assert report.updated == (ids["c.txt"],)
    assert report.deleted == (ids["r.txt"],)
    assert report.unchanged == 1 and report.orphaned == ()
    assert service.object(sid, ids["c.txt"]).content == "c.txt, changed"
    assert service.object(sid, ids["r.txt"]).content is None
    assert service.log_position(sid) == seq  # object versions only (decision 0009)
    assert service.rehash(sid) == type(report)(unchanged=3)  # a second pass finds nothing new


def test_refreshing_the_same_change_from_two_clients_writes_one_version(
    make_fs_service: MakeFsService, workspace: Path, ns: str, store_factory: StoreFactory
) -> None:
    """Deterministic version of two watchers racing: the second commit conflicts, re-reads, and
    finds the bytes already stored."""
    path = workspace / "raced.py"
    write(path, "v1\n")
    store = WrappedStore(store_factory.make())
    one = make_fs_service(track=False, store=store)
    two = make_fs_service(track=False, store=store)
    one.start_session(f"{ns}a")
    two.start_session(f"{ns}b")
    oid = one.index_file(f"{ns}a", str(path)).object_id
    two.index_file(f"{ns}b", str(path))
    write(path, "v2\n")

    # Client two's commit is preceded by client one's: two decided on v1 and must conflict.
    store.on_commit = lambda: one.rehash(f"{ns}a")
    report = two.rehash(f"{ns}b")

    assert report.updated == () and report.unchanged == 1
    assert history(one, oid) == [("v1\n", None), ("v2\n", None)]
    assert two.object(f"{ns}b", oid).content == "v2\n"


def test_endless_conflicts_give_up_and_write_nothing(
    make_fs_service: MakeFsService, workspace: Path, sid: str, store_factory: StoreFactory
) -> None:
    path = workspace / "contested.txt"
    write(path, "1")
    store = WrappedStore(store_factory.make())
    service = make_fs_service(track=False, store=store)
    service.start_session(sid)
    oid = service.index_file(sid, str(path)).object_id
    n = 0

    def interfere() -> None:  # another writer always gets there first with other bytes
        nonlocal n
        n += 1
        doc = dict(store.get(oid) or {})
        doc["file_hash"] = f"other-{n}"
        store.inner.commit([doc])
        store.on_commit = interfere

    store.on_commit = interfere
    write(path, "2")
    with pytest.raises(ConflictError):
        service.rehash(sid)
    store.on_commit = None
    hashes = [v.document["file_hash"] for v in service.history(oid)]
    assert len(hashes) == 1 + n and all(h.startswith("other-") for h in hashes[1:])


def test_a_renamed_files_new_path_outside_the_roots_is_skipped(
    make_fs_service: MakeFsService, workspace: Path, tmp_path: Path, sid: str, host_id: str
) -> None:
    """The use case canonicalises a new path before indexing it, like any path."""
    outside = tmp_path / "outside.txt"
    write(outside, "secret")
    link = workspace / "link.txt"
    os.symlink(outside, link)
    old = FilesystemSource(host_id, str(workspace / "was.txt"))
    service = make_fs_service(track=False)
    service.start_session(sid)

    report = service._tracking.refresh(  # the tracker's entry point, called directly
        [SourceChange(FilesystemSource(host_id, str(link)), renamed_from=old)]
    )

    assert report.skipped == (str(link),)
    assert service.history(FileObject.identity_of(FilesystemSource(host_id, str(outside)))) == []


class CountingStore(WrappedStore):
    """Counts the reads of documents and every commit sent, landed or refused."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.reads = 0
        self.sent = 0

    def get(self, object_id: str) -> Document | None:
        self.reads += 1
        return super().get(object_id)

    def get_many(self, object_ids: Iterable[str]) -> dict[str, Document]:
        self.reads += 1
        return super().get_many(object_ids)

    def commit(self, puts: Sequence[Document], expect: Sequence[Expect] = ()) -> Receipt:
        self.sent += 1
        return super().commit(puts, expect)


def test_a_change_to_a_file_a_session_holds_is_written_without_reading_the_store(
    make_fs_service: MakeFsService, workspace: Path, sid: str, store_factory: StoreFactory
) -> None:
    # Decision 0124: the version the session holds is what the new one is written on top of,
    # expected by the commit; only what would write nothing is decided on the store's version.
    path = workspace / "edited.py"
    write(path, "v1\n")
    store = CountingStore(store_factory.make())
    service = make_fs_service(track=False, store=store)
    service.start_session(sid)
    oid = service.index_file(sid, str(path)).object_id
    write(path, "v2\n")
    reads, sent = store.reads, store.sent

    report = service.rehash(sid)

    assert report.updated == (oid,)
    assert (store.reads - reads, store.sent - sent) == (0, 1)
    assert history(service, oid) == [("v1\n", None), ("v2\n", None)]
    assert service.object(sid, oid).content == "v2\n"

    # Nothing new: the store's version is read to decide so, and nothing is written.
    assert service.rehash(sid) == type(report)(unchanged=1)
    assert (store.reads - reads, store.sent - sent) == (1, 1)


def test_a_held_version_another_client_replaced_is_decided_again_on_the_refusal(
    make_fs_service: MakeFsService, workspace: Path, ns: str, store_factory: StoreFactory
) -> None:
    # Decision 0124: session a holds v1 while client two stored the bytes on disk (as the agent's
    # own server's ingest does before the watcher of another looks): a's commit expecting v1 is
    # refused, and the refusal's version, with these bytes, is taken without writing them again
    # or reading the store. Then two stores v3 while a still holds v2 and the disk says v4: the
    # refusal's v3 is what v4 is written on top of.
    same, other = workspace / "same.py", workspace / "other.py"
    write(same, "v1\n")
    write(other, "v1\n")
    store = CountingStore(store_factory.make())
    one = make_fs_service(track=False, store=store)
    two = make_fs_service(track=False, store=store)
    one.start_session(f"{ns}a")
    two.start_session(f"{ns}b")
    same_id = one.index_file(f"{ns}a", str(same)).object_id
    other_id = one.index_file(f"{ns}a", str(other)).object_id
    write(same, "v2\n")
    write(other, "v2\n")
    two.index_file(f"{ns}b", str(same))
    two.index_file(f"{ns}b", str(other))
    write(other, "v3\n")
    two.index_file(f"{ns}b", str(other))
    write(other, "v4\n")
    reads, sent, commits = store.reads, store.sent, store.commits

    report = one.rehash(f"{ns}a")

    assert report.updated == (other_id,) and report.unchanged == 1
    assert store.reads == reads
    assert (store.sent - sent, store.commits - commits) == (2, 1)  # refused, then other's v4
    assert history(one, same_id) == [("v1\n", None), ("v2\n", None)]
    assert history(one, other_id) == [(f"v{n}\n", None) for n in (1, 2, 3, 4)]
    assert one.object(f"{ns}a", same_id).content == "v2\n"
    assert one.object(f"{ns}a", other_id).content == "v4\n"


class WaitedLock:
    """A re-entrant lock that notes when a thread had to wait for it."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.waited = threading.Event()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self._lock.acquire(blocking=False):
            return True
        if blocking:
            self.waited.set()
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def test_a_file_a_turn_is_committing_is_read_once_the_turn_has_committed(
    make_fs_service: MakeFsService,
    workspace: Path,
    sid: str,
    host_id: str,
    store_factory: StoreFactory,
) -> None:
    # Decision 0124: the watcher sees the edit while the agent's turn, which recorded the same
    # bytes, is committing them (the session holds them already, under its lock). It reads the
    # store once the turn is done and writes nothing: without the wait it read the version
    # before, wrote the edit itself, and the turn's transaction was refused and made again.
    path = workspace / "turn.py"
    write(path, "v1\n")
    store = CountingStore(store_factory.make())
    service = make_fs_service(track=False, store=store)
    service.start_session(sid)
    oid = service.index_file(sid, str(path)).object_id
    lock = WaitedLock()
    service._open(sid).lock = lock  # type: ignore[assignment]
    write(path, "v2\n")
    reports: list[RefreshReport] = []
    watcher = threading.Thread(
        target=lambda: reports.append(
            service._tracking.refresh([SourceChange(FilesystemSource(host_id, str(path)))])
        )
    )

    def the_watcher_looks() -> None:  # the turn's transaction is on its way
        watcher.start()
        eventually(
            lambda: lock.waited.is_set() or not watcher.is_alive(), "the watcher to wait or end"
        )

    sent = store.sent
    store.on_commit = the_watcher_looks
    with service.batch(sid):
        service.index_file(sid, str(path))  # the turn records the edit
    watcher.join(timeout=60)

    assert [(r.updated, r.unchanged) for r in reports] == [((), 1)]
    assert store.sent - sent == 1  # the turn's transaction, once
    assert history(service, oid) == [("v1\n", None), ("v2\n", None)]
    assert service.object(sid, oid).content == "v2\n"
