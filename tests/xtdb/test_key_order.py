"""A session resumed from a real XTDB node renders what it rendered before it was stored, key for
key (decision 0132): the node keeps an object's order up to 8 keys and not beyond (a Clojure
hash map), so an object holding a larger one is stored as its JSON text; smaller ones are stored
as objects, as before, and come back in order."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from selfctx.adapters.xtdb import XtdbNode, XtdbStore, open_store
from tests.harness.conftest import make_service, open_harness
from tests.harness.test_key_order import CALLS, CONVERSATIONS, _arguments


@pytest.fixture
def stores(xtdb_node: XtdbNode) -> Iterator[tuple[XtdbStore, XtdbStore]]:
    """Two clients of one node: the second reads what the first wrote from the node."""
    first, second = open_store(xtdb_node.url, timeout=60.0), open_store(xtdb_node.url, timeout=60.0)
    yield first, second
    first.close()
    second.close()


@pytest.mark.parametrize("fmt", list(CONVERSATIONS))
def test_a_resumed_session_renders_the_clients_order(
    stores: tuple[XtdbStore, XtdbStore], fmt: str
) -> None:
    session = f"order-{fmt}-{id(stores)}"
    live = open_harness(make_service("inline", stores[0]), fmt, session_id=session)
    live.ingest(CONVERSATIONS[fmt]())
    before = live.request()
    resumed = open_harness(make_service("inline", stores[1]), fmt, session_id=session)
    resumed.ingest(CONVERSATIONS[fmt]())
    after = resumed.request()
    assert _arguments(fmt, after) == {n: json.dumps(a) for n, a in CALLS.items()}
    assert json.dumps(after) == json.dumps(before)
