"""Resolving a path one component at a time, following no link the walk has not read itself.

The reader used to ask ``realpath()`` and then open the answer: a directory swapped for a link in
between was followed by ``open()``, outside the allowed roots (decision 0028). Here every
component is opened relative to the descriptor of the directory before it, with ``O_NOFOLLOW``:
the kernel never follows a link, the walk reads the link's target and goes on from there. What
the walk ends on is the file at the path it reports, whatever changes around it meanwhile, and
the reader checks that path, then reads that descriptor.

The walk runs in the agent's namespace (decision 0028). Paths are the agent's; the mount table
says where each one lives. A link's target is a path the agent sees: an absolute target under a
mount is translated to the host, one under no mount is on the agent's own filesystem (a
container's, when the agent is sandboxed) and cannot be read here. For a reader without mounts,
or a host file under no mount, the namespace is the host's own.

Like ``realpath()``, the walk does not fail on a component that is missing: the rest of the path
is taken lexically, and the result says what was missing.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Literal

import attrs

from selfctx.domain.mounts import MountMapping, MountTable

__all__ = ["MAX_LINKS", "Walked", "walk"]

MAX_LINKS = 40
"""Links followed in one walk before giving up (Linux's own limit, ELOOP)."""

_O_PATH: int = getattr(os, "O_PATH", 0)
_CLOEXEC: int = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW: int = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY: int = getattr(os, "O_DIRECTORY", 0)

State = Literal["found", "missing", "no_parent", "foreign", "denied", "loop"]


@attrs.frozen
class Walked:
    """Where a walk ended. The caller closes ``fd`` (and ``parent_fd``) with :meth:`close`."""

    state: State
    """``found``: ``fd`` is the file; ``missing``: its directory exists, it does not;
    ``no_parent``: a directory on the way is missing (or is not a directory); ``foreign``: it is on
    a filesystem other than the host's; ``denied``: a directory on the way cannot be searched;
    ``loop``: more than :data:`MAX_LINKS` links."""
    agent_path: str
    """The resolved path in the agent's namespace."""
    host_path: str | None
    """The resolved path on the host (as the kernel names the descriptor, when it is open); None
    when it is on another filesystem."""
    fd: int | None = None
    """An ``O_PATH`` descriptor of the file (where the platform has them), when found."""
    st: os.stat_result | None = None
    """``fstat`` of ``fd``."""
    parent_fd: int | None = None
    """The directory holding it, and its name there (to open it where ``/proc`` is missing)."""
    name: str = ""

    def close(self) -> None:
        """Close the descriptors this walk left open."""
        for fd in (self.fd, self.parent_fd):
            if fd is not None:
                os.close(fd)


@attrs.define
class _Entry:
    """One directory (or the final file) on the walk's stack."""

    agent_path: str
    host_path: str | None
    mapping: MountMapping | None
    fd: int | None
    state: State = "found"
    st: os.stat_result | None = None
    """Its ``fstat``; None for a directory opened as one (and for what is not there)."""


def _join(parent: str, name: str) -> str:
    return "/" + name if parent == "/" else parent + "/" + name


def _components(path: str) -> list[str]:
    """The names of ``path``, last first (the walk pops them from the end)."""
    return [part for part in reversed(path.split("/")) if part not in ("", ".")]


def _kernel_path(fd: int, fallback: str) -> str:
    """The path the kernel gives the descriptor now (symlinks in a mount's own canonical prefix
    resolved, as realpath would), else ``fallback`` where there is no ``/proc``."""
    try:
        named = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return fallback
    return named if named.startswith("/") and not named.endswith(" (deleted)") else fallback


def _open_here(name: str, dir_fd: int) -> tuple[int | None, os.stat_result]:
    """Open ``name`` in the directory ``dir_fd`` without following a link; its descriptor (None for
    a link or, without ``O_PATH``, anything but a directory) and its ``lstat``."""
    if _O_PATH:
        fd = os.open(name, _O_PATH | _NOFOLLOW | _CLOEXEC, dir_fd=dir_fd)
        return fd, os.fstat(fd)
    st = os.lstat(name, dir_fd=dir_fd)
    if not stat.S_ISDIR(st.st_mode):
        return None, st
    fd = os.open(name, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=dir_fd)
    opened = os.fstat(fd)
    if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino):
        os.close(fd)  # swapped between the two calls: look again
        return _open_here(name, dir_fd)
    return fd, opened


def _open_mount_root(host_path: str) -> tuple[int | None, os.stat_result]:
    """Open where a mount (or the host's own namespace) starts: a directory, or a file mounted on
    its own. It comes from the configuration, not from the files walked, so links in it are
    followed, as the mount did."""
    if _O_PATH:
        fd = os.open(host_path, _O_PATH | _CLOEXEC)
        return fd, os.fstat(fd)
    st = os.stat(host_path)
    if not stat.S_ISDIR(st.st_mode):
        return None, st
    fd = os.open(host_path, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    return fd, os.fstat(fd)


class _Walk:
    def __init__(self, table: MountTable, host_id: str) -> None:
        self.table = table
        self.host_id = host_id
        self.stack: list[_Entry] = []
        self.links = 0
        self.host_only = not table.mappings and table.default_filesystem_id == host_id
        """The host's own namespace: every agent path is the host path (the common case)."""

    def locate(self, agent_path: str) -> tuple[str | None, MountMapping | None]:
        """Host path of an agent path (None if it is on another filesystem), and its mount."""
        if self.host_only:
            return agent_path, None
        filesystem_id, path, mapping = self.table.translate(agent_path)  # normalised by the walk
        return (path if filesystem_id == self.host_id else None), mapping

    def reset(self) -> None:
        """Back to the namespace's root (an absolute link target)."""
        for entry in self.stack:
            if entry.fd is not None:
                os.close(entry.fd)
        host, mapping = self.locate("/")
        self.stack = [self.enter("/", host, mapping)]

    def enter(self, agent_path: str, host: str | None, mapping: MountMapping | None) -> _Entry:
        if host is None:
            # The agent's own filesystem: nothing to look at here; a directory as far as we know.
            return _Entry(agent_path, None, mapping, None, "foreign")
        try:
            fd, st = _open_mount_root(host)
        except (FileNotFoundError, NotADirectoryError):
            return _Entry(agent_path, host, mapping, None, "missing")
        except PermissionError:
            return _Entry(agent_path, host, mapping, None, "denied")
        named = host if fd is None else _kernel_path(fd, host)
        return _Entry(agent_path, named, mapping, fd, "found", st)

    def step(self, name: str, todo: list[str]) -> None:
        top = self.stack[-1]
        agent_path = _join(top.agent_path, name)
        host, mapping = self.locate(agent_path)
        if top.st is not None and not stat.S_ISDIR(top.st.st_mode):
            # A file with something below it: no such path, as for a missing directory.
            self.push(_Entry(agent_path, host, mapping, None, "no_parent"))
            return
        if top.fd is None or mapping is not top.mapping:
            # Not on the host, missing, or a mount point: start from the mount's own root.
            if host is None or (top.fd is None and mapping is top.mapping):
                state: State = "foreign" if host is None else _below(top.state)
                self.push(_Entry(agent_path, host, mapping, None, state))
            else:
                self.push(self.enter(agent_path, host, mapping))
            return
        host_path = _join(top.host_path or "/", name)
        if _O_PATH and todo:
            # More follows, so this should be a directory: open it as one, with no fstat. A
            # link or a file fails with ENOTDIR and is looked at closer below.
            try:
                opened = os.open(name, _O_PATH | _NOFOLLOW | _DIRECTORY | _CLOEXEC, dir_fd=top.fd)
            except NotADirectoryError:
                pass
            except FileNotFoundError:
                self.push(_Entry(agent_path, host, mapping, None, "missing"))
                return
            except PermissionError:
                self.push(_Entry(agent_path, host, mapping, None, "denied"))
                return
            else:
                self.push(_Entry(agent_path, host_path, mapping, opened, "found"))
                return
        try:
            fd, st = _open_here(name, top.fd)
        except FileNotFoundError:
            self.push(_Entry(agent_path, host, mapping, None, "missing"))
            return
        except NotADirectoryError:
            self.push(_Entry(agent_path, host, mapping, None, "no_parent"))
            return
        except PermissionError:
            self.push(_Entry(agent_path, host, mapping, None, "denied"))
            return
        if stat.S_ISLNK(st.st_mode):
            if fd is not None:
                os.close(fd)
            self.follow(name, top.fd, todo)
            return
        self.push(_Entry(agent_path, host_path, mapping, fd, "found", st))

    def follow(self, name: str, dir_fd: int, todo: list[str]) -> None:
        self.links += 1
        if self.links > MAX_LINKS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
        try:
            target = os.readlink(name, dir_fd=dir_fd)
        except OSError:
            # Changed since it was opened: it is no link any more; walk it again.
            todo.append(name)
            return
        todo.extend(_components(target))
        if target.startswith("/"):
            self.reset()  # an absolute target is a path of the agent's namespace

    def push(self, entry: _Entry) -> None:
        self.stack.append(entry)

    def pop(self) -> None:
        if len(self.stack) > 1:
            entry = self.stack.pop()
            if entry.fd is not None:
                os.close(entry.fd)


def _below(state: State) -> State:
    """The state of a name below a directory that is not there."""
    return "foreign" if state == "foreign" else "denied" if state == "denied" else "no_parent"


def walk(agent_path: str, table: MountTable, host_id: str) -> Walked:
    """Resolve ``agent_path`` (absolute, normalised or not) in the namespace ``table`` describes.

    Raises nothing for missing parts (see :class:`Walked`); ``OSError`` only for what no walk can
    get past on this machine (running out of descriptors, I/O errors)."""
    w = _Walk(table, host_id)
    todo = _components(agent_path)
    try:
        w.reset()
        while todo:
            name = todo.pop()
            if name == "..":
                w.pop()
            else:
                w.step(name, todo)
    except OSError as exc:
        for entry in w.stack:
            if entry.fd is not None:
                os.close(entry.fd)
        if exc.errno == errno.ELOOP:
            return Walked("loop", agent_path, None)
        raise
    return _result(w)


def _result(w: _Walk) -> Walked:
    last = w.stack.pop()
    parent = w.stack.pop() if w.stack else None
    for entry in w.stack:
        if entry.fd is not None:
            os.close(entry.fd)
    if last.state == "found":
        host = last.host_path or "/"
        if last.fd is not None:
            host = _kernel_path(last.fd, host)
        # The parent is kept only if the file was opened in it (not a mount's own root).
        same_dir = parent is not None and parent.mapping is last.mapping
        parent_fd = parent.fd if parent is not None and same_dir else None
        if parent is not None and parent.fd is not None and parent_fd is None:
            os.close(parent.fd)
        name = last.agent_path.rsplit("/", 1)[-1]
        st = last.st if last.st is not None or last.fd is None else os.fstat(last.fd)
        return Walked("found", last.agent_path, host, last.fd, st, parent_fd, name)
    if parent is not None and parent.fd is not None:
        os.close(parent.fd)
    if last.state == "foreign":
        return Walked("foreign", last.agent_path, None)
    host_path = last.host_path
    if host_path is not None:
        host_path = _lexical_tail([*w.stack, *([parent] if parent else []), last], host_path)
    return Walked(last.state, last.agent_path, host_path)


def _lexical_tail(stack: list[_Entry], fallback: str) -> str:
    """The path of the deepest directory that was really there, with the rest of the path after
    it as written (what realpath gives for a path whose end does not exist)."""
    for depth in range(len(stack) - 1, -1, -1):
        entry = stack[depth]
        if entry.state == "found" and entry.host_path is not None:
            rest = [e.agent_path.rsplit("/", 1)[-1] for e in stack[depth + 1 :]]
            path = entry.host_path
            for name in rest:
                path = _join(path, name)
            return path
    return fallback
