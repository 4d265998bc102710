"""Real XTDB nodes for the tests in this folder.

The fixtures (``xtdb_jars``, the session-scoped ``xtdb_node``, ``rocksdb_node``) live in
``fixtures.py``, which ``tests/conftest.py`` registers as a plugin for the whole suite: importing
them here again would make pytest start a second session-scoped node for this folder.
"""
