"""Mount mappings (docs/specification.md §3) as pure functions: forward by longest agent prefix,
reverse by longest canonical prefix on the same filesystem, canonical path as the fallback."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from selfctx.domain.errors import InvalidInput, InvalidPath
from selfctx.domain.mounts import MountMapping, MountTable, normalize_absolute
from selfctx.domain.objects import FilesystemSource

HOST, BOX, OTHER = "host", "container", "nfs"

TABLE = MountTable(
    BOX,
    (
        MountMapping("/workspace", "/home/u/project", HOST),
        MountMapping("/workspace/vendor", "/mnt/vendor", HOST),
        MountMapping("/data", "/srv/data", OTHER),
    ),
)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/", "/"),
        ("//a//b/", "/a/b"),
        ("/a/./b/.", "/a/b"),
        ("/a/b/../c", "/a/c"),
        ("/../../x", "/x"),
        ("/a/..", "/"),
        ("/a/.../b", "/a/.../b"),
        ("/é/𝄞 x", "/é/𝄞 x"),
    ],
)
def test_normalize_absolute(path: str, expected: str) -> None:
    assert normalize_absolute(path) == expected


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("", "a path must not be empty"),
        ("a/b", "an absolute path is required here"),
        ("./a", "an absolute path is required here"),
        ("/a\x00b", "a path must not contain NUL"),
        (None, "a path must be a string"),
        (b"/a", "a path must be a string"),
    ],
)
def test_normalize_absolute_refuses(path: object, reason: str) -> None:
    with pytest.raises(InvalidPath) as raised:
        normalize_absolute(path)  # type: ignore[arg-type]
    assert (raised.value.path, raised.value.reason) == (path, reason)
    assert repr(path) in str(raised.value)


@pytest.mark.parametrize(
    ("agent", "filesystem", "canonical"),
    [
        ("/workspace/src/a.py", HOST, "/home/u/project/src/a.py"),
        ("/workspace", HOST, "/home/u/project"),
        ("/workspace/", HOST, "/home/u/project"),
        ("/workspace/vendor/lib.py", HOST, "/mnt/vendor/lib.py"),  # longest prefix wins
        ("/workspace/vendor", HOST, "/mnt/vendor"),
        ("/workspace/vendored.py", HOST, "/home/u/project/vendored.py"),  # not under vendor
        ("/workspace2/a", BOX, "/workspace2/a"),  # a prefix matches whole components only
        ("/tmp/x", BOX, "/tmp/x"),
        ("/workspace/../etc/passwd", BOX, "/etc/passwd"),  # normalised before matching
        ("/data/set.csv", OTHER, "/srv/data/set.csv"),
    ],
)
def test_forward_translation(agent: str, filesystem: str, canonical: str) -> None:
    assert TABLE.to_source(agent) == FilesystemSource(filesystem_id=filesystem, path=canonical)


@pytest.mark.parametrize(
    ("filesystem", "canonical", "display"),
    [
        (HOST, "/home/u/project/src/a.py", "/workspace/src/a.py"),
        (HOST, "/home/u/project", "/workspace"),
        (HOST, "/mnt/vendor/lib.py", "/workspace/vendor/lib.py"),
        (HOST, "/home/u/projectile", "/home/u/projectile"),  # no component match: canonical
        (HOST, "/etc/hosts", "/etc/hosts"),
        (BOX, "/home/u/project/a", "/home/u/project/a"),  # same path, other filesystem
        (OTHER, "/srv/data/x", "/data/x"),
    ],
)
def test_reverse_translation(filesystem: str, canonical: str, display: str) -> None:
    source = FilesystemSource(filesystem_id=filesystem, path=canonical)
    assert TABLE.display_path(source) == display


def test_longest_canonical_prefix_wins_in_reverse() -> None:
    table = MountTable(
        BOX,
        (
            MountMapping("/w", "/home/u", HOST),
            MountMapping("/deps", "/home/u/deps", HOST),
        ),
    )
    assert table.display_path(FilesystemSource(HOST, "/home/u/deps/x")) == "/deps/x"
    assert table.display_path(FilesystemSource(HOST, "/home/u/x")) == "/w/x"


def test_a_root_mapping_covers_everything() -> None:
    table = MountTable(BOX, (MountMapping("/", "/chroot", HOST),))
    assert table.to_source("/a/b") == FilesystemSource(HOST, "/chroot/a/b")
    assert table.to_source("/") == FilesystemSource(HOST, "/chroot")
    assert table.display_path(FilesystemSource(HOST, "/chroot/a/b")) == "/a/b"
    assert table.display_path(FilesystemSource(HOST, "/chroot")) == "/"


def test_no_mappings_is_an_unsandboxed_agent() -> None:
    table = MountTable(HOST)
    source = table.to_source("/home/u/x.py")
    assert source == FilesystemSource(HOST, "/home/u/x.py")
    assert table.display_path(source) == "/home/u/x.py"


@pytest.mark.parametrize("bad", ["", None])
def test_filesystem_ids_must_not_be_empty(bad: object) -> None:
    with pytest.raises(InvalidInput):
        MountTable(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        MountMapping("/a", "/b", bad)  # type: ignore[arg-type]


SEGMENT = st.text(alphabet="abcxyz._-é", min_size=1, max_size=6).filter(
    lambda s: s not in (".", "..")
)
REST = st.lists(SEGMENT, max_size=4).map(lambda parts: "/".join(parts))


@given(rest=REST, mount=st.sampled_from(["/workspace", "/workspace/vendor", "/data"]))
def test_display_path_inverts_translation_under_a_mount(rest: str, mount: str) -> None:
    agent = f"{mount}/{rest}" if rest else mount
    source = TABLE.to_source(agent)
    assert source.filesystem_id != BOX
    assert TABLE.display_path(source) == agent


@given(rest=REST)
def test_paths_under_no_mount_keep_their_path_on_the_default_filesystem(rest: str) -> None:
    agent = f"/tmp/{rest}"
    source = TABLE.to_source(agent)
    assert source == FilesystemSource(BOX, normalize_absolute(agent))
    assert TABLE.display_path(source) == source.path
