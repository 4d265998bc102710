"""A commit on our node says when its transaction is in the node's tx-log, before the node has
indexed it and decided it (decision 0138): the caller's ``LOGGED`` hook is called once, while
the commit is still waiting for its verdict, and the node's tx-log then holds the transaction;
the verdict follows, a receipt or a refusal. On a real node."""

from __future__ import annotations

import contextvars
import uuid
from collections.abc import Iterator

import pytest

from selfctx.adapters.xtdb import XtdbNode, XtdbStore, open_store
from selfctx.application.ports.store import LOGGED, ConflictError, Expect

pytestmark = pytest.mark.xtdb


@pytest.fixture
def store(xtdb_node: XtdbNode) -> Iterator[XtdbStore]:
    store = open_store(xtdb_node.url, timeout=10.0)
    yield store
    store.close()


def _logged_commit(
    store: XtdbStore, doc: dict[str, object], expect: list[Expect]
) -> tuple[list[int | None], object]:
    """``store.commit`` with a ``LOGGED`` hook that reads the node's latest submitted
    transaction when it is called: (what each call read, the commit's receipt or error)."""
    seen: list[int | None] = []

    def hook() -> None:
        seen.append(store.client.latest_submitted_tx(timeout=5.0))

    def run() -> object:
        LOGGED.set(hook)
        try:
            return store.commit([doc], expect)
        except ConflictError as exc:
            return exc

    return seen, contextvars.copy_context().run(run)


def test_a_commit_is_logged_before_it_is_decided(store: XtdbStore) -> None:
    assert store.logged, "the node does not say that it answers in two lines"
    key = f"logged-{uuid.uuid4().hex[:10]}"
    seen, receipt = _logged_commit(store, {"xt/id": key, "n": 1}, [Expect(key, None)])
    assert not isinstance(receipt, ConflictError)
    assert seen == [receipt.tx_id]  # type: ignore[attr-defined]
    assert store.get(key) == {"xt/id": key, "n": 1}
    # refused when indexed (the document exists now): logged first, then the refusal
    seen, refused = _logged_commit(store, {"xt/id": key, "n": 2}, [Expect(key, None)])
    assert isinstance(refused, ConflictError)
    assert len(seen) == 1 and seen[0] is not None and seen[0] > receipt.tx_id  # type: ignore[attr-defined]
    assert store.get(key) == {"xt/id": key, "n": 1}


def test_no_hook_no_two_lines(store: XtdbStore) -> None:
    """Without a hook the commit asks for the one-line answer, as before."""
    key = f"plain-{uuid.uuid4().hex[:10]}"
    asked: list[bool] = []
    real = store.client.submit_tx

    def submit_tx(body: bytes, **kwargs: object) -> dict[str, object]:
        asked.append(kwargs.get("logged") is not None)
        return real(body, **kwargs)  # type: ignore[arg-type]

    store.client.submit_tx = submit_tx  # type: ignore[method-assign]
    store.commit([{"xt/id": key}], [Expect(key, None)])
    assert asked == [False]
