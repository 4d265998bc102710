"""The behaviour every :class:`~selfctx.application.ports.store.ObjectStore` must show.

An adapter's test module subclasses :class:`StoreContract` and implements ``make_store()``::

    class TestMemoryStore(StoreContract):
        def make_store(self) -> ObjectStore:
            return MemoryStore()

The base class is not collected by pytest (its name does not start with ``Test``). Each test gets
a store of its own from ``make_store()``; stores shared between tests (a real node) must at least
give every test fresh ids, which the suite does by prefixing every id with a per-test nonce.

The suite runs under pytest. It can be imported without it (a plain install has no pytest), so a
program may name :class:`StoreContract` without depending on a test runner.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from typing import Any

from selfctx.application import persistence
from selfctx.application.ports.store import ConflictError, Expect, ObjectStore
from selfctx.contracts._pytest import pytest
from selfctx.domain.errors import InvalidInput

__all__ = ["StoreContract"]


class StoreContract:
    """Abstract behaviour suite for object stores."""

    def make_store(self) -> ObjectStore:
        raise NotImplementedError

    @pytest.fixture
    def store(self) -> Any:
        store = self.make_store()
        yield store
        store.close()

    @pytest.fixture
    def ns(self) -> str:
        """A prefix that makes this test's ids unique even in a store shared between tests."""
        return f"t{uuid.uuid4().hex[:10]}-"

    # -- put / get ---------------------------------------------------------------------------

    def test_get_missing_is_none(self, store: ObjectStore, ns: str) -> None:
        assert store.get(ns + "nothing") is None
        assert store.get_many([ns + "a", ns + "b"]) == {}
        assert store.history(ns + "nothing") == []

    def test_put_then_get_round_trips_json_exactly(self, store: ObjectStore, ns: str) -> None:
        doc = {
            "xt/id": ns + "doc",
            "type": "file",
            "int": 42,
            "negative": -7,
            "big": 2**40,
            "float": 1.5,
            "tiny": 1e-7,
            "null": None,
            "bools": [True, False],
            "text": 'naïve — 日本語 😀 "quoted" \\ back\nline\ttab',
            "empty": "",
            "nested": {"list": [1, 2.25, {"deep": ["x", None]}], "map": {}},
            "source": {"type": "filesystem", "filesystemId": "abc", "path": "/x/y.py"},
        }
        store.commit([doc])
        assert store.get(ns + "doc") == doc
        assert store.get_many([ns + "doc", ns + "missing"]) == {ns + "doc": doc}

    @pytest.mark.parametrize("long", [False, True], ids=["short", "long"])
    def test_every_string_comes_back_as_stored(
        self, store: ObjectStore, ns: str, long: bool
    ) -> None:
        """Decision 0026: lone surrogates (which have no UTF-8 form), surrogate pairs held as
        two code points, and the characters a store might use to carry them, in values, keys,
        lists, ids and query arguments, short or long (a store may send long text otherwise)."""
        pad = "x" * (10_000 if long else 0)
        odd = ["a\ud800b", "\udfff", "\ud83d\ude00", "\ud800\ud800", "\ufdd0d800", "\ufdd0", "😀"]
        sid = ns + "sess\udc80"
        doc = {
            "xt/id": ns + "id\ud801",
            "type": ns + "kind\udbff",
            "content": pad + "".join(odd) + pad,
            "parts": odd,
            "nested": {"key\ud800": {"deep\udfff": ["\ud800"]}},
            "session_id": sid,
        }
        log = {
            "xt/id": f"log:{sid}:000000001",
            "type": "session_log",
            "session_id": sid,
            "seq": 1,
            "events": [{"text": "\ud800" + pad}],
        }
        store.commit([doc, log])
        oid = str(doc["xt/id"])
        assert store.get(oid) == doc
        assert store.get_many([oid]) == {oid: doc}
        assert [v.document for v in store.history(oid)] == [doc]
        assert store.ids_of_type(ns + "kind\udbff") == [oid]
        assert store.ids_of_type(ns + "kind\ufffd") == []
        assert store.session_log(sid) == [log]
        assert store.session_log(ns + "sess\ufffd") == []
        # A document read back is a precondition that holds.
        read = store.get(oid)
        assert read is not None
        store.commit([{**doc, "v": 2}], [Expect(oid, read)])
        assert store.get(oid) == {**doc, "v": 2}

    def test_get_many_returns_every_existing_id(self, store: ObjectStore, ns: str) -> None:
        docs = [{"xt/id": f"{ns}{i}", "type": "toolcall", "n": i} for i in range(50)]
        store.commit(docs)
        found = store.get_many([str(d["xt/id"]) for d in docs] + [ns + "none"])
        assert found == {d["xt/id"]: d for d in docs}

    def test_invalid_documents_are_refused_and_nothing_is_written(
        self, store: ObjectStore, ns: str
    ) -> None:
        good = {"xt/id": ns + "good", "type": "file"}
        for bad in ({"type": "file"}, {"xt/id": "", "type": "x"}, {"xt/id": 7, "type": "x"}):
            with pytest.raises(InvalidInput):
                store.commit([good, bad])
        with pytest.raises(InvalidInput):
            store.commit([good, {"xt/id": ns + "nan", "value": float("nan")}])
        with pytest.raises(InvalidInput):
            store.commit([good, dict(good)])  # the same id twice in one commit
        assert store.get(ns + "good") is None

    # -- versions, history, as-of ------------------------------------------------------------

    def test_versions_are_kept_in_order(self, store: ObjectStore, ns: str) -> None:
        oid = ns + "versioned"
        receipts = [store.commit([{"xt/id": oid, "type": "file", "v": v}]) for v in range(3)]
        assert [r.tx_id for r in receipts] == sorted(r.tx_id for r in receipts)
        assert len({r.tx_id for r in receipts}) == 3
        history = store.history(oid)
        assert [h.document["v"] for h in history] == [0, 1, 2]
        assert [h.tx_id for h in history] == [r.tx_id for r in receipts]
        assert all(h.tx_time for h in history)
        assert store.get(oid) == {"xt/id": oid, "type": "file", "v": 2}

    def test_identical_put_is_still_a_version(self, store: ObjectStore, ns: str) -> None:
        # The store records what it is told; avoiding spurious versions is the caller's job
        # (preconditions), so this behaviour must be the same in every store.
        oid = ns + "same"
        store.commit([{"xt/id": oid, "v": 1}])
        store.commit([{"xt/id": oid, "v": 1}])
        assert len(store.history(oid)) == 2

    def test_as_of_by_transaction(self, store: ObjectStore, ns: str) -> None:
        a, b = ns + "a", ns + "b"
        r1 = store.commit([{"xt/id": a, "v": 1}])
        r2 = store.commit([{"xt/id": a, "v": 2}, {"xt/id": b, "v": 1}])
        r3 = store.commit([{"xt/id": b, "v": 2}])
        assert store.get_as_of(a, r1.tx_id) == {"xt/id": a, "v": 1}
        assert store.get_as_of(b, r1.tx_id) is None
        assert store.get_as_of(a, r2.tx_id) == {"xt/id": a, "v": 2}
        assert store.get_many_as_of([a, b], r2.tx_id) == {
            a: {"xt/id": a, "v": 2},
            b: {"xt/id": b, "v": 1},
        }
        assert store.get_many_as_of([a, b], r3.tx_id)[b] == {"xt/id": b, "v": 2}
        latest = store.latest_tx()
        assert latest is not None and latest.tx_id >= r3.tx_id

    # -- atomic commits and preconditions ----------------------------------------------------

    def test_failed_precondition_writes_nothing(self, store: ObjectStore, ns: str) -> None:
        a, b = ns + "a", ns + "b"
        store.commit([{"xt/id": a, "v": 1}])
        with pytest.raises(ConflictError):
            store.commit(
                [{"xt/id": a, "v": 2}, {"xt/id": b, "v": 1}],
                [Expect(a, {"xt/id": a, "v": 99})],
            )
        assert store.get(a) == {"xt/id": a, "v": 1}
        assert store.get(b) is None
        assert len(store.history(a)) == 1

    def test_expect_absent(self, store: ObjectStore, ns: str) -> None:
        a = ns + "a"
        store.commit([{"xt/id": a, "v": 1}], [Expect(a, None)])
        with pytest.raises(ConflictError):
            store.commit([{"xt/id": a, "v": 2}], [Expect(a, None)])
        assert store.get(a) == {"xt/id": a, "v": 1}

    def test_expect_the_document_as_read(self, store: ObjectStore, ns: str) -> None:
        a = ns + "a"
        doc = {"xt/id": a, "n": 3, "f": 0.5, "m": {"x": [1, "two", None]}, "s": "é😀", "z": None}
        store.commit([doc])
        read = store.get(a)
        assert read is not None
        store.commit([{"xt/id": a, "n": 4}], [Expect(a, read)])
        assert store.get(a) == {"xt/id": a, "n": 4}

    def test_concurrent_writers_with_the_same_precondition_one_wins(
        self, store: ObjectStore, ns: str
    ) -> None:
        target = ns + "contended"
        store.commit([{"xt/id": target, "v": 0}])
        base = store.get(target)
        outcomes: list[str] = []
        barrier = threading.Barrier(4)

        def writer(n: int) -> None:
            barrier.wait()
            try:
                store.commit([{"xt/id": target, "v": n + 1}], [Expect(target, base)])
                outcomes.append("won")
            except ConflictError:
                outcomes.append("lost")

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outcomes) == ["lost", "lost", "lost", "won"]
        assert len(store.history(target)) == 2

    def test_concurrent_writers_without_preconditions_all_land(
        self, store: ObjectStore, ns: str
    ) -> None:
        def writer(n: int) -> None:
            for i in range(10):
                store.commit([{"xt/id": f"{ns}w{n}-{i}", "v": i}])

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        found = store.get_many(f"{ns}w{n}-{i}" for n in range(4) for i in range(10))
        assert len(found) == 40

    # -- submissions -------------------------------------------------------------------------

    def test_submissions_land_in_order_each_checked_against_the_ones_before(
        self, store: ObjectStore, ns: str
    ) -> None:
        a = ns + "a"
        v1, v2 = {"xt/id": a, "v": 1}, {"xt/id": a, "v": 2}
        first = store.submit([v1], [Expect(a, None)])
        second = store.submit([v2], [Expect(a, v1)])  # only true once the first has landed
        third = store.submit([{"xt/id": a, "v": 3}], [Expect(a, None)])  # no longer true
        r1, r2 = first.result(), second.result()
        with pytest.raises(ConflictError) as refused:
            third.result()
        with pytest.raises(ConflictError):
            third.result()  # asking again gives the same answer
        assert refused.value.object_ids == (a,)
        assert r1.tx_id < r2.tx_id
        assert [v.document for v in store.history(a)] == [v1, v2]
        assert store.get(a) == v2

    def test_a_submission_that_requires_a_refused_one_is_refused_too(
        self, store: ObjectStore, ns: str
    ) -> None:
        a, entry1, entry2 = ns + "a", ns + "entry-1", ns + "entry-2"
        store.commit([{"xt/id": a, "v": 1}])
        doc1 = {"xt/id": entry1, "n": [1, 2]}
        refused = store.submit([doc1], [Expect(a, {"xt/id": a, "v": 99})])
        chained = store.submit([{"xt/id": entry2}], [Expect(entry1, doc1)])
        independent = store.submit([{"xt/id": ns + "other"}], [Expect(ns + "other", None)])
        for submission in (refused, chained):
            with pytest.raises(ConflictError):
                submission.result()
        independent.result()
        assert store.get_many([entry1, entry2]) == {}
        assert store.get(ns + "other") == {"xt/id": ns + "other"}

    def test_a_chained_submission_lands_when_its_predecessor_did(
        self, store: ObjectStore, ns: str
    ) -> None:
        entries: list[dict[str, Any]] = [
            {"xt/id": f"{ns}entry-{n}", "events": [{"n": n}, None]} for n in range(4)
        ]
        submitted = [store.submit([entries[0]], [Expect(entries[0]["xt/id"], None)])]
        for before, entry in itertools.pairwise(entries):
            submitted.append(
                store.submit(
                    [entry], [Expect(entry["xt/id"], None), Expect(before["xt/id"], before)]
                )
            )
        receipts = [s.result() for s in submitted]
        assert [r.tx_id for r in receipts] == sorted(r.tx_id for r in receipts)
        assert store.get_many(e["xt/id"] for e in entries) == {e["xt/id"]: e for e in entries}

    def test_invalid_documents_are_refused_at_submit_and_nothing_is_sent(
        self, store: ObjectStore, ns: str
    ) -> None:
        before = store.latest_tx()
        for puts in ([{"no": "id"}], [{"xt/id": ns + "nan", "v": float("nan")}]):
            with pytest.raises(InvalidInput):
                store.submit(puts)
        assert store.latest_tx() == before

    # -- queries -----------------------------------------------------------------------------

    def test_session_log_in_seq_order_after_a_position(self, store: ObjectStore, ns: str) -> None:
        sid = ns + "session"
        other = ns + "other"
        for seq in (3, 1, 2, 10):
            store.commit(
                [
                    {
                        "xt/id": f"log:{sid}:{seq:09d}",
                        "type": "session_log",
                        "session_id": sid,
                        "seq": seq,
                        "events": [{"event": "X", "n": seq}],
                    }
                ]
            )
        store.commit(
            [{"xt/id": f"log:{other}:1", "type": "session_log", "session_id": other, "seq": 1}]
        )
        assert [d["seq"] for d in store.session_log(sid)] == [1, 2, 3, 10]
        assert [d["seq"] for d in store.session_log(sid, after_seq=2)] == [3, 10]
        assert store.session_log(sid, after_seq=10) == []
        assert store.session_log(ns + "unknown") == []
        assert store.session_log(sid)[0]["events"] == [{"event": "X", "n": 1}]

    def test_session_log_gives_each_entry_of_a_document_of_several(
        self, store: ObjectStore, ns: str
    ) -> None:
        """Decision 0134: a log document may hold several consecutive entries; the log gives
        each on its own, exactly as built, from any position, beside documents of one entry
        (every session written before)."""
        sid = ns + "session"

        def entry(seq: int) -> dict[str, Any]:
            return persistence.log_entry(
                sid, seq, command="X", command_id=f"c{seq}", at="2026-01-01T00:00:00Z", events=()
            )

        built = {seq: entry(seq) for seq in range(1, 24)}
        most = persistence.LOG_ENTRIES
        store.commit([built[1]])
        store.commit([built[2]])
        store.commit([persistence.log_document([built[3], built[4], built[5]])])
        store.commit([persistence.log_document([built[k] for k in range(6, 6 + most)])])
        store.commit([built[k] for k in range(6 + most, 24)])  # one a document, one transaction
        assert [d["seq"] for d in store.session_log(sid)] == list(range(1, 24))
        assert store.session_log(sid) == [built[k] for k in range(1, 24)]
        for after in (2, 3, 4, 5, 6, 6 + most - 2, 6 + most - 1, 22, 23):
            assert store.session_log(sid, after_seq=after) == [
                built[k] for k in range(after + 1, 24)
            ], after
        assert store.get(persistence.log_entry_id(sid, 4)) is None  # held by entry 3's document

    def test_ids_of_type(self, store: ObjectStore, ns: str) -> None:
        kind = ns + "kind"
        store.commit([{"xt/id": ns + "b", "type": kind}, {"xt/id": ns + "a", "type": kind}])
        store.commit([{"xt/id": ns + "c", "type": ns + "else"}])
        assert store.ids_of_type(kind) == [ns + "a", ns + "b"]
        # The latest version decides.
        store.commit([{"xt/id": ns + "b", "type": ns + "else"}])
        assert store.ids_of_type(kind) == [ns + "a"]

    # -- the transaction log -------------------------------------------------------------------

    def test_changes_list_committed_transactions_in_order(
        self, store: ObjectStore, ns: str
    ) -> None:
        before = store.latest_tx()
        start = None if before is None else before.tx_id
        first = store.commit([{"xt/id": ns + "a", "v": 1}, {"xt/id": ns + "b", "text": "é\n"}])
        with pytest.raises(ConflictError):
            store.commit([{"xt/id": ns + "a", "v": 99}], [Expect(ns + "a", None)])
        second = store.commit([{"xt/id": ns + "a", "v": 2}])
        mine = [
            (c.tx_id, c.tx_time, [dict(d) for d in c.documents])
            for c in store.changes(start, limit=10_000)
            if any(str(d["xt/id"]).startswith(ns) for d in c.documents)
        ]
        assert mine == [
            (
                first.tx_id,
                first.tx_time,
                [{"xt/id": ns + "a", "v": 1}, {"xt/id": ns + "b", "text": "é\n"}],
            ),
            (second.tx_id, second.tx_time, [{"xt/id": ns + "a", "v": 2}]),
        ]
        # Paging: after a transaction, at most ``limit`` of them.
        page = store.changes(first.tx_id, limit=1)
        assert len(page) == 1 and page[0].tx_id > first.tx_id
        assert all(c.tx_id > second.tx_id for c in store.changes(second.tx_id, limit=5))

    def test_file_versions_after_a_transaction(self, store: ObjectStore, ns: str) -> None:
        """Every store that keeps the feed (decision 0066) lists the file versions written
        after a transaction, in order, with their object hashes, and nothing else; a store
        without it says so. From no point on it gives a position and is not complete."""
        first = store.file_versions(None)
        if not first.supported:
            assert first.versions == () and not first.complete
            return
        assert not first.complete
        start = first.position if first.position is not None else -1
        f1 = {"xt/id": ns + "f", "type": "file", "object_hash": "h1", "content": "one"}
        receipt = store.commit([f1, {"xt/id": ns + "t", "type": "toolcall", "object_hash": "x"}])
        with pytest.raises(ConflictError):
            store.commit([{**f1, "object_hash": "lost"}], [Expect(ns + "f", None)])
        second = store.commit([{**f1, "object_hash": "h2", "content": "two"}])
        deadline = time.monotonic() + 10
        found = store.file_versions(start)
        while (found.position or -1) < second.tx_id and time.monotonic() < deadline:
            time.sleep(0.02)  # a node's feed follows its indexing
            found = store.file_versions(start)
        assert found.complete and found.position is not None
        assert found.position >= second.tx_id
        mine = [v for v in found.versions if v[1].startswith(ns)]
        assert mine == [(receipt.tx_id, ns + "f", "h1"), (second.tx_id, ns + "f", "h2")]
        later = store.file_versions(receipt.tx_id)
        assert [v for v in later.versions if v[1].startswith(ns)] == [
            (second.tx_id, ns + "f", "h2")
        ]

    def test_file_versions_carry_the_documents_of_the_held_files_that_changed(
        self, store: ObjectStore, ns: str
    ) -> None:
        """Asked with the files a caller holds (id -> object_hash), the feed's answer carries
        the document of each held file whose latest version listed has another hash: the
        latest as of the answer's position (decision 0106). Files not held, and held files
        whose hash is the one held, come without."""
        start_at = store.file_versions(None)
        if not start_at.supported:
            return
        start = start_at.position if start_at.position is not None else -1
        doc = {"type": "file", "content": "one"}
        store.commit(
            [
                {**doc, "xt/id": ns + "a", "object_hash": "a1"},
                {**doc, "xt/id": ns + "b", "object_hash": "b1"},
                {**doc, "xt/id": ns + "c", "object_hash": "c1"},
            ]
        )
        last = store.commit(
            [
                {**doc, "xt/id": ns + "a", "object_hash": "a2", "content": "two"},
                {**doc, "xt/id": ns + "c", "object_hash": "c2"},
            ]
        )
        held = {ns + "a": "a1", ns + "b": "b1", ns + "gone": "x"}
        deadline = time.monotonic() + 10
        found = store.file_versions(start, held)
        while (found.position or -1) < last.tx_id and time.monotonic() < deadline:
            time.sleep(0.02)  # a node's feed follows its indexing
            found = store.file_versions(start, held)
        assert found.complete
        mine = {i: d for i, d in found.documents.items() if i.startswith(ns)}
        assert list(mine) == [ns + "a"]  # b is held as it is; c is not held
        assert mine[ns + "a"]["object_hash"] == "a2" and mine[ns + "a"]["content"] == "two"
        assert store.file_versions(start).documents == {}  # not asked: none

    def test_a_refused_commit_says_what_is_stored_of_what_it_expected(
        self, store: ObjectStore, ns: str
    ) -> None:
        """A conflict of a commit carries the version of each expected object as of the
        refusal (None: absent), so that the retry reads nothing again (decision 0106)."""
        a1 = {"xt/id": ns + "a", "v": 1}
        store.commit([a1])
        store.commit([{"xt/id": ns + "a", "v": 2}])
        with pytest.raises(ConflictError) as refused:
            store.commit(
                [{"xt/id": ns + "a", "v": 3}, {"xt/id": ns + "b", "v": 1}],
                [Expect(ns + "a", a1), Expect(ns + "b", None)],
            )
        assert refused.value.object_ids == (ns + "a",)
        assert refused.value.current == {ns + "a": {"xt/id": ns + "a", "v": 2}, ns + "b": None}

    def test_changes_refuse_a_limit_below_one(self, store: ObjectStore) -> None:
        with pytest.raises(InvalidInput):
            store.changes(None, limit=0)
