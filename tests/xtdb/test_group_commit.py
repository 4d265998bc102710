"""Commits made at the same moment by threads of one process go to the node together (decision
0114): one transaction for those that waited, each commit keeping its own outcome, on a real
node."""

from __future__ import annotations

import functools
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from selfctx.adapters.xtdb import XtdbNode, XtdbStore, open_store
from selfctx.application.ports.store import ConflictError, Expect, Receipt

pytestmark = pytest.mark.xtdb


@pytest.fixture
def ns() -> str:
    return f"g{uuid.uuid4().hex[:10]}-"


class _Held:
    """The store's transactions as sent (their ``tx-ops``' put ids), the first one held on its
    way until :meth:`release`."""

    def __init__(self, store: XtdbStore) -> None:
        self.store = store
        self.sent: list[list[str]] = []
        self.first = threading.Event()
        self.go = threading.Event()
        real = store.client.submit_tx

        def submit_tx(body: bytes, **kwargs: Any) -> dict[str, Any]:
            self.sent.append(_put_ids(body[: kwargs.get("blob_head") or len(body)]))
            if len(self.sent) == 1:
                self.first.set()
                assert self.go.wait(30), "the test never released the first transaction"
            return real(body, **kwargs)

        store.client.submit_tx = submit_tx  # type: ignore[method-assign]

    def release_when_waiting(self, count: int) -> None:
        """Release the first transaction once ``count`` commits wait behind it."""
        deadline = time.monotonic() + 30
        while len(getattr(self.store, "_waiting", ())) < count:  # a bound, not a timed assert
            assert time.monotonic() < deadline, "the commits never queued behind the first"
            time.sleep(0.005)
        self.go.set()


def _put_ids(head: bytes) -> list[str]:
    ops = json.loads(head)["tx-ops"]
    return [op[1]["xt/id"] for op in ops if op[0] == "put"]


@pytest.fixture
def store(xtdb_node: XtdbNode) -> Iterator[XtdbStore]:
    store = open_store(xtdb_node.url, timeout=10.0)
    yield store
    store.close()


def _in_threads(calls: list[Callable[[], Receipt]]) -> tuple[list[threading.Thread], list[Any]]:
    outcomes: list[Any] = [None] * len(calls)

    def run(index: int) -> None:
        try:
            outcomes[index] = calls[index]()
        except Exception as exc:  # looked at by the test
            outcomes[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    return threads, outcomes


def _commit_behind_first(
    store: XtdbStore, ns: str, later: list[Callable[[], Receipt]]
) -> tuple[_Held, Receipt, list[Any]]:
    """Commit a first document, held on its way while ``later`` commits are made; the first's
    receipt and the outcomes of the later ones."""
    held = _Held(store)
    first, first_outcome = _in_threads([lambda: store.commit([{"xt/id": f"{ns}first"}])])
    first[0].start()
    assert held.first.wait(30)
    threads, outcomes = _in_threads(later)
    for thread in threads:
        thread.start()
    held.release_when_waiting(len(later))
    for thread in [*first, *threads]:
        thread.join(60)
    assert isinstance(first_outcome[0], Receipt), first_outcome[0]
    return held, first_outcome[0], outcomes


def test_commits_that_wait_together_go_as_one_transaction(store: XtdbStore, ns: str) -> None:
    later: list[Callable[[], Receipt]] = [
        functools.partial(store.commit, [{"xt/id": f"{ns}{n}", "n": n}], [Expect(f"{ns}{n}", None)])
        for n in range(4)
    ]
    held, first, outcomes = _commit_behind_first(store, ns, later)

    assert held.sent[0] == [f"{ns}first"]
    assert len(held.sent) == 2 and sorted(held.sent[1]) == sorted(f"{ns}{n}" for n in range(4))
    assert all(isinstance(o, Receipt) for o in outcomes), outcomes
    assert len({o.tx_id for o in outcomes}) == 1 and outcomes[0].tx_id > first.tx_id
    for n in range(4):  # each commit is stored as it was made, and visible to this store
        assert store.get(f"{ns}{n}") == {"xt/id": f"{ns}{n}", "n": n}


def test_a_refused_precondition_refuses_only_its_own_commit(store: XtdbStore, ns: str) -> None:
    store.commit([{"xt/id": f"{ns}x", "v": 1}])
    store.commit([{"xt/id": f"{ns}y", "v": 1}])
    later = [
        # stale: x is at version 1, not 0
        lambda: store.commit([{"xt/id": f"{ns}a"}], [Expect(f"{ns}x", {"xt/id": f"{ns}x"})]),
        lambda: store.commit(
            [{"xt/id": f"{ns}b"}], [Expect(f"{ns}y", {"xt/id": f"{ns}y", "v": 1})]
        ),
        lambda: store.commit([{"xt/id": f"{ns}c"}]),
    ]
    held, _first, outcomes = _commit_behind_first(store, ns, later)

    refused = outcomes[0]
    assert isinstance(refused, ConflictError), refused
    assert refused.object_ids == (f"{ns}x",)
    assert dict(refused.current) == {f"{ns}x": {"xt/id": f"{ns}x", "v": 1}}
    assert isinstance(outcomes[1], Receipt) and isinstance(outcomes[2], Receipt), outcomes
    assert store.get(f"{ns}a") is None
    assert store.get(f"{ns}b") == {"xt/id": f"{ns}b"}
    assert store.get(f"{ns}c") == {"xt/id": f"{ns}c"}
    # the merged transaction was refused whole; the two others were sent again, each alone
    assert len(held.sent[1]) == 3 and sorted(map(tuple, held.sent[2:])) == [
        (f"{ns}b",),
        (f"{ns}c",),
    ]


def test_commits_that_touch_one_document_go_one_after_the_other(store: XtdbStore, ns: str) -> None:
    written = {"xt/id": f"{ns}x", "by": "a"}
    later = [
        lambda: store.commit([written]),
        # made after the one above: expects what it writes (in one transaction, every match
        # would see the state before both, and this one would be refused)
        lambda: store.commit([{"xt/id": f"{ns}z"}], [Expect(f"{ns}x", written)]),
        lambda: store.commit([{"xt/id": f"{ns}w"}]),
    ]
    held = _Held(store)
    first, _ = _in_threads([lambda: store.commit([{"xt/id": f"{ns}first"}])])
    first[0].start()
    assert held.first.wait(30)
    threads, outcomes = _in_threads(later)
    threads[0].start()  # in this order: the writer of x waits first
    held_count = 1
    deadline = time.monotonic() + 30
    for thread in threads[1:]:
        while len(getattr(store, "_waiting", ())) < held_count:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        thread.start()
        held_count += 1
    held.release_when_waiting(3)
    for thread in [*first, *threads]:
        thread.join(60)

    assert all(isinstance(o, Receipt) for o in outcomes), outcomes
    assert sorted(held.sent[1]) == sorted([f"{ns}x", f"{ns}w"]) and held.sent[2] == [f"{ns}z"]
    assert outcomes[1].tx_id > outcomes[0].tx_id == outcomes[2].tx_id
    assert store.get(f"{ns}z") == {"xt/id": f"{ns}z"}
