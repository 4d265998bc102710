"""The store contract on a real XTDB node (in memory, shared by the run)."""

from __future__ import annotations

import pytest

from selfctx.adapters.xtdb import XtdbNode, open_store
from selfctx.application.ports.store import ObjectStore
from selfctx.contracts.store import StoreContract

pytestmark = pytest.mark.xtdb


class TestXtdbStore(StoreContract):
    @pytest.fixture(autouse=True)
    def _node(self, xtdb_node: XtdbNode) -> None:
        self.url = xtdb_node.url

    def make_store(self) -> ObjectStore:
        return open_store(self.url, timeout=10.0)
