"""Mount mappings from configuration: the TOML file, ``docker inspect`` output, the
composition root's ``mounts_file`` and ``SELFCTX_MOUNTS``, and ``st_dev`` flags for mounts nobody
configured."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from selfctx.adapters.mounts import (
    HOST,
    MountConfig,
    MountConfigError,
    MountSpec,
    UnconfiguredMounts,
    container_filesystem_id,
    load_mount_config,
    mounts_from_docker_inspect,
    parse_mount_config,
    read_docker_inspect,
)
from selfctx.application.ports.files import SourceUnreachable
from selfctx.domain.mounts import MountMapping
from selfctx.domain.objects import FileObject, FilesystemSource
from tests.filesystem.conftest import MakeFsService
from tests.filesystem.helpers import eventually, write

DATA = Path(__file__).parent / "data"
INSPECT = DATA / "docker_inspect.json"
CONTAINER_ID = "4f3c1b2a9d8e7f60123456789abcdef0123456789abcdef0123456789abcdef0"


# -- the TOML format ------------------------------------------------------------------------------


def test_a_full_configuration_parses_and_resolves_host() -> None:
    config = parse_mount_config(
        """
        default_filesystem = "container:sandbox-1"

        [[mounts]]
        agent = "/workspace"
        canonical = "/home/me/project"

        [[mounts]]
        agent = "/data"
        canonical = "/srv/data/"
        filesystem = "nfs:share-7"
        read_only = true
        """
    )

    assert config == MountConfig(
        default_filesystem="container:sandbox-1",
        mounts=(
            MountSpec("/workspace", "/home/me/project"),
            MountSpec("/data", "/srv/data/", "nfs:share-7", read_only=True),
        ),
    )
    table = config.table("HOST-ID")
    assert table.to_source("/workspace/src/a.py") == FilesystemSource(
        "HOST-ID", "/home/me/project/src/a.py"
    )
    assert table.to_source("/data/x") == FilesystemSource("nfs:share-7", "/srv/data/x")
    assert table.to_source("/etc/hosts") == FilesystemSource("container:sandbox-1", "/etc/hosts")
    assert table.display_path(FilesystemSource("HOST-ID", "/home/me/project/b.py")) == (
        "/workspace/b.py"
    )


def test_an_empty_configuration_is_an_unsandboxed_agent() -> None:
    config = parse_mount_config("")
    assert config.default_filesystem == HOST
    assert config.table("H").to_source("/x") == FilesystemSource("H", "/x")


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("mount = []", "unknown key(s) ['mount']"),
        ("[[mounts]]\nagent = '/w'\ncanonical = '/h'\nro = true", "unknown key(s) ['ro']"),
        ("[[mounts]]\nagent = '/w'", "'canonical' must be a non-empty string"),
        ("[[mounts]]\nagent = 'w'\ncanonical = '/h'", "an absolute path is required"),
        ("[[mounts]]\nagent = '/w'\ncanonical = '/h'\nread_only = 'no'", "'read_only' must be"),
        ("mounts = '/w'", "'mounts' must be an array of tables"),
        ("default_filesystem = 3", "'default_filesystem' is a string"),
        ("[docker]\ncontainer = 'x'", "'inspect' must be a non-empty string"),
        ("this is not toml", "not valid TOML"),
    ],
)
def test_bad_configurations_are_refused_naming_the_problem(text: str, complaint: str) -> None:
    with pytest.raises(MountConfigError) as err:
        parse_mount_config(text, where="mounts.toml")
    assert err.value.kind == "mount_config_error"
    assert str(err.value).startswith("mounts.toml")
    assert complaint in str(err.value)


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(MountConfigError, match=r"nope\.toml: cannot read it"):
        load_mount_config(str(tmp_path / "nope.toml"))


# -- docker inspect -------------------------------------------------------------------------------


def test_docker_inspect_mounts_become_host_mappings() -> None:
    imported = read_docker_inspect(str(INSPECT))

    assert imported.container_id == CONTAINER_ID
    assert imported.name == "agent-sandbox"
    assert imported.mounts == (
        MountSpec("/workspace", "/home/dev/project"),
        MountSpec("/workspace/.tool", "/home/dev/.config/tool", read_only=True),
        MountSpec("/root/.cache/pip", "/var/lib/docker/volumes/pip-cache/_data"),
    )
    assert imported.skipped == ("/scratch",)  # tmpfs: the container's own files
    assert container_filesystem_id(CONTAINER_ID) == f"docker:{CONTAINER_ID}"


def test_docker_inspect_longest_prefix_wins_for_nested_mounts() -> None:
    imported = read_docker_inspect(str(INSPECT))
    table = MountConfig(container_filesystem_id(CONTAINER_ID), imported.mounts).table("H")

    assert table.to_source("/workspace/.tool/rc") == FilesystemSource(
        "H", "/home/dev/.config/tool/rc"
    )
    assert table.to_source("/workspace/src/m.py") == FilesystemSource(
        "H", "/home/dev/project/src/m.py"
    )
    assert table.to_source("/scratch/tmp.txt") == FilesystemSource(
        f"docker:{CONTAINER_ID}", "/scratch/tmp.txt"
    )


def test_docker_inspect_picks_a_container_by_name_or_id_prefix() -> None:
    one = json.loads(INSPECT.read_text())[0]
    other = {"Id": "abc123", "Name": "/other", "Mounts": []}
    both = json.dumps([one, other])

    assert mounts_from_docker_inspect(both, container="agent-sandbox").container_id == CONTAINER_ID
    assert mounts_from_docker_inspect(both, container="/other").container_id == "abc123"
    assert mounts_from_docker_inspect(both, container="4f3c1b").container_id == CONTAINER_ID
    assert mounts_from_docker_inspect(one).container_id == CONTAINER_ID  # a bare object
    with pytest.raises(MountConfigError, match="holds 2 containers"):
        mounts_from_docker_inspect(both)
    with pytest.raises(MountConfigError, match="no container 'missing'"):
        mounts_from_docker_inspect(both, container="missing")


@pytest.mark.parametrize(
    ("data", "complaint"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "a list of containers"),
        ('[{"Name": "/x"}]', "has no 'Id'"),
        ('[{"Id": "x", "Mounts": {}}]', "'Mounts' must be a list"),
        ('[{"Id": "x", "Mounts": [{"Source": "/a"}]}]', "has no 'Destination'"),
    ],
)
def test_bad_docker_inspect_output_is_refused(data: str, complaint: str) -> None:
    with pytest.raises(MountConfigError, match=complaint):
        mounts_from_docker_inspect(data)


def test_a_configuration_can_import_docker_inspect_relative_to_itself(tmp_path: Path) -> None:
    shutil.copy(INSPECT, tmp_path / "sandbox.json")
    config_file = tmp_path / "mounts.toml"
    config_file.write_text(
        '[[mounts]]\nagent = "/opt/extra"\ncanonical = "/srv/extra"\n\n'
        '[docker]\ninspect = "sandbox.json"\n'
    )

    config = load_mount_config(str(config_file))

    assert config.default_filesystem == f"docker:{CONTAINER_ID}"
    assert [m.agent for m in config.mounts] == [
        "/opt/extra",
        "/workspace",
        "/workspace/.tool",
        "/root/.cache/pip",
    ]


# -- through the composition root, on real files ---------------------------------------------------


@pytest.fixture
def sandbox_config(tmp_path: Path, workspace: Path) -> Path:
    """A mount file describing a container whose /workspace is a bind mount of ``workspace``."""
    inspect = json.loads(INSPECT.read_text())
    inspect[0]["Mounts"][0]["Source"] = str(workspace)
    (tmp_path / "inspect.json").write_text(json.dumps(inspect))
    path = tmp_path / "mounts.toml"
    path.write_text('[docker]\ninspect = "inspect.json"\n')
    return path


def test_build_service_reads_the_mount_file_and_watches_bind_mounted_files(
    make_fs_service: MakeFsService,
    sandbox_config: Path,
    workspace: Path,
    ns: str,
    host_id: str,
) -> None:
    write(workspace / "main.py", "print('hi')\n")
    service = make_fs_service(mounts_file=str(sandbox_config))
    sid = f"{ns}docker"
    service.start_session(sid)

    oid = service.index_file(sid, "/workspace/main.py").object_id
    assert service.object(sid, oid).source == FilesystemSource(host_id, str(workspace / "main.py"))
    assert f"id={oid} type=file path=/workspace/main.py " in service.assemble(sid).metadata_text()

    write(workspace / "main.py", "print('hello')\n")
    eventually(lambda: len(service.history(oid)) == 2, "the host edit's version")

    # A tmpfs path is the container's own: indexed from the tool output, never read on the host.
    scratch = service.discover(sid, ["/scratch/notes.txt"]).found[0].object_id
    with pytest.raises(SourceUnreachable, match="another filesystem"):
        service.activate(sid, scratch)


def test_the_mount_file_can_come_from_the_environment(
    make_fs_service: MakeFsService,
    sandbox_config: Path,
    workspace: Path,
    ns: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SELFCTX_MOUNTS", str(sandbox_config))
    write(workspace / "a.txt", "a\n")
    service = make_fs_service(track=False)
    service.start_session(f"{ns}env")

    result = service.index_file(f"{ns}env", "/workspace/a.txt")

    obj = service.object(f"{ns}env", result.object_id)
    assert isinstance(obj, FileObject)
    assert obj.source.path == str(workspace / "a.txt")
    assert service.mounts.default_filesystem_id == f"docker:{CONTAINER_ID}"


def test_explicit_arguments_come_before_the_mount_file(
    make_fs_service: MakeFsService, sandbox_config: Path, workspace: Path, host_id: str
) -> None:
    service = make_fs_service(
        track=False,
        mounts_file=str(sandbox_config),
        mounts=[MountMapping("/workspace", str(workspace / "sub"), host_id)],
        default_filesystem_id="mine",
    )

    assert service.mounts.default_filesystem_id == "mine"
    assert service.mounts.to_source("/workspace/x").path == str(workspace / "sub" / "x")


# -- st_dev: mounts nobody configured --------------------------------------------------------------


def test_the_detector_flags_a_foreign_device_once_per_root(workspace: Path) -> None:
    detector = UnconfiguredMounts()
    detector.configure([str(workspace)], mapped_prefixes=[f"{workspace}/mapped"])
    own = os.stat(workspace).st_dev

    detector.observe(f"{workspace}/a.py", own)  # same device: fine
    detector.observe(f"{workspace}/mapped/b.py", own + 1)  # covered by a mapping: fine
    detector.observe(f"{workspace}/mnt/c.py", own + 1)
    detector.observe(f"{workspace}/mnt/d.py", own + 1)  # same device again: one flag
    detector.observe("/elsewhere/e.py", own + 2)  # under no root: not this detector's business

    flags = detector.flags()
    assert [(f.path, f.device, f.root, f.root_device) for f in flags] == [
        (f"{workspace}/mnt/c.py", own + 1, str(workspace), own)
    ]


@pytest.fixture
def other_device_dir() -> Iterator[Path]:
    """A directory on a different device than ``/`` (a tmpfs), or skip."""
    if not os.path.isdir("/dev/shm") or os.stat("/dev/shm").st_dev == os.stat("/").st_dev:
        pytest.skip("no second filesystem (/dev/shm on its own device) on this machine")
    path = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="selfctx-dev-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_reading_a_file_on_another_mount_raises_a_flag_without_extra_io(
    make_fs_service: MakeFsService, other_device_dir: Path, workspace: Path, ns: str
) -> None:
    write(other_device_dir / "mounted.txt", "m\n")
    write(workspace / "plain.txt", "p\n")
    detector = UnconfiguredMounts()
    service = make_fs_service(track=False, roots=["/"], mount_detector=detector)
    sid = f"{ns}dev"
    service.start_session(sid)

    service.index_file(sid, str(workspace / "plain.txt"))
    assert detector.flags() == []
    service.index_file(sid, str(other_device_dir / "mounted.txt"))

    flags = detector.flags()
    assert [(f.path, f.root) for f in flags] == [(str(other_device_dir / "mounted.txt"), "/")]
    assert flags[0].device == os.stat(other_device_dir).st_dev
