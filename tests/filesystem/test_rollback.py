"""Rolling back files on real disk, with a watchdog tracker running (decision 0041).

The session edits files through its "tools" (written here, then indexed with ``wrote=True`` as
the harness does after an edit); someone else edits one of them by hand, which the watcher
records. The rollback writes back only what the session wrote and nobody changed since, inside
the allowed roots, and the watcher sees each restore as a new version, not as an extra one.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from selfctx.adapters.filesystem.reader import LocalFileReader
from selfctx.application.ports.files import SourceChanged, SourceOutsideRoots, SourceUnreachable
from selfctx.domain.objects import FilesystemSource
from tests.filesystem.conftest import MakeFsService
from tests.filesystem.helpers import eventually, history, write


@pytest.fixture
def sid(ns: str) -> str:
    return f"{ns}rollback"


def test_rollback_across_a_watcher_recorded_external_edit(
    make_fs_service: MakeFsService, workspace: Path, sid: str
) -> None:
    ours, theirs, created = workspace / "ours.py", workspace / "theirs.py", workspace / "new.py"
    write(ours, "def f():\n    return 1\n")
    write(theirs, "LIMIT = 10\n")
    service = make_fs_service()
    service.start_session(sid)
    ours_id = service.index_file(sid, str(ours)).object_id
    theirs_id = service.index_file(sid, str(theirs)).object_id
    service.record_user_message(sid, "make f return 2 and raise the limit")
    service.checkpoint(sid, "before-edits")

    # The agent's edits, as its harness reports them.
    write(ours, "def f():\n    return 2\n")
    service.index_file(sid, str(ours), wrote=True)
    write(theirs, "LIMIT = 20\n")
    service.index_file(sid, str(theirs), wrote=True)
    write(created, "print('new')\n")
    created_id = service.index_file(sid, str(created), wrote=True).object_id
    # Someone edits theirs.py by hand; the watcher records it.
    write(theirs, "LIMIT = 99  # by hand\n")
    eventually(lambda: len(service.history(theirs_id)) == 3, "the watcher's version")

    dry = service.rollback(sid, "before-edits", mode="both", dry_run=True)
    assert {Path(f.path).name: f.action for f in dry.files} == {
        "ours.py": "write",
        "theirs.py": "refused",
        "new.py": "delete",
    }
    assert ours.read_text() == "def f():\n    return 2\n" and created.exists()

    report = service.rollback(sid, "before-edits", mode="both")
    assert [Path(f.path).name for f in report.refused] == ["theirs.py"]
    assert "someone else" in report.refused[0].reason
    assert ours.read_text() == "def f():\n    return 1\n"
    assert not created.exists()
    assert theirs.read_text() == "LIMIT = 99  # by hand\n"
    # The conversation went back too: the file created after the checkpoint left the pool.
    state = service.state(sid)
    assert created_id in state.index and created_id not in state.pool

    # Each restore is one new version (the rollback's); the watcher adds none of its own.
    expected_ours = [
        ("def f():\n    return 1\n", None),
        ("def f():\n    return 2\n", None),
        ("def f():\n    return 1\n", None),
    ]
    assert history(service, ours_id) == expected_ours
    assert history(service, created_id) == [("print('new')\n", None), (None, "deleted")]
    write(workspace / "sentinel.py", "x\n")  # a later event: earlier ones were delivered
    sentinel = service.index_file(sid, str(workspace / "sentinel.py")).object_id
    write(workspace / "sentinel.py", "y\n")
    eventually(lambda: len(service.history(sentinel)) == 2, "the sentinel's version")
    assert history(service, ours_id) == expected_ours
    # An edit after the rollback is tracked as usual.
    write(ours, "def f():\n    return 3\n")
    eventually(lambda: len(service.history(ours_id)) == 4, "the next edit's version")

    # The rollback can be rolled back. Someone's hand edit of ours.py is undone by hand first:
    # it holds what the session left there again (versions compare by content), so it is the
    # session's to write back; theirs.py still is not.
    write(ours, "def f():\n    return 1\n")
    eventually(lambda: len(service.history(ours_id)) == 5, "the undo's version")
    again = service.rollback(sid, report.saved_as or "", mode="both")
    assert {Path(f.path).name: f.action for f in again.files} == {
        "ours.py": "write",
        "new.py": "write",
    }
    assert ours.read_text() == "def f():\n    return 2\n"
    assert created.read_text() == "print('new')\n"
    assert theirs.read_text() == "LIMIT = 99  # by hand\n"
    assert created_id in service.state(sid).pool


def test_writes_stay_inside_the_roots_and_over_what_was_expected(
    tmp_path: Path, workspace: Path
) -> None:
    inside, outside = workspace / "a.txt", tmp_path / "outside.txt"
    write(inside, "one\n")
    write(outside, "out\n")
    os.symlink(outside, workspace / "link.txt")
    os.symlink(tmp_path, workspace / "escape")
    reader = LocalFileReader("host", roots=[str(workspace)])
    limit = 1 << 20

    def source(path: Path | str) -> FilesystemSource:
        return FilesystemSource("host", str(path))

    digest = reader.read(source(inside), limit).file_hash
    with pytest.raises(SourceOutsideRoots):
        reader.restore(source(outside), b"x", None, limit)
    with pytest.raises(SourceOutsideRoots):  # a folder that is a link out: the walk sees it
        reader.restore(source(workspace / "escape" / "outside.txt"), b"x", None, limit)
    with pytest.raises(SourceUnreachable):  # a link is never written through
        reader.restore(source(workspace / "link.txt"), b"x", None, limit)
    with pytest.raises(SourceUnreachable):  # another filesystem's file is never written here
        reader.restore(FilesystemSource("container", str(inside)), b"x", digest, limit)
    with pytest.raises(SourceChanged):
        reader.restore(source(inside), b"two\n", "0" * 64, limit)
    with pytest.raises(SourceUnreachable, match="directory is not there"):
        reader.restore(source(workspace / "gone" / "b.txt"), b"b\n", None, limit)
    assert inside.read_text() == "one\n" and outside.read_text() == "out\n"

    os.chmod(inside, 0o640)
    reader.restore(source(inside), b"two\n", digest, limit)
    assert inside.read_text() == "two\n"
    assert inside.stat().st_mode & 0o777 == 0o640  # the file keeps its mode
    names = sorted(p.name for p in workspace.iterdir())
    assert names == ["a.txt", "escape", "link.txt"]  # no temporary file left behind
    reader.restore(source(workspace / "b.txt"), b"b\n", None, limit)
    assert (workspace / "b.txt").read_text() == "b\n"
    with pytest.raises(SourceChanged):  # it exists now: "must not exist" fails
        reader.restore(source(workspace / "b.txt"), b"c", None, limit)
    new_digest = reader.read(source(inside), limit).file_hash
    reader.restore(source(inside), None, new_digest, limit)
    assert not inside.exists()
