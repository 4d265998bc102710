"""The inspector shows a call's arguments in the client's key order when the session was stored
on a real XTDB node (decision 0132): the request page of a second client, which reads the
request's record and rebuilds the prompt from the node, lists each call's arguments as the
client wrote them, objects of more than 8 keys (which the node keeps as a hash map) included."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from selfctx.adapters.ui.history import Sessions
from selfctx.adapters.ui.views import object_view, request_view
from selfctx.adapters.xtdb import XtdbNode, XtdbStore, open_store
from tests.harness.conftest import make_service, open_harness
from tests.harness.test_key_order import CALLS, CONVERSATIONS


@pytest.fixture
def stores(xtdb_node: XtdbNode) -> Iterator[tuple[XtdbStore, XtdbStore]]:
    first, second = open_store(xtdb_node.url, timeout=60.0), open_store(xtdb_node.url, timeout=60.0)
    yield first, second
    first.close()
    second.close()


@pytest.mark.parametrize("fmt", list(CONVERSATIONS))
def test_the_request_page_shows_the_clients_order(
    stores: tuple[XtdbStore, XtdbStore], fmt: str
) -> None:
    session = f"inspect-{fmt}-{id(stores)}"
    service = make_service("inline", stores[0])
    live = open_harness(service, fmt, session_id=session)
    live.ingest(CONVERSATIONS[fmt]())
    n = service.record_request(session, service.assemble(session)).n
    inspector = make_service("inline", stores[1])
    sessions = Sessions(inspector)
    view = request_view(inspector, sessions, session, n=n, seq=None)
    shown = {name: arguments for item in view.items for _, name, arguments in item.calls}
    assert shown == {name: json.dumps(a, ensure_ascii=False) for name, a in CALLS.items()}
    assert view.identical is True
    for item in view.items:  # each call's page titles it with its tool and its arguments
        for call_id, name, arguments in item.calls:
            title = object_view(inspector, sessions, call_id).title
            assert title == f"{name} {arguments}"
