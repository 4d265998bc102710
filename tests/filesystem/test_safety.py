"""Reading real files safely (docs/specification.md §3, reading sources safely): canonical paths,
confinement to the roots, no host reads for other filesystems, metadata-only indexing, and special
files. No watchdog here."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time
from pathlib import Path

import pytest

from selfctx.adapters.filesystem.reader import LocalFileReader
from selfctx.adapters.memory import MemoryStore
from selfctx.application.ports.files import SourceMissing, SourceOutsideRoots, SourceUnreachable
from selfctx.application.settings import Settings
from selfctx.domain.mounts import MountMapping
from selfctx.domain.objects import FileObject, FilesystemSource
from tests.filesystem.conftest import MakeFsService
from tests.filesystem.helpers import NOBODY, history, run_unprivileged, write
from tests.support import CONTAINER_FS


@pytest.fixture
def sid(ns: str) -> str:
    return f"{ns}safe"


def test_dotdot_and_symlinks_resolve_to_one_identity(
    make_fs_service: MakeFsService, workspace: Path, sid: str, host_id: str
) -> None:
    (workspace / "src").mkdir()
    real = workspace / "src" / "main.py"
    write(real, "print(1)\n")
    (workspace / "link.py").symlink_to(real)
    (workspace / "srclink").symlink_to(workspace / "src")
    service = make_fs_service(track=False)
    service.start_session(sid)

    ids = {
        service.index_file(sid, p).object_id
        for p in (
            str(real),
            f"{workspace}/src/../src/./main.py",
            str(workspace / "link.py"),
            str(workspace / "srclink" / "main.py"),
        )
    }

    assert ids == {FileObject.identity_of(FilesystemSource(host_id, str(real)))}
    assert len(service.state(sid).index) == 1


def test_a_symlink_escaping_the_root_is_refused(
    make_fs_service: MakeFsService, workspace: Path, tmp_path: Path, sid: str
) -> None:
    secret = tmp_path / "secret.txt"
    write(secret, "do not read\n")
    (workspace / "innocent.txt").symlink_to(secret)
    (workspace / "up").symlink_to(tmp_path)
    service = make_fs_service(track=False)
    service.start_session(sid)

    for path in (
        str(workspace / "innocent.txt"),
        str(workspace / "up" / "secret.txt"),
        f"{workspace}/../secret.txt",
        str(secret),
    ):
        with pytest.raises(SourceOutsideRoots) as err:
            service.index_file(sid, path)
        assert err.value.kind == "path_outside_roots"
        assert str(secret) in str(err.value)

    report = service.discover(sid, [str(workspace / "innocent.txt")], strict=False)
    assert report.found == () and len(report.refused) == 1
    assert list(service.state(sid).index) == []
    assert "do not read" not in service.assemble(sid).to_text()


def test_a_stub_in_a_container_is_never_read_on_the_host(
    make_fs_service: MakeFsService, workspace: Path, sid: str, host_id: str
) -> None:
    """The same path exists on the host with other content: activation must fail, not read it."""
    decoy = workspace / "etc.conf"
    write(decoy, "HOST SECRET\n")
    reads: list[str] = []
    reader = LocalFileReader(host_id, [str(workspace)], on_stat=lambda p, _: reads.append(p))
    service = make_fs_service(default_filesystem_id=CONTAINER_FS, files=reader)
    service.start_session(sid)
    stub_id = service.discover(sid, [str(decoy)]).found[0].object_id

    with pytest.raises(SourceUnreachable) as err:
        service.activate(sid, stub_id)

    assert "another filesystem" in str(err.value)
    assert stub_id not in service.state(sid).active
    assert "HOST SECRET" not in service.assemble(sid).to_text()
    # A container file the agent read (content from its tool output) is indexed, not watched.
    service.index_file(sid, str(decoy), "container content\n")
    assert service.tracker is not None and service.tracker.watching() == frozenset()
    assert service.rehash(sid).orphaned == (stub_id,)  # the re-hash pass does not read it either
    assert "HOST SECRET" not in service.assemble(sid).to_text()
    assert reads == []


def test_a_bind_mounted_file_is_read_and_watched_on_the_host(
    make_fs_service: MakeFsService, workspace: Path, sid: str, host_id: str
) -> None:
    write(workspace / "app.py", "A\n")
    service = make_fs_service(
        default_filesystem_id=CONTAINER_FS,
        mounts=[MountMapping("/workspace", str(workspace), host_id)],
    )
    service.start_session(sid)

    result = service.index_file(sid, "/workspace/app.py")

    assert service.object(sid, result.object_id).source == FilesystemSource(
        host_id, str(workspace / "app.py")
    )
    assert service.tracker is not None
    assert {s.path for s in service.tracker.watching()} == {str(workspace / "app.py")}
    assert "path=/workspace/app.py " in service.assemble(sid).metadata_text()


def test_oversized_and_binary_files_are_indexed_as_metadata_with_the_reason(
    make_fs_service: MakeFsService, workspace: Path, sid: str
) -> None:
    big, blob, latin = workspace / "big.txt", workspace / "img.png", workspace / "latin1.txt"
    big.write_bytes(b"x" * 101)
    blob.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    latin.write_bytes("caf\xe9".encode("latin-1"))
    service = make_fs_service(track=False, settings=Settings(max_file_bytes=100))
    service.start_session(sid)

    lines = {}
    for path, note in ((big, "[too large]"), (blob, "[binary]"), (latin, "[binary]")):
        oid = service.index_file(sid, str(path)).object_id
        obj = service.object(sid, oid)
        assert isinstance(obj, FileObject)
        assert obj.content is None and obj.file_hash is not None
        lines[oid] = note
    metadata = service.assemble(sid).metadata
    for oid, note in lines.items():
        assert next(ln for ln in metadata if ln.startswith(f"id={oid} ")).endswith(note)


def test_the_default_size_cap_is_two_mebibytes(
    make_fs_service: MakeFsService, workspace: Path, sid: str
) -> None:
    at_cap, over = workspace / "at.txt", workspace / "over.txt"
    at_cap.write_bytes(b"a" * (2 * 1024 * 1024))
    over.write_bytes(b"a" * (2 * 1024 * 1024 + 1))
    service = make_fs_service(track=False)
    service.start_session(sid)

    at_obj = service.object(sid, service.index_file(sid, str(at_cap)).object_id)
    over_obj = service.object(sid, service.index_file(sid, str(over)).object_id)

    assert at_obj.content is not None and len(at_obj.content) == 2 * 1024 * 1024
    assert isinstance(over_obj, FileObject) and over_obj.content_status == "too_large"


def test_fifos_devices_and_directories_are_refused_without_blocking(
    make_fs_service: MakeFsService, workspace: Path, sid: str
) -> None:
    fifo = workspace / "pipe"
    os.mkfifo(fifo)
    (workspace / "dir.txt").mkdir()
    specials = {fifo: "a FIFO", workspace / "dir.txt": "a directory"}
    try:
        os.mknod(workspace / "zero", stat.S_IFCHR | 0o600, os.makedev(1, 5))
        specials[workspace / "zero"] = "a character device"
    except (PermissionError, OSError):
        pass  # no CAP_MKNOD here: FIFOs and directories still cover the rule
    (workspace / "devnull").symlink_to("/dev/null")
    service = make_fs_service(track=False)
    service.start_session(sid)

    started = time.monotonic()
    for path, kind in specials.items():
        with pytest.raises(SourceUnreachable) as err:
            service.index_file(sid, str(path))
        assert kind in str(err.value)
    with pytest.raises(SourceOutsideRoots):
        service.index_file(sid, str(workspace / "devnull"))
    assert time.monotonic() - started < 10  # nothing waited for a writer (a hang would be worse)
    assert list(service.state(sid).index) == []


def test_a_file_replaced_by_a_fifo_is_orphaned_by_the_rehash_pass(
    make_fs_service: MakeFsService, workspace: Path, sid: str
) -> None:
    path = workspace / "was_a_file"
    write(path, "text\n")
    service = make_fs_service(track=False)
    service.start_session(sid)
    oid = service.index_file(sid, str(path)).object_id
    path.unlink()
    os.mkfifo(path)

    report = service.rehash(sid)

    assert report.orphaned == (oid,)
    assert history(service, oid) == [("text\n", None)]


def test_vanished_files_and_directories_are_told_apart(
    make_fs_service: MakeFsService, workspace: Path, sid: str
) -> None:
    (workspace / "d").mkdir()
    kept_dir, lost_dir = workspace / "a.txt", workspace / "d" / "b.txt"
    write(kept_dir, "a\n")
    write(lost_dir, "b\n")
    service = make_fs_service(track=False)
    service.start_session(sid)
    a = service.index_file(sid, str(kept_dir)).object_id
    b = service.index_file(sid, str(lost_dir)).object_id
    kept_dir.unlink()
    shutil.rmtree(workspace / "d")

    report = service.rehash(sid)

    # Its directory is there, the file is not: confirmed deleted. Its directory is gone too: it
    # cannot be told from a mount that went away, so it is orphaned (docs/specification.md §2).
    assert report.deleted == (a,) and report.orphaned == (b,)
    assert history(service, a)[-1] == (None, "deleted")
    assert history(service, b) == [("b\n", None)]
    with pytest.raises(SourceMissing):
        service.index_file(sid, str(kept_dir))


@pytest.fixture
def shared_dir() -> object:
    """A directory an unprivileged user can use (pytest's own is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="selfctx-perm-"))
    path.chmod(0o755)
    if os.geteuid() == 0:
        os.chown(path, NOBODY, NOBODY)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_permission_denied_is_unreachable_and_orphans_the_file(
    make_fs_service: MakeFsService, shared_dir: Path
) -> None:
    """The reads run as ``nobody`` in a child process: root reads a mode-000 file anyway."""
    # Built here, as root, on a private in-memory store (a forked child must not share a
    # network client with its parent).
    service = make_fs_service(track=False, workspace=str(shared_dir), store=MemoryStore())
    reader = LocalFileReader("h", [str(shared_dir)])

    def scenario() -> object:
        path = shared_dir / "private.txt"
        write(path, "mine\n")
        service.start_session("perm")
        oid = service.index_file("perm", str(path)).object_id
        path.chmod(0)
        try:
            reader.read(FilesystemSource("h", str(path)), 1024)
            read_error = None
        except SourceUnreachable as exc:
            read_error = (type(exc).__name__, exc.reason)
        report = service.rehash("perm")
        return read_error, report.orphaned == (oid,), len(service.history(oid))

    result = run_unprivileged(scenario)

    assert result == (("SourceUnreachable", "permission denied"), True, 1), result
