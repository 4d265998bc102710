"""A node keeps in its document cache the documents a commit writes (``selfctx.documents``,
decision 0113): indexing the transaction finds them there instead of reading them back from the
document store, and what every read returns is unchanged, across a restart too."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from selfctx.adapters.xtdb import XtdbNode, open_store
from selfctx.application.ports.store import ConflictError, Expect

pytestmark = pytest.mark.xtdb


def read_back(store: Any) -> int:
    """Documents the node has read from its document store so far, its cache having none."""
    value = store.client.status(timeout=10.0)["selfctxDocumentsRead"]
    assert isinstance(value, int)
    return value


def reopened(node: XtdbNode) -> Any:
    """A store on ``node`` restarted: its caches empty, everything read from its disk."""
    node.stop(timeout=20)
    node.start()
    return open_store(node.url, timeout=30.0)


def turn(
    ns: str, n: int, previous: dict[str, Any] | None
) -> tuple[list[dict[str, Any]], list[Expect]]:
    """One proxied request's commit, in shape (decision 0101): log entries and a tool call that
    must not exist yet, and the request's record on top of its previous version."""
    entries: list[dict[str, Any]] = [
        {"xt/id": f"{ns}log-{n}-{k}", "type": "session_log", "seq": 3 * n + k, "text": "x" * 400}
        for k in range(3)
    ]
    call: dict[str, Any] = {
        "xt/id": f"{ns}call-{n}",
        "type": "toolcall",
        "output": f"line\n{n}\t\u00e9" * 50,
    }
    record: dict[str, Any] = {
        "xt/id": f"{ns}requests",
        "type": "requests",
        "count": n,
        "nested": {"n": [n, 1.5]},
    }
    puts = [*entries, call, record]
    expect = [Expect(str(doc["xt/id"]), None) for doc in puts[:4]]
    expect.append(Expect(f"{ns}requests", previous))
    return puts, expect


def test_the_documents_a_commit_writes_are_indexed_without_reading_them_back(
    rocksdb_node: XtdbNode,
) -> None:
    ns = f"d{uuid.uuid4().hex[:8]}-"
    store = open_store(rocksdb_node.url, timeout=30.0)
    written: dict[str, dict[str, Any]] = {}
    try:
        store.commit([{"xt/id": f"{ns}warm", "type": "x"}])  # the node's first fetches
        before = read_back(store)
        previous = None
        for n in range(20):
            puts, expect = turn(ns, n, previous)
            store.commit(puts, expect)  # answered once indexed: the fetch is behind it
            previous = puts[-1]
            written |= {doc["xt/id"]: doc for doc in puts}
        # 20 transactions of 5 documents each, every one fetched for indexing: from the cache.
        assert read_back(store) == before
        # A refused transaction's documents are written too (before it is known refused): the
        # cache holding them changes no answer.
        stale, expect = turn(ns, 99, {"xt/id": f"{ns}requests", "type": "requests", "count": -1})
        with pytest.raises(ConflictError):
            store.commit(stale, expect)
        assert store.get_many(doc["xt/id"] for doc in stale) == {
            doc["xt/id"]: written[doc["xt/id"]] for doc in stale if doc["xt/id"] in written
        }
        assert store.get_many(written) == written
    finally:
        store.close()

    # After a restart the cache is empty: the same documents come from the store, unchanged, and
    # the count shows they were read there (it counts what it says it counts).
    store = reopened(rocksdb_node)
    try:
        before = read_back(store)
        got = store.get_many(written)
        assert json.dumps(got, sort_keys=True) == json.dumps(written, sort_keys=True)
        assert read_back(store) - before >= len(written)
    finally:
        store.close()


def written_count(store: Any) -> int:
    """Documents the node has written to its document store so far."""
    value = store.client.status(timeout=10.0)["selfctxDocumentsWritten"]
    assert isinstance(value, int)
    return value


def test_a_document_the_store_holds_already_is_not_written_again(rocksdb_node: XtdbNode) -> None:
    """Decision 0160: a request's commit matches its record's previous version, which XTDB hands
    the document store with the transaction's puts; the node writes only what it does not hold
    yet, and every read, the match and the history stay what they were."""
    ns = f"w{uuid.uuid4().hex[:8]}-"
    store = open_store(rocksdb_node.url, timeout=30.0)
    record_id = f"{ns}requests"
    try:
        store.commit([{"xt/id": f"{ns}warm", "type": "x"}])
        previous: dict[str, Any] | None = None
        for n in range(12):
            entry_id, call_id = f"{ns}log-{n}", f"{ns}call-{n}"
            entry = {"xt/id": entry_id, "type": "session_log", "seq": n, "text": "x" * 400}
            call = {"xt/id": call_id, "type": "toolcall", "output": f"out {n}\n" * 40}
            record = {"xt/id": record_id, "type": "request_log", "count": n, "lines": [[n, "l"]]}
            expect = [Expect(entry_id, None), Expect(call_id, None)]
            expect.append(Expect(record_id, previous))
            before = written_count(store)
            store.commit([entry, call, record], expect)
            # three new documents; the matched previous version is held already (main wrote it
            # again: four)
            assert written_count(store) - before == 3
            previous = record
        # A put of content the store holds (the same tool call again) writes nothing.
        same = {"xt/id": f"{ns}call-3", "type": "toolcall", "output": "out 3\n" * 40}
        before = written_count(store)
        store.commit([same])
        assert written_count(store) == before
        assert store.get(same["xt/id"]) == same
        assert store.get(record_id) == previous
        # A stale match is refused as before.
        stale = {"xt/id": record_id, "type": "request_log", "count": 3, "lines": [[3, "l"]]}
        with pytest.raises(ConflictError):
            store.commit([{"xt/id": record_id, "type": "request_log"}], [Expect(record_id, stale)])
    finally:
        store.close()

    # After a restart the cache is empty: the matched version is written again (what XTDB does),
    # the match passes, and the documents read back are the ones committed.
    store = reopened(rocksdb_node)
    try:
        nxt = {"xt/id": record_id, "type": "request_log", "count": 12, "lines": []}
        before = written_count(store)
        store.commit([nxt], [Expect(record_id, previous)])
        assert written_count(store) - before == 2
        assert store.get(record_id) == nxt
        assert store.get(f"{ns}call-3") == same
    finally:
        store.close()
