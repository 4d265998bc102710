"""The session-scoped XTDB node of ``tests/xtdb`` for the replays on XTDB.

Imported here because a conftest's fixtures are visible only below it. (When ``tests/conftest.py``
registers ``tests.xtdb.fixtures`` as a plugin for the whole suite, drop this import: one node then
serves every folder.)
"""

from tests.xtdb.fixtures import xtdb_jars, xtdb_node

__all__ = ["xtdb_jars", "xtdb_node"]
