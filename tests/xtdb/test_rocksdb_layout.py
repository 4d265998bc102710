"""A RocksDB node's data directory layout (decision 0166): the tx-log and the documents in one
RocksDB for a new directory; a directory written before keeps its two, and is never moved."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import pytest

from selfctx.adapters.xtdb import XtdbNode, open_store
from selfctx.adapters.xtdb.errors import XtdbSetupError
from selfctx.adapters.xtdb.node import TWO_STORES_DIRS, render_config, rocksdb_layout


def _render(data: Path) -> str:
    return render_config("rocksdb", port=1, data_dir=data, postgres=None, secret_file=data / "key")


def _old_layout(data: Path) -> None:
    for name in TWO_STORES_DIRS:
        (data / name).mkdir(parents=True, mode=0o700)


def test_a_new_data_directory_gets_one_rocksdb_for_the_tx_log_and_the_documents(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    assert rocksdb_layout(data) == "records"
    config = _render(data)
    assert str(data / "records") in config
    assert "selfctx.rocksdb/->synced-kv-store" in config
    assert str(data / "tx-log") not in config and str(data / "documents") not in config


@pytest.mark.parametrize("present", [TWO_STORES_DIRS, TWO_STORES_DIRS[:1]])
def test_a_data_directory_of_the_layout_before_keeps_its_two_stores(
    tmp_path: Path, present: tuple[str, ...]
) -> None:
    data = tmp_path / "data"
    for name in present:
        (data / name).mkdir(parents=True)
    assert rocksdb_layout(data) == "two-stores"
    config = _render(data)
    assert str(data / "tx-log") in config and str(data / "documents") in config
    assert str(data / "records") not in config
    assert "synced-kv-store" not in config


def test_a_data_directory_of_both_layouts_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _old_layout(data)
    (data / "records").mkdir()
    with pytest.raises(XtdbSetupError, match="both records/"):
        _render(data)


@pytest.mark.xtdb
def test_each_layout_is_kept_across_restarts(xtdb_jars: Path, tmp_path: Path) -> None:
    """A new directory holds one RocksDB for the tx-log and the documents; one of the layout
    before is reopened as it is, its commits all there, nothing moved."""
    new, old = tmp_path / "new", tmp_path / "old"
    _old_layout(old)
    for data in (new, old):
        node = XtdbNode("rocksdb", data)
        with node, closing(open_store(node.url, timeout=10.0)) as store:
            receipt = store.commit([{"xt/id": "a", "type": "file", "v": 1}])
        with node, closing(open_store(node.url, timeout=10.0)) as store:
            assert store.get("a") == {"xt/id": "a", "type": "file", "v": 1}
            assert store.latest_tx() == receipt
    assert {p.name for p in new.iterdir() if p.is_dir()} == {"indexes", "records", "tmp"}
    assert {p.name for p in old.iterdir() if p.is_dir()} == {"indexes", *TWO_STORES_DIRS, "tmp"}
    assert any((new / "records").glob("*.log"))
    assert any((old / "tx-log").glob("*.log")) and any((old / "documents").glob("*.log"))
