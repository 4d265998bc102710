"""Watching real files with watchdog (docs/specification.md §3, Tracking), through
``ContextService``.

Each test waits for the watcher's effect by polling the store or the session with a deadline,
never by sleeping a fixed time, and asserts what was stored, not how fast.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from selfctx.adapters.filesystem.tracker import WatchdogTracker
from selfctx.application.service import ContextService
from selfctx.domain.objects import FileObject, FilesystemSource
from tests.conftest import StoreFactory
from tests.filesystem.conftest import MakeFsService
from tests.filesystem.helpers import eventually, history, write
from tests.support import WrappedStore


def line_for(service: ContextService, sid: str, object_id: str) -> str:
    """The metadata line of one object in the session's assembled context."""
    lines = [ln for ln in service.assemble(sid).metadata if ln.startswith(f"id={object_id} ")]
    assert len(lines) == 1, lines
    return lines[0]


def object_id(host_id: str, path: Path | str) -> str:
    return FileObject.identity_of(FilesystemSource(host_id, str(path)))


@pytest.fixture
def sid(ns: str) -> str:
    return f"{ns}track"


def test_an_edit_writes_one_new_version_the_session_sees(
    make_fs_service: MakeFsService, workspace: Path, sid: str
) -> None:
    path = workspace / "a.py"
    write(path, "x = 1\n")
    service = make_fs_service()
    service.start_session(sid)
    oid = service.index_file(sid, str(path)).object_id
    service.deactivate(sid, oid)

    write(path, "x = 1\ny = 2\n")

    eventually(lambda: len(service.history(oid)) == 2, "the edit's version")
    assert history(service, oid) == [("x = 1\n", None), ("x = 1\ny = 2\n", None)]
    assert line_for(service, sid, oid).endswith("char_count=12")
    state = service.state(sid)
    assert oid in state.pool and oid not in state.active  # the deactivation stands


def test_rewriting_identical_bytes_writes_nothing(
    make_fs_service: MakeFsService, workspace: Path, sid: str
) -> None:
    same, changed = workspace / "same.txt", workspace / "changed.txt"
    write(same, "unchanged\n")
    write(changed, "before\n")
    service = make_fs_service()
    service.start_session(sid)
    same_id = service.index_file(sid, str(same)).object_id
    changed_id = service.index_file(sid, str(changed)).object_id

    write(same, "unchanged\n")  # events fire, bytes do not change
    write(changed, "after\n")  # a later change in the same directory, as a marker

    eventually(lambda: len(service.history(changed_id)) == 2, "the marker's version")
    tracker = service.tracker
    assert isinstance(tracker, WatchdogTracker)
    assert eventually(lambda: tracker.idle(), "the tracker to settle")
    assert history(service, same_id) == [("unchanged\n", None)]


def test_a_delete_writes_a_null_version_and_keeps_history(
    make_fs_service: MakeFsService, workspace: Path, sid: str
) -> None:
    path = workspace / "gone.md"
    write(path, "# title\n")
    service = make_fs_service()
    service.start_session(sid)
    oid = service.index_file(sid, str(path)).object_id

    path.unlink()

    eventually(lambda: len(service.history(oid)) == 2, "the deletion version")
    assert history(service, oid) == [("# title\n", None), (None, "deleted")]
    assert line_for(service, sid, oid).endswith("[deleted]")
    assert oid in service.state(sid).index

    write(path, "# back\n")  # the file comes back: a new ordinary version

    eventually(lambda: len(service.history(oid)) == 3, "the version of the returned file")
    assert history(service, oid)[-1] == ("# back\n", None)


def test_a_rename_deletes_the_old_source_and_indexes_the_new_path(
    make_fs_service: MakeFsService, workspace: Path, sid: str, host_id: str
) -> None:
    old, new = workspace / "old_name.py", workspace / "new_name.py"
    write(old, "def f(): pass\n")
    service = make_fs_service()
    service.start_session(sid)
    oid = service.index_file(sid, str(old)).object_id
    new_id = object_id(host_id, new)

    os.rename(old, new)

    eventually(lambda: len(service.history(new_id)) == 1, "the new path's object")
    eventually(lambda: len(service.history(oid)) == 2, "the old path's deletion")
    assert history(service, oid) == [("def f(): pass\n", None), (None, "deleted")]
    assert history(service, new_id) == [("def f(): pass\n", None)]
    # Set membership never changes on a watcher event: the new path enters the session when the
    # agent reads or discovers it, and then its content is already indexed (decision 0010).
    assert new_id not in service.state(sid).index
    found = service.discover(sid, [str(new)]).found[0]
    assert found.object_id == new_id
    assert line_for(service, sid, new_id).endswith("char_count=14")


def test_an_atomic_save_is_one_update_not_a_delete_and_a_create(
    make_fs_service: MakeFsService, workspace: Path, sid: str
) -> None:
    path = workspace / "config.toml"
    write(path, "a = 1\n")
    service = make_fs_service()
    service.start_session(sid)
    oid = service.index_file(sid, str(path)).object_id

    temp = workspace / ".config.toml.tmp"
    write(temp, "a = 2\n")
    os.replace(temp, path)

    eventually(lambda: len(service.history(oid)) == 2, "the saved version")
    tracker = service.tracker
    assert isinstance(tracker, WatchdogTracker)
    eventually(lambda: tracker.idle(), "the tracker to settle")
    assert history(service, oid) == [("a = 1\n", None), ("a = 2\n", None)]
    assert line_for(service, sid, oid).endswith("char_count=6")


def test_a_save_that_renames_the_original_to_a_backup_is_one_update(
    make_fs_service: MakeFsService, workspace: Path, sid: str, host_id: str
) -> None:
    """vim's and emacs's backup dance: rename the original away, write a new file, maybe delete
    the backup. The original gets one updated version, never a deletion."""
    path = workspace / "notes.txt"
    write(path, "v1\n")
    service = make_fs_service(quiet=1.0)  # the file is absent between two steps: one burst
    service.start_session(sid)
    oid = service.index_file(sid, str(path)).object_id

    backup = workspace / "notes.txt~"
    os.rename(path, backup)
    write(path, "v2\n")
    backup.unlink()

    eventually(lambda: len(service.history(oid)) == 2, "the saved version")
    tracker = service.tracker
    assert isinstance(tracker, WatchdogTracker)
    eventually(lambda: tracker.idle(), "the tracker to settle")
    assert history(service, oid) == [("v1\n", None), ("v2\n", None)]
    assert service.history(object_id(host_id, backup)) == []  # gone before it was looked at


def test_a_hundred_rapid_writes_are_coalesced_and_the_last_one_is_stored(
    make_fs_service: MakeFsService, workspace: Path, sid: str
) -> None:
    path = workspace / "hot.log"
    write(path, "start\n")
    service = make_fs_service()
    service.start_session(sid)
    oid = service.index_file(sid, str(path)).object_id

    for n in range(100):
        write(path, f"write {n}\n")

    eventually(
        lambda: service.object(sid, oid).content == "write 99\n", "the last write in the session"
    )
    versions = history(service, oid)
    assert versions[-1] == ("write 99\n", None)
    assert len(versions) < 101  # bursts are coalesced: never one version per write


def test_removing_the_directory_deletes_its_watched_files(
    make_fs_service: MakeFsService, workspace: Path, sid: str
) -> None:
    folder = workspace / "pkg"
    folder.mkdir()
    path = folder / "mod.py"
    write(path, "A = 1\n")
    service = make_fs_service()
    service.start_session(sid)
    oid = service.index_file(sid, str(path)).object_id

    shutil.rmtree(folder)

    eventually(lambda: len(service.history(oid)) == 2, "the deletion version")
    assert history(service, oid)[-1] == (None, "deleted")

    folder.mkdir()  # recreated: a rehash re-reads it and watches it again
    write(path, "A = 2\n")
    report = service.rehash(sid)
    assert report.updated == (oid,)
    write(path, "A = 3\n")
    eventually(lambda: service.object(sid, oid).content == "A = 3\n", "the new watch's update")


def test_every_open_session_holding_the_file_sees_the_new_version(
    make_fs_service: MakeFsService, workspace: Path, ns: str
) -> None:
    path = workspace / "shared.py"
    write(path, "one\n")
    service = make_fs_service()
    service.start_session(f"{ns}a")
    service.start_session(f"{ns}b")
    oid = service.index_file(f"{ns}a", str(path)).object_id
    service.index_file(f"{ns}b", str(path))

    write(path, "one two\n")

    for sid in (f"{ns}a", f"{ns}b"):

        def sees_the_edit(sid: str = sid) -> bool:
            return line_for(service, sid, oid).endswith("char_count=8")

        eventually(sees_the_edit, f"session {sid} to see the edit")
    assert len(service.history(oid)) == 2


def test_two_clients_watching_one_file_write_one_version(
    make_fs_service: MakeFsService, workspace: Path, ns: str
) -> None:
    path = workspace / "both.py"
    write(path, "shared\n")
    first, second = make_fs_service(), make_fs_service()  # two processes' worth, one store
    first.start_session(f"{ns}one")
    second.start_session(f"{ns}two")
    oid = first.index_file(f"{ns}one", str(path)).object_id
    assert second.index_file(f"{ns}two", str(path)).object_id == oid

    write(path, "shared and edited\n")

    for service, sid in ((first, f"{ns}one"), (second, f"{ns}two")):

        def sees_the_edit(service: ContextService = service, sid: str = sid) -> bool:
            return service.object(sid, oid).content == "shared and edited\n"

        eventually(sees_the_edit, f"{sid} to see the edit")
        tracker = service.tracker
        assert isinstance(tracker, WatchdogTracker)
        eventually(tracker.idle, "the tracker to settle")
    assert history(first, oid) == [("shared\n", None), ("shared and edited\n", None)]


def test_watcher_writes_are_object_versions_not_session_log_entries(
    make_fs_service: MakeFsService, workspace: Path, sid: str
) -> None:
    path = workspace / "w.txt"
    write(path, "1\n")
    service = make_fs_service()
    service.start_session(sid)
    oid = service.index_file(sid, str(path)).object_id
    seq = service.log_position(sid)

    write(path, "12\n")

    eventually(lambda: len(service.history(oid)) == 2, "the edit's version")
    assert service.log_position(sid) == seq  # decision 0009
    # The past stays exact: the context after the read shows the first version, the live one
    # the second.
    assert service.context_at(sid, seq).active[-1].text.endswith("1\n")
    assert service.assemble(sid).active[-1].text.endswith("12\n")


def test_closing_the_last_session_stops_watching_its_files(
    make_fs_service: MakeFsService, workspace: Path, ns: str
) -> None:
    path = workspace / "c.txt"
    write(path, "c\n")
    service = make_fs_service()
    service.start_session(f"{ns}x")
    service.start_session(f"{ns}y")
    service.index_file(f"{ns}x", str(path))
    service.index_file(f"{ns}y", str(path))
    tracker = service.tracker
    assert isinstance(tracker, WatchdogTracker)
    source = FilesystemSource(tracker.host_filesystem_id, str(path))

    service.close_session(f"{ns}x")
    assert source in tracker.watching()  # y still holds it
    service.close_session(f"{ns}y")
    assert tracker.watching() == frozenset()


def test_discovered_stubs_are_not_watched_but_read_files_are(
    make_fs_service: MakeFsService, workspace: Path, sid: str, host_id: str
) -> None:
    stub, read = workspace / "listed.py", workspace / "read.py"
    write(stub, "s\n")
    write(read, "r\n")
    service = make_fs_service()
    service.start_session(sid)
    service.discover(sid, [str(stub)])
    service.index_file(sid, str(read))
    assert service.tracker is not None
    watched = {s.path for s in service.tracker.watching()}
    assert watched == {str(read)}

    service.activate(sid, object_id(host_id, stub))  # read on activation: now it is watched

    assert {s.path for s in service.tracker.watching()} == {str(read), str(stub)}


def test_errors_on_the_watcher_thread_are_recorded_not_swallowed(
    make_fs_service: MakeFsService, workspace: Path, sid: str, store_factory: StoreFactory
) -> None:
    path = workspace / "e.txt"
    write(path, "e\n")
    store = WrappedStore(store_factory.make())
    service = make_fs_service(store=store, expect_failures=True)
    service.start_session(sid)
    oid = service.index_file(sid, str(path)).object_id
    store.fail_commits = 1_000  # the store is down for the watcher

    write(path, "e2\n")

    assert service.tracker is not None
    failures = eventually(service.tracker.failures, "a recorded failure")
    assert str(path) in failures[0].paths
    assert type(failures[0].error).__name__ == "StoreUnavailable"
    store.fail_commits = 0
    assert service.rehash(sid).updated == (oid,)  # the re-hash pass catches up


def test_a_change_made_before_the_watch_existed_is_not_lost(
    make_fs_service: MakeFsService, workspace: Path, sid: str
) -> None:
    """The harness reports what the agent read; the file changed before the watch was in place.
    The tracker's first look at a newly watched file catches it."""
    path = workspace / "raced.txt"
    write(path, "already changed on disk\n")
    service = make_fs_service()
    service.start_session(sid)

    oid = service.index_file(sid, str(path), "what the agent read\n").object_id

    eventually(
        lambda: service.object(sid, oid).content == "already changed on disk\n",
        "the first look at the new watch",
    )
    assert history(service, oid) == [
        ("what the agent read\n", None),
        ("already changed on disk\n", None),
    ]
