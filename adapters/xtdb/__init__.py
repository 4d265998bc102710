"""XTDB 1.x: the store adapter over its HTTP API, and the launcher of local nodes.

The composition root needs :func:`open_store` (``--store xtdb://host:port``) and
:func:`ensure_local_node` (``--store auto``); tests use :class:`XtdbNode`.
"""

from selfctx.adapters.xtdb.client import XtdbClient
from selfctx.adapters.xtdb.errors import NodeStartError, XtdbSetupError
from selfctx.adapters.xtdb.fetch import fetch_jars
from selfctx.adapters.xtdb.local import LocalNode, ensure_local_node, local_node
from selfctx.adapters.xtdb.node import PostgresTarget, XtdbNode
from selfctx.adapters.xtdb.store import XtdbStore, open_store

__all__ = [
    "LocalNode",
    "NodeStartError",
    "PostgresTarget",
    "XtdbClient",
    "XtdbNode",
    "XtdbSetupError",
    "XtdbStore",
    "ensure_local_node",
    "fetch_jars",
    "local_node",
    "open_store",
]
