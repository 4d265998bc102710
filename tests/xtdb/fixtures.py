"""Pytest fixtures that run real XTDB nodes; loaded by ``tests/xtdb/conftest.py``.

A module of its own so that the rest of the suite can load it too, with
``pytest_plugins = ("tests.xtdb.fixtures",)`` in ``tests/conftest.py``, and run service-level
tests on XTDB through the ``xtdb_node`` fixture. Every node binds 127.0.0.1 only and is stopped
when its fixture ends, also when a test fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from selfctx.adapters.xtdb import XtdbNode, fetch_jars


@pytest.fixture(scope="session")
def xtdb_jars() -> Path:
    """The jar folder, fetched from Maven Central the first time (needs Java and Maven)."""
    return fetch_jars().lib


@pytest.fixture(scope="session")
def xtdb_node(xtdb_jars: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[XtdbNode]:
    """One node for the whole run (tests keep apart by prefixing their ids). A RocksDB node, in a
    temporary folder: everything the suite writes (tens of thousands of transactions) stays on
    disk, where an in-memory node keeps it all in its 1 GB heap until the heap is full and the
    node stops answering."""
    node = XtdbNode("rocksdb", tmp_path_factory.mktemp("xtdb-shared") / "data")
    with node:
        yield node


@pytest.fixture
def rocksdb_node(xtdb_jars: Path, tmp_path: Path) -> Iterator[XtdbNode]:
    """A RocksDB node of the test's own, under ``tmp_path/data``; stopped (or killed) at the end."""
    node = XtdbNode("rocksdb", tmp_path / "data")
    try:
        node.start()
        yield node
    finally:
        node.stop(timeout=20)
