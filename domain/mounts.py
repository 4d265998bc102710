"""Mount mappings (docs/specification.md §3): agent-visible paths to canonical source bindings and
back.

Pure string work on POSIX paths: nothing here touches a filesystem. Symlinks are resolved by the
filesystem adapter, in the agent's namespace: a link under a mount points at a path the agent
sees, translated through this table (decision 0028).
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from selfctx.domain.errors import InvalidInput, InvalidPath
from selfctx.domain.objects import FilesystemSource, Source

__all__ = ["MountMapping", "MountTable", "normalize_absolute"]


def normalize_absolute(path: str) -> str:
    """Lexically normalise an absolute POSIX path: collapse ``//``, ``.`` and ``..``.

    ``..`` above the root stays at the root, as the kernel does. Raises :class:`InvalidPath` for
    a non-string, empty, relative or NUL-containing path.
    """
    if not isinstance(path, str):
        raise InvalidPath(path, "a path must be a string")
    if not path:
        raise InvalidPath(path, "a path must not be empty")
    if "\x00" in path:
        raise InvalidPath(path, "a path must not contain NUL")
    if not path.startswith("/"):
        raise InvalidPath(path, "an absolute path is required here")
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    return "/" + "/".join(parts)


def _under(path: str, prefix: str) -> str | None:
    """The rest of ``path`` below ``prefix`` ('' for the prefix itself), or None if outside."""
    if prefix == "/":
        return path[1:]
    if path == prefix:
        return ""
    if path.startswith(prefix + "/"):
        return path[len(prefix) + 1 :]
    return None


def _join(prefix: str, rest: str) -> str:
    if not rest:
        return prefix
    return prefix.rstrip("/") + "/" + rest


@attrs.frozen
class MountMapping:
    """One mount: paths under ``agent_prefix`` are files under ``canonical_prefix`` on the
    filesystem ``filesystem_id`` (for a bind mount, the host's)."""

    agent_prefix: str = attrs.field(converter=normalize_absolute)
    """Where the agent sees the mount, e.g. ``/workspace``."""
    canonical_prefix: str = attrs.field(converter=normalize_absolute)
    """Where the files really are, e.g. ``/home/abaris/project``."""
    filesystem_id: str
    """The filesystem the canonical prefix lives on."""
    read_only: bool = False
    """Whether the mount is read-only for the agent (informational)."""

    def __attrs_post_init__(self) -> None:
        if not self.filesystem_id:
            raise InvalidInput("filesystem id", self.filesystem_id, "must not be empty")


def _mappings(items: Iterable[MountMapping]) -> tuple[MountMapping, ...]:
    return tuple(items)


@attrs.frozen
class MountTable:
    """The mounts an agent sees, plus the filesystem of every path under no mount."""

    default_filesystem_id: str
    """The agent's own filesystem: the host's for an unsandboxed agent, else the container's."""
    mappings: tuple[MountMapping, ...] = attrs.field(default=(), converter=_mappings)

    def __attrs_post_init__(self) -> None:
        if not self.default_filesystem_id:
            raise InvalidInput("filesystem id", self.default_filesystem_id, "must not be empty")

    def translate(self, path: str) -> tuple[str, str, MountMapping | None]:
        """Forward translation of a path that is already normalised (not checked):
        ``(filesystem id, canonical path, the mapping or None)``. For callers that translate
        many paths, such as a walk through a namespace one component at a time."""
        best: MountMapping | None = None
        for mapping in self.mappings:
            prefix = mapping.agent_prefix
            if (prefix == "/" or path == prefix or path.startswith(prefix + "/")) and (
                best is None or len(prefix) > len(best.agent_prefix)
            ):
                best = mapping
        if best is None:
            return self.default_filesystem_id, path, None
        rest = _under(path, best.agent_prefix)
        assert rest is not None
        return best.filesystem_id, _join(best.canonical_prefix, rest), best

    def mapping_for(self, agent_path: str) -> MountMapping | None:
        """The mapping an agent path falls under (the longest agent prefix), or None."""
        return self.translate(normalize_absolute(agent_path))[2]

    def to_source(self, agent_path: str) -> Source:
        """Forward translation: the longest agent prefix wins; no match keeps the path with the
        default filesystem id."""
        filesystem_id, path, _ = self.translate(normalize_absolute(agent_path))
        return FilesystemSource(filesystem_id=filesystem_id, path=path)

    def covering(self, source: Source) -> MountMapping | None:
        """The mapping whose canonical prefix holds ``source`` (the longest one), or None: the
        mount through which the agent sees that file."""
        best: MountMapping | None = None
        for mapping in self.mappings:
            if mapping.filesystem_id != source.filesystem_id:
                continue
            if _under(source.path, mapping.canonical_prefix) is not None and (
                best is None or len(mapping.canonical_prefix) > len(best.canonical_prefix)
            ):
                best = mapping
        return best

    def display_path(self, source: Source) -> str:
        """Reverse translation: the agent-visible path of a source; the canonical path when no
        mapping covers it (the longest canonical prefix on the same filesystem wins)."""
        mapping = self.covering(source)
        if mapping is None:
            return source.path
        rest = _under(source.path, mapping.canonical_prefix)
        assert rest is not None
        return _join(mapping.agent_prefix, rest)

    def agent_roots(self, canonical_root: str) -> tuple[str, ...]:
        """The agent-visible directories under which the agent names files inside the canonical
        directory ``canonical_root`` (a host directory a server was told to allow): the root
        itself, as an unsandboxed agent sees it; where a mount puts it, when the root lies in a
        mount; and every mount that lies inside the root."""
        root = normalize_absolute(canonical_root)
        found = [root]
        for mapping in self.mappings:
            inside = _under(root, mapping.canonical_prefix)
            if inside is not None:
                found.append(_join(mapping.agent_prefix, inside))
            elif _under(mapping.canonical_prefix, root) is not None:
                found.append(mapping.agent_prefix)
        return tuple(dict.fromkeys(found))

    def agent_path(self, canonical_path: str) -> str:
        """Where the agent sees a canonical path: through the mount with the longest canonical
        prefix that covers it, else the path itself."""
        path = normalize_absolute(canonical_path)
        best: tuple[int, MountMapping, str] | None = None
        for mapping in self.mappings:
            rest = _under(path, mapping.canonical_prefix)
            if rest is not None and (best is None or len(mapping.canonical_prefix) > best[0]):
                best = (len(mapping.canonical_prefix), mapping, rest)
        return path if best is None else _join(best[1].agent_prefix, best[2])
