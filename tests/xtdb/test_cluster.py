"""Two XTDB nodes sharing one PostgreSQL (tx-log and documents), each with its own RocksDB
index: what one node writes, the other reads once it has awaited the transaction."""

from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import attrs
import pytest

from selfctx.adapters.bootstrap import store_identity
from selfctx.adapters.filesystem.claims import claims_path
from selfctx.adapters.xtdb import XtdbNode, XtdbStore, open_store
from selfctx.application.persistence import log_entry_tx
from selfctx.application.ports.store import ConflictError, Expect
from selfctx.application.service import ContextService
from selfctx.domain.chat import ToolCallRequest
from selfctx.domain.mounts import MountTable
from tests.support import (
    CountingClock,
    CountingIds,
    FakeFileReader,
    WrappedStore,
    compose_service,
    file_id,
)
from tests.xtdb.pg import LocalPostgres, find_bin_dir

pytestmark = [pytest.mark.xtdb, pytest.mark.slow]


@pytest.fixture(scope="module")
def postgres() -> Iterator[LocalPostgres]:
    bin_dir = find_bin_dir()
    if bin_dir is None:
        pytest.skip(
            "PostgreSQL server binaries not found (looked in /usr/lib/postgresql/*/bin, on PATH "
            "and in $SELFCTX_PG_BIN); install the Debian package 'postgresql' to run this test"
        )
    with LocalPostgres(bin_dir) as pg:
        yield pg


@pytest.fixture(scope="module")
def cluster(
    postgres: LocalPostgres, xtdb_jars: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[XtdbNode, XtdbNode]]:
    root = tmp_path_factory.mktemp("cluster")
    nodes = tuple(
        XtdbNode("postgres", root / name, postgres=postgres.target) for name in ("a", "b")
    )
    errors: list[BaseException] = []

    def start(node: XtdbNode) -> None:
        try:
            node.start()
        except BaseException as exc:
            errors.append(exc)

    # Both at once: the first start creates the shared table under an advisory lock.
    threads = [threading.Thread(target=start, args=(n,)) for n in nodes]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        yield nodes[0], nodes[1]
    finally:
        for node in nodes:
            node.stop()


def test_a_write_through_a_is_read_through_b(cluster: tuple[XtdbNode, XtdbNode]) -> None:
    a, b = cluster
    with closing(open_store(a.url)) as on_a, closing(open_store(b.url)) as on_b:
        doc = {"xt/id": "shared", "type": "file", "v": 1, "m": {"x": [1, 2.5, None]}}
        first = on_a.commit([doc])
        on_b.await_tx(first.tx_id)
        assert on_b.get("shared") == doc
        second = on_a.commit([dict(doc, v=2)], [Expect("shared", doc)])
        on_b.await_tx(second.tx_id)
        assert [v.document["v"] for v in on_b.history("shared")] == [1, 2]
        assert [v.tx_id for v in on_b.history("shared")] == [first.tx_id, second.tx_id]
        assert on_b.get_as_of("shared", first.tx_id) == doc
        assert on_b.ids_of_type("file") == ["shared"]


def test_preconditions_hold_across_nodes(cluster: tuple[XtdbNode, XtdbNode]) -> None:
    a, b = cluster
    with closing(open_store(a.url)) as on_a, closing(open_store(b.url)) as on_b:
        base = {"xt/id": "contended", "v": 0}
        on_b.await_tx(on_a.commit([base]).tx_id)
        read_by_b = on_b.get("contended")
        on_a.commit([{"xt/id": "contended", "v": "a"}], [Expect("contended", base)])
        # B has not necessarily indexed A's write yet; the log orders the two all the same.
        with pytest.raises(ConflictError):
            on_b.commit([{"xt/id": "contended", "v": "b"}], [Expect("contended", read_by_b)])
        assert on_b.get("contended") == {"xt/id": "contended", "v": "a"}
        assert on_a.get("contended") == {"xt/id": "contended", "v": "a"}


def test_the_log_lives_in_postgres(
    cluster: tuple[XtdbNode, XtdbNode], postgres: LocalPostgres
) -> None:
    a, _b = cluster
    with closing(open_store(a.url)) as on_a:
        receipts = [on_a.commit([{"xt/id": f"gap-{i}", "v": i}]) for i in range(3)]
    # Documents and transactions share one table, so transaction ids have gaps.
    assert all(r2.tx_id - r1.tx_id >= 2 for r1, r2 in itertools.pairwise(receipts))
    topics = postgres.psql("SELECT string_agg(DISTINCT topic, ',' ORDER BY topic) FROM tx_events")
    assert topics == "docs,txs"
    # A node started now, on an empty index, replays the shared log before it answers.
    late = XtdbNode("postgres", Path(a.run_dir).parent / "late", postgres=postgres.target)
    with late, closing(open_store(late.url)) as on_late:
        assert on_late.get_many(["gap-0", "gap-1", "gap-2"]) == {
            f"gap-{i}": {"xt/id": f"gap-{i}", "v": i} for i in range(3)
        }


def test_follower_latency_is_bounded(cluster: tuple[XtdbNode, XtdbNode]) -> None:
    """B polls the shared log; a write through A is visible on B within a second."""
    a, b = cluster
    with closing(open_store(a.url)) as on_a, closing(open_store(b.url)) as on_b:
        lags = []
        for i in range(5):
            receipt = on_a.commit([{"xt/id": f"lag-{i}", "v": i}])
            started = time.monotonic()
            on_b.await_tx(receipt.tx_id)
            lags.append(time.monotonic() - started)
            assert on_b.get(f"lag-{i}") == {"xt/id": f"lag-{i}", "v": i}
        assert max(lags) < 1.0, lags


def test_search_answers_the_same_through_either_node(
    cluster: tuple[XtdbNode, XtdbNode], tmp_path: Path
) -> None:
    """The search index is a projection of the shared transaction log (decision 0040): a client
    of node B, with an index of its own, finds what a client of node A wrote, ranked the same."""
    from selfctx.adapters.bootstrap import build_service
    from selfctx.domain.chat import ToolCallRequest

    a, b = cluster
    sid = f"search-{time.monotonic_ns()}"
    with closing(open_store(a.url)) as on_a, closing(open_store(b.url)) as on_b:
        writer = build_service(store=on_a, workspace=str(tmp_path), host_id="cluster-host")
        writer.start_session(sid, "two nodes")
        writer.record_user_message(sid, "why does the tokenizer drop the last token?")
        call = ToolCallRequest("cluster-tc", "bash", {"command": "pytest -q"})
        writer.record_assistant_message(sid, "Let me run the tokenizer tests.", [call])
        last = writer.record_tool_call(
            sid, "cluster-tc", tool="bash", args={"command": "pytest -q"},
            output="FAILED test_tokenizer.py::test_last_token - IndexError",
        )  # fmt: skip
        assert last == "cluster-tc"
        receipt = on_a.latest_tx()
        assert receipt is not None
        on_b.await_tx(receipt.tx_id)
        reader = build_service(
            store=on_b, workspace=str(tmp_path), host_id="cluster-host",
            search_path=str(tmp_path / "b.sqlite"),
        )  # fmt: skip
        on_a_hits = writer.search("tokenizer", session_id=sid)
        assert [h.kind for h in on_a_hits] and {h.role for h in on_a_hits} == {
            "user",
            "assistant",
            "tool",
        }
        assert reader.search("tokenizer", session_id=sid) == on_a_hits
        writer.close()
        reader.close()


def test_a_commit_wakes_a_node_that_would_not_poll_for_a_long_time(
    cluster: tuple[XtdbNode, XtdbNode], postgres: LocalPostgres, tmp_path: Path
) -> None:
    # the notification is sent by a trigger, in the transaction that inserts the row (decision
    # 0067): a node polling every 30 s still reads a commit made through another node at once
    a, _b = cluster
    installed = "SELECT count(*) FROM pg_trigger WHERE tgname = 'selfctx_tx_log_notify'"
    assert postgres.psql(installed) == "1"
    sleepy = XtdbNode(
        "postgres", tmp_path / "sleepy", postgres=attrs.evolve(postgres.target, poll_ms=30_000)
    )
    with (
        sleepy,
        closing(open_store(a.url)) as on_a,
        closing(open_store(sleepy.url, timeout=8)) as on_sleepy,
    ):
        for i in range(3):
            receipt = on_a.commit([{"xt/id": f"wake-{i}", "v": i}])
            on_sleepy.await_tx(receipt.tx_id)  # StoreUnavailable after 8 s, far before a poll
            assert on_sleepy.get(f"wake-{i}") == {"xt/id": f"wake-{i}", "v": i}


def test_both_nodes_name_the_store_alike_for_the_servers_watch_claims(
    cluster: tuple[XtdbNode, XtdbNode],
) -> None:
    # The servers of one machine watch a file once per store (decision 0066): on a cluster the
    # store is one whichever node a server talks to (decision 0093), though their addresses
    # differ. Two servers starting at once, one on each node, agree on its name.
    a, b = cluster
    names: list[str | None] = [None, None]
    with closing(open_store(a.url)) as on_a, closing(open_store(b.url)) as on_b:

        def name(k: int) -> None:
            names[k] = store_identity((on_a, on_b)[k])

        threads = [threading.Thread(target=name, args=(k,)) for k in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert names[0] is not None and names[0] == names[1]
        assert store_identity(on_a) == store_identity(on_b) == names[0]
        assert claims_path(names[0]) != claims_path("xtdb://" + a.url.removeprefix("http://"))


def test_a_batch_refused_on_one_node_is_committed_again_as_one_transaction(
    cluster: tuple[XtdbNode, XtdbNode],
) -> None:
    # Decision 0118: a session's batch through node a, refused twice because a session on node
    # b wrote the file it read first (a node that had perhaps not indexed it yet), is decided
    # again on what each refusal said and lands as one transaction: each command once, in
    # order, every version of the file once, and node b resumes the session as a holds it.
    a, b = cluster
    ns = f"t{uuid.uuid4().hex[:8]}-"
    host = f"{ns}host-fs"
    ids, clock = CountingIds(), CountingClock()
    with (
        closing(WrappedStore(open_store(a.url), namespace=ns)) as on_a,
        closing(WrappedStore(open_store(b.url), namespace=ns)) as on_b,
    ):

        def service(store: WrappedStore) -> ContextService:
            files = FakeFileReader(host)
            return compose_service(
                store=store, files=files, clock=clock, ids=ids, mounts=MountTable(host, ())
            )

        mine, theirs = service(on_a), service(on_b)
        mine.start_session("s1", "You are careful.")
        theirs.start_session("s2", "Another session.")

        def turn(n: int, content: str) -> None:
            call = f"tc-{n}"
            mine.record_assistant_message("s1", f"step {n}", [ToolCallRequest(call, "bash", {})])
            mine.record_tool_call("s1", call, tool="bash", args={}, output=f"output {n}")
            mine.index_file("s1", "/p/a.py", content)

        turn(1, "v1\n")
        versions = iter(["v3\n", "v4\n"])

        def another_writer() -> None:  # before each of the batch's first two transactions
            version = next(versions, None)
            if version is not None:
                theirs.index_file("s2", "/p/a.py", version)
                on_a.on_commit = another_writer

        before, logged = on_a.commits, len(on_a.session_log("s1"))
        on_a.on_commit = another_writer
        with mine.batch("s1") as progress:
            turn(2, "v2\n")
        on_a.on_commit = None
        assert progress.redone
        assert on_a.commits == before + 1  # the batch's, once: not one commit per command
        fid = file_id(host, "/p/a.py")
        assert [v.document["content"] for v in on_a.history(fid)] == [
            "v1\n",
            "v3\n",
            "v4\n",
            "v2\n",
        ]
        log = on_a.session_log("s1")
        assert [int(e["seq"]) for e in log] == list(range(1, len(log) + 1))
        assert [e["command"] for e in log[logged:]] == [
            "RecordAssistantMessage", "RecordToolCall", "IndexFile"
        ]  # fmt: skip
        landed = {log_entry_tx(on_a, "s1", int(e["seq"])) for e in log[logged:]}
        assert len(landed) == 1
        receipt = on_a.latest_tx()
        assert receipt is not None
        assert isinstance(on_b.inner, XtdbStore)
        on_b.inner.await_tx(receipt.tx_id)
        fresh = service(on_b)
        fresh.resume_session("s1")
        assert fresh.state("s1") == mine.state("s1")


def _read_back(store: XtdbStore) -> int:
    """Documents the node has read from the PostgreSQL table so far, its cache having none."""
    value = store.client.status(timeout=10.0)["selfctxDocumentsRead"]
    assert isinstance(value, int)
    return value


def test_a_node_indexes_what_it_wrote_without_reading_it_back(
    cluster: tuple[XtdbNode, XtdbNode],
) -> None:
    # Decision 0130: the writing node keeps the documents it wrote in its cache (as a RocksDB
    # node does, decision 0113); the other node reads them from PostgreSQL, unchanged.
    a, b = cluster
    ns = f"k{uuid.uuid4().hex[:8]}-"
    written: dict[str, dict[str, str]] = {}
    with closing(open_store(a.url)) as on_a, closing(open_store(b.url)) as on_b:
        on_a.commit([{"xt/id": f"{ns}warm", "type": "x"}])
        before_a, before_b = _read_back(on_a), _read_back(on_b)
        receipt = None
        for n in range(10):
            docs = [
                {"xt/id": f"{ns}{n}-{k}", "type": "entry", "text": f"{n}\t\u00e9" * (50 + k)}
                for k in range(4)
            ]
            receipt = on_a.commit(docs)  # answered once a has indexed it
            written |= {str(doc["xt/id"]): doc for doc in docs}
        assert receipt is not None
        assert _read_back(on_a) == before_a
        on_b.await_tx(receipt.tx_id)
        assert _read_back(on_b) >= before_b + len(written)  # b had none of them
        assert on_b.get_many(written) == written
        assert on_a.get_many(written) == written


def test_the_documents_rows_are_the_ones_xtdbs_store_writes(
    cluster: tuple[XtdbNode, XtdbNode], postgres: LocalPostgres
) -> None:
    # The batched document store (decision 0130) writes what XTDB's JDBC store writes: a row
    # per new document, a document put again updated in place (no second row), an evicted one
    # replaced by its tombstone in every row of its id, so that nodes with either store share
    # one database.
    a, b = cluster
    ns = f"r{uuid.uuid4().hex[:8]}-"

    def rows() -> tuple[int, int]:
        count = "SELECT count(*) FROM tx_events WHERE topic = 'docs' AND compacted = "
        return int(postgres.psql(count + "0")), int(postgres.psql(count + "1"))

    with closing(open_store(a.url)) as on_a, closing(open_store(b.url)) as on_b:
        docs: list[dict[str, Any]] = [{"xt/id": f"{ns}{k}", "v": k, "s": "x" * k} for k in range(5)]
        live, gone = rows()
        on_a.commit(docs)
        assert rows() == (live + 5, gone)
        on_a.commit([*docs[:3], {"xt/id": f"{ns}new", "v": -1}])  # three stored, one new
        assert rows() == (live + 6, gone)
        on_b.commit(docs[3:])  # through the other node, stored already
        assert rows() == (live + 6, gone)
        body = json.dumps({"tx-ops": [["evict", f"{ns}0"]]}).encode()
        tx = on_a.client.submit_tx(body, timeout=30, wait=29)
        assert tx.get("txCommitted?") is True
        on_b.await_tx(tx["txId"])
        # the evicted document's row holds its tombstone, and each node that indexed the
        # eviction wrote the tombstone in a row of its own (compacted too): 1 + 2 rows
        assert rows() == (live + 5, gone + 3)
        assert on_b.get(f"{ns}0") is None and on_a.get(f"{ns}0") is None
        kept = {str(d["xt/id"]): d for d in docs[1:]}
        assert on_b.get_many(kept) == kept
