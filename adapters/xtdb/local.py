"""Background nodes that outlive the command that started them, found again by their pid file.

``selfctx xtdb start`` and ``--store auto`` start a node detached from the terminal and leave a
``node.json`` in its run directory; ``status``, ``stop`` and the next ``auto`` read it. A pid file
whose process is gone (a crash, a reboot) or belongs to another program is stale and is ignored.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import signal
import time
from pathlib import Path
from typing import Any

import attrs
import httpx

from selfctx.adapters.xtdb import paths, secret
from selfctx.adapters.xtdb.node import PID_FILE, ConfigName, RunInfo, XtdbNode


@attrs.frozen
class NodeStatus:
    """What ``selfctx xtdb status`` reports about one run directory."""

    running: bool
    """True if the pid file names a live XTDB process that answers on its URL."""
    info: RunInfo | None
    """The pid file's content, if there is one (stale or not)."""
    xtdb: dict[str, Any] | None
    """The node's own ``/_xtdb/status`` answer while it runs."""


def read_run_info(run_dir: Path) -> RunInfo | None:
    """The pid file of ``run_dir``, or None if there is none or it cannot be read."""
    try:
        return RunInfo(**json.loads((run_dir / PID_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _is_our_node(pid: int, run_dir: str) -> bool:
    """The pid is alive and (where /proc tells) is a JVM running this run directory's config."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    cmdline = Path(f"/proc/{pid}/cmdline")
    if cmdline.exists():
        # A recycled pid would run something else; our JVM names its config file.
        return run_dir.encode() in cmdline.read_bytes() and b"xtdb.main" in cmdline.read_bytes()
    return True


def node_status(run_dir: Path, *, timeout: float = 5.0) -> NodeStatus:
    """Whether the node of ``run_dir`` runs and answers, with its own status map."""
    info = read_run_info(run_dir)
    if info is None or not _is_our_node(info.pid, info.run_dir):
        return NodeStatus(False, info, None)
    headers = {"Accept": "application/json"}
    key = secret.read_key(info.url)
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    try:
        answer = httpx.get(f"{info.url}/_xtdb/status", headers=headers, timeout=timeout)
        answer.raise_for_status()
        return NodeStatus(True, info, answer.json())
    except (httpx.HTTPError, ValueError):
        return NodeStatus(False, info, None)


def _wait_for_exit(pid: int, timeout: float) -> bool:
    """Wait until ``pid`` (not our child) exits; True if it did within ``timeout``."""
    deadline = time.monotonic() + timeout
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is not None:
        try:
            fd = pidfd_open(pid)
        except ProcessLookupError:
            return True
        try:
            # The descriptor becomes readable when the process exits: no polling needed.
            readable, _, _ = select.select([fd], [], [], timeout)
            return bool(readable)
        finally:
            os.close(fd)
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def stop_background(run_dir: Path, *, timeout: float = 30.0) -> bool:
    """Stop the node of ``run_dir``: SIGTERM, then SIGKILL; False if none was running."""
    info = read_run_info(run_dir)
    if info is None:
        return False
    running = _is_our_node(info.pid, info.run_dir)
    if running:
        os.kill(info.pid, signal.SIGTERM)
        if not _wait_for_exit(info.pid, timeout):
            with contextlib.suppress(ProcessLookupError):
                os.kill(info.pid, signal.SIGKILL)
            _wait_for_exit(info.pid, 10.0)
        # If this process started the node (tests, an embedding program), reap the zombie.
        with contextlib.suppress(ChildProcessError):
            os.waitpid(info.pid, os.WNOHANG)
        key = secret.read_key(info.url)
        if key is not None:
            secret.remove_key(secret.key_file(info.url), key)
    (run_dir / PID_FILE).unlink(missing_ok=True)
    return running


def start_background(
    config: ConfigName, data_dir: Path | None, *, run_dir: Path, port: int | None = None
) -> RunInfo:
    """Start a detached node for ``run_dir`` unless one already runs there; its pid file."""
    return _start_background(config, data_dir, run_dir=run_dir, port=port)[0]


def _start_background(
    config: ConfigName, data_dir: Path | None, *, run_dir: Path, port: int | None = None
) -> tuple[RunInfo, bool]:
    """The node's pid file, and whether this call started it (False: it was running)."""
    status = node_status(run_dir)
    if status.running and status.info is not None:
        return status.info, False
    node = XtdbNode(config, data_dir, port=port, run_dir=run_dir)
    node.start(detach=True)
    info = read_run_info(run_dir)
    assert info is not None, "start() writes the pid file"
    return info, True


@attrs.frozen
class LocalNode:
    """The local node ``--store auto`` uses."""

    info: RunInfo
    """Its pid file: URL, pid, run and data directories."""
    started: bool
    """True if this call started it; it keeps running after the caller exits (until
    ``selfctx xtdb stop``), so that the next command finds the same data at once."""

    @property
    def url(self) -> str:
        return self.info.url

    def stop_hint(self) -> str:
        """The command that stops it."""
        default = Path(self.info.run_dir) == paths.default_data_dir()
        return "selfctx xtdb stop" + ("" if default else f" --data {self.info.run_dir}")


def local_node(data_dir: Path | str | None = None) -> LocalNode:
    """The local RocksDB node for ``data_dir``, started in the background if needed.

    This is ``--store auto``: the first command starts a node under the user's data directory
    (``paths.default_data_dir()``), later ones reuse it. A lock file keeps two commands started
    at once from racing to start two nodes on one RocksDB directory.
    """
    data = Path(data_dir).resolve() if data_dir is not None else paths.default_data_dir()
    secret.private_dir(data)
    fd = os.open(data / ".node.lock", os.O_WRONLY | os.O_CREAT, 0o600)
    with os.fdopen(fd, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return LocalNode(*_start_background("rocksdb", data, run_dir=data))


def ensure_local_node(data_dir: Path | str | None = None) -> str:
    """The URL of :func:`local_node`."""
    return local_node(data_dir).url
