"""Text that only some encodings can carry survives a resume on every store (decision 0026):
the harness sends the same list again and nothing is recorded twice."""

from __future__ import annotations

from contextlib import closing

from selfctx.adapters.harness import IngestResult
from tests.conftest import StoreFactory
from tests.harness.conftest import (
    bash,
    chat_texts,
    make_service,
    o_assistant,
    o_system,
    o_tool,
    o_user,
    open_harness,
)


def test_a_resume_records_nothing_twice_whatever_the_text_holds(
    store_factory: StoreFactory, ns: str
) -> None:
    # On the shared node, ids carry the test's prefix: the session's and the tool call's (a
    # wrapped store would prefix the session's document id, which other tests' tools list).
    sid, call = f"{ns}s1", f"{ns}c1"
    odd = "lone \ud800 high, \udfff low, pair \ud83d\ude00 as two, escape-like \ufdd0d800"
    listing = [
        o_system("You are careful. \udc80"),
        o_user("Fix it: " + odd),
        o_assistant("Reading \ud800.", bash(call, "cat a.py \udc00")),
        o_tool(call, "out \udfff"),
        o_user("long " + "x" * 10_000 + odd),
    ]
    with closing(store_factory.make()) as store:
        first = open_harness(make_service(store=store), session_id=sid)
        assert first.ingest(listing).consumed == 4
        recorded = chat_texts(first.service, sid)

        # Another process opens the same session from the store and is handed the same list.
        resumed = open_harness(make_service(store=store), session_id=sid)
        assert resumed.resumed is not None
        latest = store.latest_tx()
        assert resumed.ingest(listing) == IngestResult(consumed=0, diverged=False, total=4)
        assert store.latest_tx() == latest
        assert chat_texts(resumed.service, sid) == recorded
        assert ("user", "Fix it: " + odd) in recorded
