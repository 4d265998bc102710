"""Durability and failure on a RocksDB node: restarts, kill -9, a stopped or hung node."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from selfctx.adapters.xtdb import XtdbNode, XtdbStore, open_store
from selfctx.adapters.xtdb.node import TWO_STORES_DIRS
from selfctx.application.ports.store import (
    Expect,
    ObjectStore,
    StoreError,
    StoreProtocolError,
    StoreUnavailable,
)
from selfctx.contracts.store import StoreContract

pytestmark = pytest.mark.xtdb


@pytest.fixture(params=["records", "two-stores"])
def layout_node(
    request: pytest.FixtureRequest, xtdb_jars: Path, tmp_path: Path
) -> Iterator[XtdbNode]:
    """A RocksDB node of either data directory layout (decision 0166): ``records``, what a new
    directory gets (one RocksDB for the tx-log and the documents, one fsync a commit), or
    ``two-stores``, a directory written before it (``tx-log`` and ``documents``), which keeps it."""
    data = tmp_path / "data"
    if request.param == "two-stores":
        for name in TWO_STORES_DIRS:
            (data / name).mkdir(parents=True, mode=0o700)
    node = XtdbNode("rocksdb", data)
    try:
        node.start()
        assert (data / "records").exists() == (request.param == "records")
        yield node
    finally:
        node.stop(timeout=20)


def snapshot(store: XtdbStore, ids: list[str], tx_ids: list[int], session: str) -> dict[str, Any]:
    """Everything the port can tell about ``ids``, to compare before and after a restart."""
    return {
        "latest": store.get_many(ids),
        "one_by_one": {i: store.get(i) for i in ids},
        "history": {i: store.history(i) for i in ids},
        "as_of": {t: store.get_many_as_of(ids, t) for t in tx_ids},
        "log": store.session_log(session),
        "types": store.ids_of_type("file"),
        "latest_tx": store.latest_tx(),
    }


def test_a_restart_keeps_everything(rocksdb_node: XtdbNode) -> None:
    store = open_store(rocksdb_node.url, timeout=10.0)
    ids = [f"file-{i}" for i in range(30)]
    receipts = []
    for version in range(4):
        docs = [{"xt/id": i, "type": "file", "v": version, "body": f"{i}@{version}"} for i in ids]
        log = {
            "xt/id": f"log:s:{version:09d}",
            "type": "session_log",
            "session_id": "s",
            "seq": version,
        }
        receipts.append(store.commit([*docs, log]))
    tx_ids = [r.tx_id for r in receipts]
    before = snapshot(store, ids, tx_ids, "s")
    assert len(before["history"]["file-0"]) == 4

    rocksdb_node.stop()
    with pytest.raises(StoreUnavailable):
        store.get("file-0")
    rocksdb_node.start()
    # The same store object carries on once the node is back on its port.
    assert snapshot(store, ids, tx_ids, "s") == before
    after = store.commit([{"xt/id": "file-0", "type": "file", "v": 4}])
    assert after.tx_id > tx_ids[-1]
    store.close()


def test_kill_9_loses_no_acknowledged_commit(layout_node: XtdbNode) -> None:
    """A commit is acknowledged once its tx-log entry is synced; in the one-RocksDB layout its
    documents were written to the same log unsynced just before (decision 0166), in the
    layout before it they were synced on their own: either way they are all there."""
    rocksdb_node = layout_node
    acked: list[int] = []
    attempted: list[int] = []
    failure: list[BaseException] = []
    store = open_store(rocksdb_node.url, timeout=5.0)

    def writer() -> None:
        previous = None
        for i in range(10_000):
            attempted.append(i)
            counter = {"xt/id": "counter", "v": i}
            docs = [{"xt/id": f"c{i}-{part}", "part": part, "i": i} for part in range(3)]
            try:
                store.commit([counter, *docs], [Expect("counter", previous)])
            except StoreError as exc:
                failure.append(exc)
                return
            acked.append(i)
            previous = counter

    thread = threading.Thread(target=writer)
    thread.start()
    # Let a random number of commits through, then crash the node in the middle of the stream.
    target = random.randint(20, 60)
    deadline = time.monotonic() + 60
    while len(acked) < target and time.monotonic() < deadline and thread.is_alive():
        thread.join(0.01)
    rocksdb_node.kill()
    thread.join(30)
    store.close()
    assert not thread.is_alive()
    # Typically "connection refused"; a node killed while it answered would cut the body short.
    assert failure and isinstance(failure[0], StoreUnavailable | StoreProtocolError), failure
    assert len(acked) >= target

    rocksdb_node.start()
    with closing(open_store(rocksdb_node.url, timeout=10.0)) as after:
        for i in acked:
            assert after.get_many([f"c{i}-{p}" for p in range(3)]) == {
                f"c{i}-{p}": {"xt/id": f"c{i}-{p}", "part": p, "i": i} for p in range(3)
            }
        # The commit in flight at the crash is there whole or not at all.
        in_flight = attempted[-1]
        parts = after.get_many([f"c{in_flight}-{p}" for p in range(3)])
        assert len(parts) in (0, 3)
        counter = after.get("counter")
        assert counter is not None
        assert counter["v"] == (in_flight if parts else acked[-1])
        assert [v.document["v"] for v in after.history("counter")] == list(range(counter["v"] + 1))


def _files(folder: Path, suffix: str) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in folder.glob(f"*{suffix}")}


def _write_files(store: XtdbStore, versions: int) -> tuple[list[str], list[int]]:
    """20 files, ``versions`` commits of each; a body is 1,000 random hex digits (at least 500
    bytes however it is compressed: the documents' part, which the index does not hold)."""
    ids = [f"file-{i}" for i in range(20)]
    tx_ids = []
    for version in range(versions):
        docs = [
            {"xt/id": i, "type": "file", "v": version, "body": random.randbytes(500).hex()}
            for i in ids
        ]
        log = {
            "xt/id": f"log:s:{version:09d}",
            "type": "session_log",
            "session_id": "s",
            "seq": version,
        }
        tx_ids.append(store.commit([*docs, log]).tx_id)
    return ids, tx_ids


def test_the_index_store_keeps_no_write_ahead_log(rocksdb_node: XtdbNode) -> None:
    """Decision 0016: the index store writes no WAL and flushes its column families atomically;
    the tx-log and the documents keep theirs, one for both (decision 0166)."""
    with closing(open_store(rocksdb_node.url, timeout=10.0)) as store:
        _write_files(store, versions=20)
    assert rocksdb_node.data_dir is not None
    indexes = rocksdb_node.data_dir / "indexes"
    assert sum(_files(indexes, ".log").values()) == 0
    assert sum(_files(rocksdb_node.data_dir / "records", ".log").values()) > 0
    options = max(indexes.glob("OPTIONS-*"), key=lambda p: p.stat().st_mtime).read_text()
    assert "atomic_flush=true" in options.replace(" ", "")
    # A clean stop flushes what the log would have held: the index entries of the 420 versions
    # are on disk, so a restart has nothing to index again.
    before = sum(_files(indexes, ".sst").values())
    rocksdb_node.stop()
    assert sum(_files(indexes, ".sst").values()) > before


def test_kill_9_rebuilds_the_index_from_the_tx_log(layout_node: XtdbNode) -> None:
    """The index entries of every commit die with the node (nothing was flushed); the restarted
    node indexes the tx-log again and answers exactly as before, history and as-of included."""
    rocksdb_node = layout_node
    assert rocksdb_node.data_dir is not None
    store = open_store(rocksdb_node.url, timeout=10.0)
    ids, tx_ids = _write_files(store, versions=8)
    before = snapshot(store, ids, tx_ids, "s")
    assert len(before["history"]["file-0"]) == 8
    store.close()
    rocksdb_node.kill()
    # The bodies alone are 80 KB however compressed; the index's files hold a fraction of that.
    assert sum(_files(rocksdb_node.data_dir / "indexes", ".sst").values()) < 20_000

    rocksdb_node.start()
    with closing(open_store(rocksdb_node.url, timeout=10.0)) as after:
        assert snapshot(after, ids, tx_ids, "s") == before
        assert after.commit([{"xt/id": "file-0", "type": "file", "v": 8}]).tx_id > tx_ids[-1]


def test_a_stopped_node_fails_the_next_operation_in_time(rocksdb_node: XtdbNode) -> None:
    timeout = 2.0
    store = open_store(rocksdb_node.url, timeout=timeout)
    store.commit([{"xt/id": "before", "v": 1}])
    rocksdb_node.stop()
    for operation in (
        lambda: store.commit([{"xt/id": "during-1", "v": 1}, {"xt/id": "during-2", "v": 1}]),
        lambda: store.get("before"),
        lambda: store.session_log("s"),
    ):
        started = time.monotonic()
        with pytest.raises(StoreUnavailable) as info:
            operation()
        assert time.monotonic() - started < timeout
        assert info.value.url == rocksdb_node.url
    rocksdb_node.start()
    assert store.get_many(["before", "during-1", "during-2"]) == {
        "before": {"xt/id": "before", "v": 1}
    }
    store.commit([{"xt/id": "after", "v": 1}])
    assert store.get("after") == {"xt/id": "after", "v": 1}
    store.close()


def test_a_hung_node_fails_the_operation_within_the_timeout(rocksdb_node: XtdbNode) -> None:
    timeout = 1.5
    store = open_store(rocksdb_node.url, timeout=timeout)
    store.commit([{"xt/id": "before", "v": 1}])
    rocksdb_node.suspend()
    try:
        for operation in (
            lambda: store.commit([{"xt/id": "hung-1", "v": 1}, {"xt/id": "hung-2", "v": 1}]),
            lambda: store.get_many(["before"]),
        ):
            started = time.monotonic()
            with pytest.raises(StoreUnavailable):
                operation()
            # The timeout bounds the whole call, however many requests it makes.
            assert time.monotonic() - started < timeout + 0.5
    finally:
        rocksdb_node.resume()
    # The node got the commit's request before it froze and may apply it after all: whole.
    store.client.sync(wait=9.0, timeout=10.0)
    assert len(store.get_many(["hung-1", "hung-2"])) in (0, 2)
    assert store.get("before") == {"xt/id": "before", "v": 1}
    store.close()


@pytest.fixture(scope="module")
def restarting_node(
    xtdb_jars: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[XtdbNode]:
    node = XtdbNode("rocksdb", tmp_path_factory.mktemp("contract") / "data")
    node.start()
    yield node
    node.stop()


class TestXtdbStoreOnRocksDB(StoreContract):
    """The contract once more on a RocksDB node that is restarted in the middle of the suite."""

    calls = 0

    @pytest.fixture(autouse=True)
    def _node(self, restarting_node: XtdbNode) -> None:
        self.node = restarting_node

    def make_store(self) -> ObjectStore:
        type(self).calls += 1
        if type(self).calls == 7:
            self.node.stop()
            self.node.start()
        return open_store(self.node.url, timeout=10.0)
