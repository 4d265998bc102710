"""Confinement that holds while files change, links resolved as the agent sees them, and files
over the size cap left unread (decisions 0025 and 0028). Real files, no watchdog."""

from __future__ import annotations

import contextlib
import gc
import os
import threading
import time
from pathlib import Path

import pytest

from selfctx.adapters.filesystem.reader import LocalFileReader
from selfctx.application.ports.files import SourceUnavailable, SourceUnreachable
from selfctx.application.settings import Settings
from selfctx.domain.hashing import stat_file_hash
from selfctx.domain.indexing import Outcome
from selfctx.domain.mounts import MountMapping, MountTable
from selfctx.domain.objects import FileObject, FilesystemSource
from tests.filesystem.conftest import MakeFsService
from tests.filesystem.helpers import write
from tests.support import CONTAINER_FS

SWAP_SECONDS = 4.0
"""How long the race runs: the unfixed reader let outside content in within a fraction of it."""


@pytest.fixture
def sid(ns: str) -> str:
    return f"{ns}confine"


def _swapper(inside: Path, outside: Path, stop: threading.Event, swaps: list[int]) -> None:
    """Swap the directory ``inside`` for a link to ``outside`` and back, as fast as it can."""
    real = inside.with_name(inside.name + ".real")
    while not stop.is_set():
        os.rename(inside, real)
        os.symlink(outside, inside)
        time.sleep(0)  # let a reader see the link now and then
        os.unlink(inside)
        os.rename(real, inside)
        swaps[0] += 1


def test_a_directory_swapped_for_a_link_never_lets_outside_content_in(
    make_fs_service: MakeFsService, workspace: Path, tmp_path: Path, sid: str, host_id: str
) -> None:
    (workspace / "d").mkdir()
    write(workspace / "d" / "f.txt", "inside\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    write(outside / "f.txt", "OUTSIDE\n")
    service = make_fs_service(track=False)
    service.start_session(sid)
    reader = LocalFileReader(host_id, [str(workspace)])
    source = FilesystemSource(host_id, str(workspace / "d" / "f.txt"))
    seen: dict[str, int] = {}
    stop, swaps = threading.Event(), [0]
    swapper = threading.Thread(target=_swapper, args=(workspace / "d", outside, stop, swaps))
    swapper.start()
    try:
        deadline = time.monotonic() + SWAP_SECONDS
        while time.monotonic() < deadline:
            try:
                snap = reader.read(source, 1024)
                seen[(snap.data or b"").decode()] = seen.get((snap.data or b"").decode(), 0) + 1
                service.index_file(sid, str(workspace / "d" / "f.txt"))
            except SourceUnavailable as exc:
                seen[type(exc).__name__] = seen.get(type(exc).__name__, 0) + 1
    finally:
        stop.set()
        swapper.join()

    assert "OUTSIDE\n" not in seen, seen
    assert seen.get("inside\n", 0) > 0 and swaps[0] > 100, (seen, swaps)
    # Some reads did meet the link, and were refused, not followed.
    assert seen.get("SourceOutsideRoots", 0) > 0, seen
    for object_id in service.state(sid).index:
        for version in service.history(object_id):
            assert "OUTSIDE" not in (version.document.get("content") or "")
    assert "OUTSIDE" not in service.assemble(sid).to_text()


@pytest.fixture
def mounted(tmp_path: Path, workspace: Path) -> dict[str, Path]:
    """A project bind-mounted at /workspace and a data folder at /data, with links of every kind;
    a host-only file beside them, inside the (wide) roots but in no mount."""
    project, data = workspace / "project", workspace / "data"
    (project / "src").mkdir(parents=True)
    data.mkdir()
    host_only = workspace / "host_only.txt"
    write(host_only, "HOST ONLY\n")
    write(project / "src" / "a.py", "A = 1\n")
    write(data / "x.txt", "data x\n")
    links = {
        "leak_abs": str(host_only),  # a host path: in the container it names a container file
        "leak_rel": "../host_only.txt",  # climbs out of the mount in the container's namespace
        "leak_dir": "/etc",  # the container's /etc, not the host's
        "ok_abs": "/workspace/src/a.py",  # a container path inside the mount
        "ok_rel": "src/a.py",
        "ok_other_mount": "/data/x.txt",  # another mount of the same container
        "ok_climb": "../workspace/src/a.py",  # out to / and back in, all in the container
    }
    for name, target in links.items():
        (project / name).symlink_to(target)
    return {"project": project, "data": data, "host_only": host_only}


def test_links_in_a_mount_resolve_in_the_agents_namespace(
    make_fs_service: MakeFsService,
    mounted: dict[str, Path],
    workspace: Path,
    sid: str,
    host_id: str,
) -> None:
    project, data = mounted["project"], mounted["data"]
    service = make_fs_service(
        track=False,
        default_filesystem_id=CONTAINER_FS,
        roots=[str(workspace)],  # wider than the mounts: the host-only file is inside them
        mounts=[
            MountMapping("/workspace", str(project), host_id),
            MountMapping("/data", str(data), host_id),
        ],
    )
    service.start_session(sid)

    for name in ("leak_abs", "leak_rel", "leak_dir"):
        with pytest.raises(SourceUnreachable) as err:
            service.index_file(sid, f"/workspace/{name}")
        assert "another filesystem" in str(err.value), name
    expected = {
        "ok_abs": project / "src" / "a.py",
        "ok_rel": project / "src" / "a.py",
        "ok_climb": project / "src" / "a.py",
        "ok_other_mount": data / "x.txt",
    }
    for name, target in expected.items():
        result = service.index_file(sid, f"/workspace/{name}")
        obj = service.object(sid, result.object_id)
        assert isinstance(obj, FileObject)
        assert obj.source == FilesystemSource(host_id, str(target)), name
        assert obj.content == target.read_text()
    assert "HOST ONLY" not in service.assemble(sid).to_text()


def test_a_link_to_a_container_file_names_that_file(
    mounted: dict[str, Path], workspace: Path, host_id: str
) -> None:
    """The path's identity is the container's file it leads to, which the host cannot read."""
    project = mounted["project"]
    table = MountTable(CONTAINER_FS, [MountMapping("/workspace", str(project), host_id)])
    reader = LocalFileReader(host_id, [str(workspace)], mounts=table)

    leak = FilesystemSource(host_id, str(project / "leak_abs"))
    assert reader.canonical(leak) == FilesystemSource(CONTAINER_FS, str(mounted["host_only"]))
    with pytest.raises(SourceUnreachable):
        reader.read(leak, 1024)
    # A host file under no mount keeps the host's own namespace.
    assert reader.read(FilesystemSource(host_id, str(mounted["host_only"])), 1024).data == (
        b"HOST ONLY\n"
    )


def _bytes_read() -> int:
    """Bytes this process has read through read(2) so far (``rchar`` of /proc/self/io)."""
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


def test_a_file_over_the_cap_is_never_read_in_full(
    make_fs_service: MakeFsService, workspace: Path, sid: str, host_id: str
) -> None:
    huge = workspace / "sparse.img"
    with open(huge, "wb") as f:
        f.truncate(12 * 1024**3)  # 12 GiB, sparse: nothing on disk, but read(2) would return it
    service = make_fs_service(track=False, settings=Settings(policy="ssot", max_file_bytes=1024))
    service.start_session(sid)
    reader = LocalFileReader(host_id, [str(workspace)])

    before = _bytes_read()
    snap = reader.read(FilesystemSource(host_id, str(huge)), 1024)
    first = service.index_file(sid, str(huge))
    again = service.index_file(sid, str(huge))
    read = _bytes_read() - before

    assert read < 1024 * 1024, f"{read} bytes read for a file over the cap"
    info = huge.stat()
    assert snap.data is None and snap.size == 12 * 1024**3
    assert snap.file_hash == stat_file_hash(info.st_size, info.st_mtime_ns)
    obj = service.object(sid, first.object_id)
    assert isinstance(obj, FileObject) and obj.content_status == "too_large"
    assert obj.file_hash == snap.file_hash
    assert again.outcome == Outcome.UNCHANGED
    # A change shows in its size or modification time: a new version, still unread.
    os.utime(huge, ns=(info.st_atime_ns, info.st_mtime_ns + 1_000_000_000))
    assert service.index_file(sid, str(huge)).outcome == Outcome.UPDATED
    assert _bytes_read() - before < 2 * 1024 * 1024


def test_a_file_at_the_cap_is_read_and_hashed_whole(workspace: Path, host_id: str) -> None:
    at_cap, over = workspace / "at.txt", workspace / "over.txt"
    at_cap.write_bytes(b"a" * 1024)
    over.write_bytes(b"a" * 1025)
    reader = LocalFileReader(host_id, [str(workspace)])

    whole = reader.read(FilesystemSource(host_id, str(at_cap)), 1024)
    assert whole.data == b"a" * 1024 and whole.size == 1024
    assert reader.read(FilesystemSource(host_id, str(over)), 1024).data is None


def test_walks_leave_no_descriptor_open(
    mounted: dict[str, Path], workspace: Path, host_id: str
) -> None:
    project = mounted["project"]
    (project / "loop").symlink_to("loop")
    (project / "dir").mkdir()
    table = MountTable(CONTAINER_FS, [MountMapping("/workspace", str(project), host_id)])
    reader = LocalFileReader(host_id, [str(workspace)], mounts=table)
    paths = [
        *(project / name for name in ("leak_abs", "ok_abs", "ok_climb", "loop", "dir", "no")),
        project / "no" / "such" / "file",
        project / "src" / "a.py" / "below_a_file",
        mounted["host_only"],
        workspace.parent / "outside_roots",
    ]
    gc.collect()  # an earlier test's garbage (a session's private file) closes now, not mid-count
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        for path in paths:
            source = FilesystemSource(host_id, str(path))
            for call in (reader.canonical, lambda s: reader.read(s, 1024)):
                with contextlib.suppress(SourceUnavailable):
                    call(source)
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) == before


def test_a_link_ending_in_dotdot_is_its_directory(workspace: Path, host_id: str) -> None:
    (workspace / "d" / "e").mkdir(parents=True)
    (workspace / "up").symlink_to("d/e/..")
    reader = LocalFileReader(host_id, [str(workspace)])
    assert reader.canonical(FilesystemSource(host_id, str(workspace / "up"))).path == str(
        workspace / "d"
    )
    source = FilesystemSource(host_id, str(workspace / "up"))
    with pytest.raises(SourceUnreachable) as err:
        reader.read(source, 1024)
    assert "a directory" in str(err.value)
