"""Real XTDB nodes for the tests in this folder (see ``fixtures.py``)."""

from tests.xtdb.fixtures import rocksdb_node, xtdb_jars, xtdb_node

__all__ = ["rocksdb_node", "xtdb_jars", "xtdb_node"]
