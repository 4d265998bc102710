"""Starting, finding and stopping nodes: the launcher, the pid files and ``selfctx xtdb``."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import httpx
import pytest

from selfctx.adapters.cli.main import main
from selfctx.adapters.xtdb import NodeStartError, XtdbNode, ensure_local_node, local

pytestmark = pytest.mark.xtdb


def listening_addresses(port: int) -> set[str]:
    """Local addresses with a socket listening on ``port``, from /proc/net/tcp{,6} (hex)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            pytest.skip("needs Linux's /proc/net")
        with open(table) as f:
            for line in f.readlines()[1:]:
                local_address, state = line.split()[1], line.split()[3]
                address, hex_port = local_address.split(":")
                if state == "0A" and int(hex_port, 16) == port:  # 0A = LISTEN
                    found.add(address)
    return found


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, exited but not yet reaped, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_node_listens_on_loopback_only(xtdb_node: XtdbNode) -> None:
    assert xtdb_node.port is not None
    # 127.0.0.1 as an IPv4 socket, or as an IPv4-mapped address on an IPv6 socket.
    assert listening_addresses(xtdb_node.port) <= {
        "0100007F",
        "0000000000000000FFFF00000100007F",
    }
    assert listening_addresses(xtdb_node.port)


def test_a_context_manager_node_is_gone_afterwards(xtdb_jars: Path, tmp_path: Path) -> None:
    with XtdbNode("memory", run_dir=tmp_path) as node:
        pid = node.pid
        assert pid is not None
        status = httpx.get(f"{node.url}/_xtdb/status", headers=node.headers)
        assert status.json()["version"] == "1.24.5"
        assert (tmp_path / "node.json").exists()
        assert node.started_in is not None
    assert not alive(pid)
    assert not (tmp_path / "node.json").exists()
    assert "Node started" in (tmp_path / "node.log").read_text()


def test_a_taken_port_fails_fast_with_the_log(xtdb_jars: Path, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        node = XtdbNode("memory", run_dir=tmp_path, port=taken.getsockname()[1])
        with pytest.raises(NodeStartError) as info:
            node.start()
    assert "exited" in str(info.value)
    assert "Address already in use" in info.value.log_tail
    assert node.pid is None


def test_one_rocksdb_directory_admits_one_node(rocksdb_node: XtdbNode, tmp_path: Path) -> None:
    second = XtdbNode("rocksdb", rocksdb_node.data_dir, run_dir=tmp_path / "second")
    with pytest.raises(NodeStartError) as info:
        second.start()
    assert "lock" in info.value.log_tail.lower()
    assert httpx.get(f"{rocksdb_node.url}/_xtdb/status", headers=rocksdb_node.headers).is_success


def test_cli_start_status_stop(
    xtdb_jars: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    try:
        assert main(["xtdb", "start", "--data", str(data)]) == 0
        url = capsys.readouterr().out.strip()
        assert url.startswith("http://127.0.0.1:")
        info = local.read_run_info(data)
        assert info is not None and info.url == url
        # A second start finds the running node instead of starting another.
        assert main(["xtdb", "start", "--data", str(data)]) == 0
        assert capsys.readouterr().out.strip() == url
        assert main(["xtdb", "status", "--data", str(data)]) == 0
        assert "running: " + url in capsys.readouterr().out
    finally:
        assert main(["xtdb", "stop", "--data", str(data)]) == 0
    assert "stopped" in capsys.readouterr().out
    assert not alive(info.pid)
    assert main(["xtdb", "status", "--data", str(data)]) == 1
    assert "not running" in capsys.readouterr().out


def test_auto_reuses_the_node_and_replaces_a_dead_one(xtdb_jars: Path, tmp_path: Path) -> None:
    data = tmp_path / "auto"
    try:
        url = ensure_local_node(data)
        first = local.read_run_info(data)
        assert first is not None
        assert ensure_local_node(data) == url
        assert local.read_run_info(data) == first
        # A crash leaves a stale pid file behind; the next command starts a new node.
        os.kill(first.pid, signal.SIGKILL)
        local._wait_for_exit(first.pid, 10)
        assert not local.node_status(data).running
        ensure_local_node(data)
        second = local.read_run_info(data)
        assert second is not None and second.pid != first.pid
        assert local.node_status(data).running
    finally:
        local.stop_background(data)
    assert not local.node_status(data).running
