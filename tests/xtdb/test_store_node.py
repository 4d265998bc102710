"""What the XTDB store does on a real node beyond the shared contract: match semantics of JSON
values, one request per batch read, ids that need escaping, latest_tx after a conflict."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import httpx
import pytest

from selfctx.adapters.xtdb import XtdbClient, XtdbNode, XtdbStore, open_store, secret
from selfctx.application.persistence import decode_events, entry_events, log_entry
from selfctx.application.ports.store import ConflictError, Expect, StoreRejected
from selfctx.domain.session import events as ev

pytestmark = pytest.mark.xtdb


@pytest.fixture
def ns() -> str:
    return f"n{uuid.uuid4().hex[:10]}-"


@pytest.fixture
def store(xtdb_node: XtdbNode) -> Iterator[XtdbStore]:
    store = open_store(xtdb_node.url, timeout=10.0)
    yield store
    store.close()


VALUES: dict[str, Any] = {
    "int": 1,
    "zero": 0,
    "negative": -123456789,
    "long": 2**53 + 1,
    "max": 2**63 - 1,
    "float": 1.0,
    "fraction": 0.1,
    "exp": 1e-300,
    "huge": 1.7976931348623157e308,
    "null": None,
    "true": True,
    "empty_list": [],
    "empty_map": {},
    "nested": {"a": {"b": {"c": [1, 2.5, None, "x", {"d": []}]}}},
    "unicode": "héllo — 日本語 😀 \u2028 \x00 \x1f",
    "keys": {"with space": 1, "ns/name": 2, "": 3, "ü": 4, "a/b/c": 5},
    "list_of_maps": [{"z": 1, "a": 2}, {"a": 2, "z": 1}],
}


@pytest.mark.parametrize("field", sorted(VALUES))
def test_a_document_read_back_matches_as_a_precondition(
    store: XtdbStore, xtdb_node: XtdbNode, ns: str, field: str
) -> None:
    doc = {"xt/id": ns + field, "type": "probe", field: VALUES[field]}
    store.commit([doc])
    # Read through a second client, as another process would.
    with closing(open_store(xtdb_node.url, timeout=10.0)) as other:
        read = other.get(ns + field)
    assert read == doc
    assert json.dumps(read, sort_keys=True) == json.dumps(doc, sort_keys=True)
    store.commit([dict(doc, v=2)], [Expect(ns + field, read)])
    assert store.get(ns + field) == dict(doc, v=2)


def test_an_int_is_not_a_float_for_match(store: XtdbStore, ns: str) -> None:
    # XTDB compares content hashes: 1 and 1.0 differ there, though Python says 1 == 1.0.
    store.commit([{"xt/id": ns + "n", "v": 1}])
    with pytest.raises(ConflictError):
        store.commit(
            [{"xt/id": ns + "n", "v": 2}], [Expect(ns + "n", {"xt/id": ns + "n", "v": 1.0})]
        )
    # Key order does not matter: documents are maps.
    store.commit([{"xt/id": ns + "m", "a": 1, "b": 2}])
    store.commit(
        [{"xt/id": ns + "m", "v": 3}], [Expect(ns + "m", {"b": 2, "a": 1, "xt/id": ns + "m"})]
    )


@pytest.mark.parametrize(
    "suffix",
    ["a b", "slash/and?query&x=y", "plus+percent%20hash#", "ünïcødé 😀", "'quote\"", ":kw"],
)
def test_ids_that_need_escaping(store: XtdbStore, ns: str, suffix: str) -> None:
    oid = ns + suffix
    receipt = store.commit([{"xt/id": oid, "type": ns + "esc", "v": 1}])
    store.commit([{"xt/id": oid, "type": ns + "esc", "v": 2}])
    assert store.get(oid) == {"xt/id": oid, "type": ns + "esc", "v": 2}
    assert store.get_many([oid]) == {oid: {"xt/id": oid, "type": ns + "esc", "v": 2}}
    assert [v.document["v"] for v in store.history(oid)] == [1, 2]
    assert store.get_as_of(oid, receipt.tx_id) == {"xt/id": oid, "type": ns + "esc", "v": 1}
    assert store.ids_of_type(ns + "esc") == [oid]


def counting_store(url: str) -> tuple[XtdbStore, list[httpx.Request]]:
    sent: list[httpx.Request] = []
    http = httpx.Client(base_url=url, event_hooks={"request": [sent.append]})
    client = XtdbClient(http, key=lambda: secret.read_key(url))
    return XtdbStore(client, timeout=10.0, owns_http=True), sent


def test_batch_reads_are_one_request_each(xtdb_node: XtdbNode, ns: str) -> None:
    store, sent = counting_store(xtdb_node.url)
    docs: list[dict[str, Any]] = [
        {"xt/id": f"{ns}{i:04d}", "type": ns + "batch", "n": i} for i in range(500)
    ]
    logs = [
        {"xt/id": f"log:{ns}:{i:09d}", "type": "session_log", "session_id": ns, "seq": i}
        for i in range(1, 301)
    ]
    receipt = store.commit(docs + logs)
    ids = [str(d["xt/id"]) for d in docs]
    for read in (
        lambda: store.get_many(ids),
        lambda: store.get_many_as_of(ids, receipt.tx_id),
        lambda: store.session_log(ns, after_seq=100),
        lambda: store.ids_of_type(ns + "batch"),
    ):
        sent.clear()
        result = read()
        assert len(result) in (200, 500)
        assert [(r.method, r.url.path) for r in sent] == [("POST", "/_xtdb/query")]
    assert [e["seq"] for e in store.session_log(ns, after_seq=100)] == list(range(101, 301))
    store.close()


def test_reads_by_id_give_exactly_the_documents_at_every_batch_size(
    store: XtdbStore, ns: str
) -> None:
    """A read of many ids binds them to the entities (decision 0109): at every batch size,
    and as of an earlier transaction, it gives what one ``get`` per id gives, once per id
    asked twice, nothing for an id never written, and the named fields alone when asked."""
    first = store.commit(
        [{"xt/id": f"{ns}{i:03d}", "type": ns + "by-id", "n": i, "s": "x" * i} for i in range(48)]
    )
    store.commit(
        [{"xt/id": f"{ns}{i:03d}", "type": ns + "by-id", "n": -i} for i in range(0, 48, 3)]
    )
    written = [f"{ns}{i:03d}" for i in range(48)]
    now = {i: store.get(i) for i in written}
    then = {i: store.get_as_of(i, first.tx_id) for i in written}
    assert all(d is not None for d in (*now.values(), *then.values()))
    assert now[written[3]] != then[written[3]]
    for size in range(1, 41):
        ids = [written[(k * 7 + size) % len(written)] for k in range(size)]
        asked = [*ids, ids[0], ns + "never-written"]
        assert store.get_many(asked) == {i: now[i] for i in ids}, size
        assert store.get_many_as_of(asked, first.tx_id) == {i: then[i] for i in ids}, size
        fields = store.get_many_fields(asked, ["n"])
        assert fields == {i: {"xt/id": i, "n": now[i]["n"]} for i in ids}, size  # type: ignore[index]


def test_a_commit_is_one_request_and_its_bytes_are_counted(xtdb_node: XtdbNode, ns: str) -> None:
    store, sent = counting_store(xtdb_node.url)
    doc = {"xt/id": ns + "x", "text": "é" * 100}
    store.commit([doc], [Expect(ns + "x", None)])
    # Submit, await and tx-committed? in one round trip (the node's extension of the API).
    assert [r.url.path for r in sent] == ["/_xtdb/submit-tx"]
    assert "await-timeout" in sent[0].url.params
    body = sent[0].content
    assert store.bytes_sent == len(body)
    assert json.loads(body) == {"tx-ops": [["match", ns + "x", None], ["put", doc]]}
    assert len(body) < 300, "JSON is compact and UTF-8, not \\u-escaped"
    sent.clear()
    # A failed match is known from the same one answer, and so is what is stored now of what
    # it expected, which names what changed (decision 0106): no re-read.
    with pytest.raises(ConflictError) as info:
        store.commit([{"xt/id": ns + "y"}], [Expect(ns + "x", None)])
    assert info.value.object_ids == (ns + "x",)
    assert info.value.current == {ns + "x": doc}
    assert [r.url.path for r in sent] == ["/_xtdb/submit-tx"]
    store.close()


def test_latest_tx_skips_a_transaction_that_failed(store: XtdbStore, ns: str) -> None:
    good = store.commit([{"xt/id": ns + "a", "v": 1}])
    with pytest.raises(ConflictError) as info:
        store.commit([{"xt/id": ns + "b", "v": 1}], [Expect(ns + "a", None)])
    assert info.value.object_ids == (ns + "a",)
    latest = store.latest_tx()
    assert latest is not None
    # Other tests share the node and may commit meanwhile, but never the failed transaction.
    assert latest.tx_id >= good.tx_id
    assert store.get(ns + "b") is None


def test_reads_see_a_commit_made_by_another_client_at_once(
    xtdb_node: XtdbNode, store: XtdbStore, ns: str
) -> None:
    errors: list[BaseException] = []

    def write() -> None:
        try:
            with closing(open_store(xtdb_node.url, timeout=10.0)) as other:
                for i in range(20):
                    other.commit([{"xt/id": f"{ns}{i}", "v": i}])
                    # Acknowledged means visible to every store on the node, with no waiting.
                    assert store.get(f"{ns}{i}") == {"xt/id": f"{ns}{i}", "v": i}
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=write)
    thread.start()
    thread.join()
    assert errors == []


def test_history_keeps_versions_written_in_the_same_millisecond(store: XtdbStore, ns: str) -> None:
    # A transaction's valid time is its tx time, in milliseconds; concurrent commits share one
    # often enough, and XTDB then lists only the later version unless asked for corrections.
    def write(n: int) -> None:
        for i in range(40):
            store.commit([{"xt/id": ns + "hot", "writer": n, "i": i}])

    threads = [threading.Thread(target=write, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    history = store.history(ns + "hot")
    assert len(history) == 240
    assert [v.tx_id for v in history] == sorted(v.tx_id for v in history)
    assert store.get(ns + "hot") == history[-1].document
    assert store.get_as_of(ns + "hot", history[100].tx_id) == history[100].document


# -- long strings as raw UTF-8 after a JSON head (decision 0015) ------------------------------

LONG = "def f():\n    return \"quoted\\\\path\" + 'é 日本 😀'\n\t\x00\x1f\u2028\n" * 200


def test_long_strings_travel_as_blobs_and_come_back_exactly(store: XtdbStore, ns: str) -> None:
    assert store.blobs  # open_store saw "selfctxBlobs" in the node's status
    heads: list[int] = []
    submit_tx = store.client.submit_tx

    def spy(body: bytes, **kwargs: Any) -> dict[str, Any]:
        heads.append(kwargs.get("blob_head", 0))
        return submit_tx(body, **kwargs)

    store.client.submit_tx = spy  # type: ignore[method-assign]
    doc = {
        "xt/id": ns + "big",
        "type": "file",
        "content": LONG,
        "other": LONG[::-1],
        "short": "x",
        "surrogate": "\ud800" + "y" * 5000,  # no UTF-8 form: stays in the JSON
        "nested": {"deep": LONG},  # only top-level values are lifted
    }
    store.commit([doc])
    read = store.get(ns + "big")
    assert read is not None
    assert {k: read[k] for k in ("content", "other", "short", "nested")} == {
        k: doc[k] for k in ("content", "other", "short", "nested")
    }
    # A read-back document carries its long strings as blobs too, and still matches exactly.
    store.commit([{**read, "content": "new"}], [Expect(ns + "big", read)])
    with pytest.raises(ConflictError):
        store.commit([{**read, "content": "newer"}], [Expect(ns + "big", read)])
    assert [v.document["content"] for v in store.history(ns + "big")] == [LONG, "new"]
    assert all(head > 0 for head in heads[:2]) and heads[2] > 0


def test_a_node_without_blobs_gets_plain_json(xtdb_node: XtdbNode, ns: str) -> None:
    with httpx.Client(base_url=xtdb_node.url.replace("xtdb://", "http://")) as http:
        client = XtdbClient(http, key=lambda: xtdb_node.secret)
        store = XtdbStore(client, timeout=10.0)  # not opened by open_store
        assert not store.blobs
        store.commit([{"xt/id": ns + "plain", "content": LONG}])
        assert store.get(ns + "plain") == {"xt/id": ns + "plain", "content": LONG}


PUT = ["put", {"xt/id": "a"}]


@pytest.mark.parametrize(
    ("head", "json_head", "tail", "complaint"),
    [
        ("x", {"tx-ops": [], "blobs": []}, b"", "must be the byte length"),
        ("99999", {"tx-ops": [], "blobs": []}, b"", "must be the byte length"),
        (None, {"tx-ops": [PUT]}, b"", "must list them"),
        (None, {"tx-ops": [["delete", "a"]], "blobs": [[0, "k", 1]]}, b"x", "a blob must be"),
        (None, {"tx-ops": [PUT], "blobs": [[1, "k", 1]]}, b"x", "a blob must"),
        (
            None,
            {"tx-ops": [PUT], "blobs": [[0, "k", 5]]},
            b"xy",
            "lying within",
        ),
        (None, {"tx-ops": [PUT], "blobs": [[0, "k", 1]]}, b"xyz", "2 bytes"),
        (None, {"tx-ops": [PUT], "blobs": [[0, 7, 1]]}, b"x", "a blob must"),
    ],
)
def test_a_malformed_body_with_blobs_is_refused_naming_the_problem(
    xtdb_node: XtdbNode, head: str | None, json_head: Any, tail: bytes, complaint: str
) -> None:
    raw = json.dumps(json_head).encode()
    latest = xtdb_node.url + "/_xtdb/latest-submitted-tx"
    before = httpx.get(latest, headers=xtdb_node.headers)
    answer = httpx.post(
        xtdb_node.url + "/_xtdb/submit-tx",
        content=raw + tail,
        headers={
            **xtdb_node.headers,
            "Content-Type": "application/json",
            "X-Selfctx-Blobs": head or str(len(raw)),
        },
    )
    after = httpx.get(latest, headers=xtdb_node.headers)
    assert before.status_code == after.status_code == 200
    assert answer.status_code == 400
    assert complaint in answer.json()["error"]
    assert after.content == before.content  # nothing was submitted


def _submit_raw(xtdb_node: XtdbNode, body: str) -> httpx.Response:
    return httpx.post(
        xtdb_node.url + "/_xtdb/submit-tx",
        params={"await-timeout": 10000},
        content=body.encode("utf-8", "surrogatepass"),
        headers={**xtdb_node.headers, "Content-Type": "application/json"},
    )


# JSON as other writers spell it (escapes the adapter's encoder never writes, white space
# between tokens, exponents, a repeated key): the node keeps the values the text means.
RAW_VALUES = (
    r'{"xt/id": "%s", "slash": "a\/b", "lower": "\u00e9", "upper": "\u00C9\u00c9",'
    r' "pair": "\ud83d\ude00", "escapes": "\"\\\b\f\n\r\t", "raw": "'
    "\u0001\u2028"
    r'",'
    r' "numbers": [ -0 , 1E2, 1.5e+2, 2.5E-1, -12, 9223372036854775807 ],'
    r' "twice": 1, "twice": 2, "": {"nested": [[], {}, [null, true, false]]} }'
)


def test_json_spelt_otherwise_keeps_the_values_it_means(
    xtdb_node: XtdbNode, store: XtdbStore, ns: str
) -> None:
    body = '{"tx-ops": [["put", %s]]}' % (RAW_VALUES % (ns + "raw"))
    answer = _submit_raw(xtdb_node, body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["txCommitted?"] is True
    expected = json.loads(RAW_VALUES % (ns + "raw"), strict=False)
    assert expected["numbers"] == [0, 100.0, 150.0, 0.25, -12, 2**63 - 1]
    assert expected["slash"] == "a/b" and expected["pair"] == "\U0001f600"
    assert expected["escapes"] == '"\\\b\f\n\r\t' and expected["twice"] == 2
    assert store.get(ns + "raw") == expected
    # What was read back is a precondition that holds: the same document, the same hash.
    store.commit([{**expected, "n": 1}], [Expect(ns + "raw", expected)])


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        # What the node read and submitted before decision 0108: a value followed by more.
        ('{"tx-ops": [["put", {"xt/id": "%s"}]]} x', "extra data after"),
        ('{"tx-ops": [["put", {"xt/id": "%s"}]]}]', "extra data after"),
        ('{"tx-ops": [["put", {"xt/id": "%s"}]]}{"tx-ops": []}', "extra data after"),
        # What it refused before too.
        ('{"tx-ops": [["put", {"xt/id": "%s"}]]', "EOF"),
        ('{"tx-ops": [["put", {"xt/id": "%s"},]]}', "unexpected character"),
        ('{"tx-ops": [["put", {"xt/id": "%s", "v": 01}]]}', "invalid number"),
        ('{"tx-ops": [["put", {"xt/id": "%s", "v": tru}]]}', "expected true"),
    ],
)
def test_a_body_that_is_not_one_json_value_is_refused(
    xtdb_node: XtdbNode, store: XtdbStore, ns: str, body: str, complaint: str
) -> None:
    answer = _submit_raw(xtdb_node, body % (ns + "bad"))
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error.startswith("request body is not JSON") and complaint in error, error
    assert store.get(ns + "bad") is None


def test_white_space_after_a_body_is_still_json(
    xtdb_node: XtdbNode, store: XtdbStore, ns: str
) -> None:
    answer = _submit_raw(xtdb_node, '{"tx-ops": [["put", {"xt/id": "%s"}]]} \r\n\t' % (ns + "ws"))
    assert answer.status_code == 200, answer.text
    assert store.get(ns + "ws") == {"xt/id": ns + "ws"}


def _query(store: XtdbStore, query: str, *args: Any) -> list[list[Any]]:
    in_args = " ".join(json.dumps(a) for a in args)
    return store.client.query(
        f"{{:query {query} :in-args [{in_args}]}}",
        operation="test",
        valid_time="9999-12-31T00:00:00Z",
        timeout=10.0,
    )


def test_a_log_entrys_events_are_one_value_and_no_index_key(store: XtdbStore, ns: str) -> None:
    # A session-log entry's events are wrapped into one value (decision 0017), and no query
    # names them, so the node does not index them at all (decision 0068): read whole by id.
    events = [ev.ObjectActivated(f"{ns}file:{n}", auto=False) for n in range(5)]
    entry = log_entry(ns + "s", 1, command="Activate", command_id="c", at="t", events=events)
    store.commit([entry])
    query = "{:find [?v] :in [?id] :where [[?e :xt/id ?id] [?e :events ?v]]}"
    assert _query(store, query, entry["xt/id"]) == []
    assert decode_events(entry_events(store.get(entry["xt/id"]) or {})) == events
    assert [e["xt/id"] for e in store.session_log(ns + "s")] == [entry["xt/id"]]


def test_only_the_attributes_queries_name_are_index_keys(store: XtdbStore, ns: str) -> None:
    # The node's attribute indices hold `type` only (decisions 0018, 0068 and 0165: a session's
    # log is read by a range of ids, so no query names `session_id` or `seq`): reads, history,
    # as-of and match go by documents, which keep everything; a Datalog clause on any other
    # attribute finds nothing.
    old = {"xt/id": ns + "f", "type": "probe", "content": "a" * 300 + ns, "content_hash": "h1"}
    new = dict(old, content="b" * 300 + ns, content_hash="h2", session_id=ns + "s", seq=7)
    first = store.commit([old])
    store.commit([new], [Expect(ns + "f", old)])
    with pytest.raises(ConflictError):
        store.commit([dict(new, v=3)], [Expect(ns + "f", old)])

    assert store.get(ns + "f") == new
    assert store.get_as_of(ns + "f", first.tx_id) == old
    assert [v.document for v in store.history(ns + "f")] == [old, new]
    for attribute, value in (
        ("content", new["content"]),
        ("content_hash", "h2"),
        ("session_id", ns + "s"),
        ("seq", 7),
    ):
        clause = f"{{:find [?e] :in [?v] :where [[?e :{attribute} ?v]]}}"
        assert _query(store, clause, value) == [], attribute
    probes = _query(store, "{:find [?e] :in [?t] :where [[?e :type ?t]]}", "probe")
    assert [ns + "f"] in probes
    short = {"xt/id": ns + "s", "type": "probe", "content": "x" + ns}
    store.commit([short])
    assert _query(store, "{:find [?e] :in [?c] :where [[?e :content ?c]]}", short["content"]) == []
    assert store.get(ns + "s") == short


def test_the_versions_feed_holds_a_version_another_client_was_told_is_written(
    xtdb_node: XtdbNode, store: XtdbStore, ns: str
) -> None:
    """The node's feed hears of a transaction on a thread of its own, after the node counts it
    as indexed; a client asking right after another client's commit still gets the version."""
    with closing(open_store(xtdb_node.url, timeout=10.0)) as other:
        for i in range(60):
            before = store.file_versions(None).position
            before = -1 if before is None else before  # a node that holds nothing yet
            other.commit([{"xt/id": f"{ns}f", "type": "file", "object_hash": f"h{i}"}])
            found = store.file_versions(before)
            assert (f"{ns}f", f"h{i}") in [(oid, h) for _, oid, h in found.versions], i


def test_the_versions_feed_lists_the_files_a_committed_transaction_puts_in_order(
    store: XtdbStore, ns: str
) -> None:
    """Only puts of ``file`` documents, in their order within the transaction: not the file
    version a ``match`` expects, not another type's document, nothing of a refused transaction
    (the feed reads a transaction's put documents itself, decision 0108)."""
    first = {"xt/id": ns + "a", "type": "file", "object_hash": "h1"}
    store.commit([first])
    start = store.file_versions(None).position
    assert start is not None
    store.commit(
        [
            {"xt/id": ns + "note", "type": "session_log", "object_hash": "x"},
            {"xt/id": ns + "b", "type": "file", "object_hash": "h1", "content": LONG},
            {**first, "object_hash": "h2"},
        ],
        [Expect(ns + "a", first), Expect(ns + "b", None)],
    )
    with pytest.raises(ConflictError):
        store.commit(
            [{"xt/id": ns + "c", "type": "file", "object_hash": "h9"}], [Expect(ns + "a", first)]
        )
    store.commit([{"xt/id": ns + "d", "type": "file", "object_hash": "h1"}])
    listed = [(oid, h) for _, oid, h in store.file_versions(start).versions]
    assert listed == [(ns + "b", "h1"), (ns + "a", "h2"), (ns + "d", "h1")]


def test_the_versions_feed_carries_held_documents_and_refuses_a_malformed_held_list(
    store: XtdbStore, ns: str
) -> None:
    """A POST to the feed naming the files held gets, in the same answer, the documents of those
    with a newer version (decision 0106), strings needing the node's escapes included; a body
    that is not ``{"held": [[id, object_hash], ...]}`` is a typed refusal, not a 500."""
    assert store.feed_documents
    start = store.file_versions(None).position
    start = -1 if start is None else start
    odd = "lone \ud800 surrogate"
    store.commit([{"xt/id": ns + "f", "type": "file", "object_hash": "h1", "content": odd}])
    found = store.file_versions(start, {ns + "f": "h0"})
    assert found.documents[ns + "f"]["content"] == odd
    assert store.file_versions(start, {ns + "f": "h1"}).documents == {}
    for body in (b'{"held": {"a": "b"}}', b'{"held": [["a"]]}', b'{"held": [["a", 1]]}', b"[]"):
        with pytest.raises(StoreRejected) as refused:
            store.client.versions(start, timeout=10.0, held=body)
        assert refused.value.status == 400
