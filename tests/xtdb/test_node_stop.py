"""A RocksDB node stopped in the middle of a session, seen through ``ContextService``.

A writer records tool calls one after another; the test stops the node after a random number of
them. The call in flight and the next one fail with ``StoreUnavailable`` within the store's
configured timeout; nothing is half-written; once the node is back (same data directory, same
port) the same service carries the same session on, and the session holds every tool call
exactly once, in order.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from contextlib import closing
from pathlib import Path

import pytest

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.xtdb import XtdbNode, open_store
from selfctx.application.persistence import entry_events
from selfctx.application.ports.store import StoreUnavailable
from selfctx.application.settings import Settings

pytestmark = [pytest.mark.xtdb, pytest.mark.slow]

TIMEOUT = 2.0
"""The store's configured timeout (seconds): every call fails within it when the node is down."""


def test_a_stopped_node_fails_the_session_cleanly_and_it_continues_after_a_restart(
    rocksdb_node: XtdbNode, tmp_path: Path
) -> None:
    ns = f"t{uuid.uuid4().hex[:8]}"
    sid = f"{ns}-session"
    store = open_store(rocksdb_node.url, timeout=TIMEOUT)
    service = build_service(
        store=store, workspace=str(tmp_path), host_id=f"{ns}-host", settings=Settings(policy="ssot")
    )
    service.start_session(sid)

    acked: list[str] = []
    failures: list[tuple[str, BaseException, float]] = []
    progress = threading.Condition()

    def writer() -> None:
        for n in range(10_000):
            call_id = f"{ns}-tc-{n}"
            began = time.monotonic()
            try:
                service.record_tool_call(sid, call_id, tool="bash", args={"n": n}, output=str(n))
            except BaseException as exc:
                failures.append((call_id, exc, time.monotonic() - began))
                with progress:
                    progress.notify_all()
                return
            with progress:
                acked.append(call_id)
                progress.notify_all()

    target = random.randint(10, 40)
    thread = threading.Thread(target=writer)
    thread.start()
    with progress:
        assert progress.wait_for(lambda: len(acked) >= target or failures, timeout=120)
    rocksdb_node.stop()
    thread.join(60)
    assert not thread.is_alive()

    # The call in flight (or the next one) failed with the typed error, within the timeout.
    [(in_flight, error, took)] = failures
    assert isinstance(error, StoreUnavailable), error
    assert error.url == rocksdb_node.url
    assert took < TIMEOUT + 1.0
    # So does the next operation of any kind, and it changes nothing in memory.
    state, position = service.state(sid), service.log_position(sid)
    for operation in (
        lambda: service.record_user_message(sid, "while the node is down"),
        lambda: service.state_at(sid, 1),
    ):
        began = time.monotonic()
        with pytest.raises(StoreUnavailable):
            operation()
        assert time.monotonic() - began < TIMEOUT + 1.0
    assert (service.state(sid), service.log_position(sid)) == (state, position)

    rocksdb_node.start()  # same data directory, same port
    with closing(open_store(rocksdb_node.url, timeout=10.0)) as reader:
        # Nothing half-written: the call in flight is there whole (object and log entry) or not
        # at all; every log entry's objects exist; the log has no gap.
        log = reader.session_log(sid)
        assert [e["seq"] for e in log] == list(range(1, len(log) + 1))
        logged = [
            ev["object_id"]
            for e in log
            for ev in entry_events(e)
            if ev["event"] == "ToolCallRecorded"
        ]
        assert logged[: len(acked)] == acked
        assert logged[len(acked) :] in ([], [in_flight])
        assert (reader.get(in_flight) is not None) == (logged[len(acked) :] == [in_flight])
        assert set(reader.get_many(logged)) == set(logged)

    # The same service carries the same session on: the failed call is retried (idempotent, as
    # a harness retries), then more; every tool call is in the session exactly once, in order.
    number = len(acked)
    assert (
        service.record_tool_call(
            sid, in_flight, tool="bash", args={"n": number}, output=str(number)
        )
        == in_flight
    )
    more = [f"{ns}-tc-{n}" for n in range(number + 1, number + 6)]
    for n, call_id in enumerate(more, number + 1):
        service.record_tool_call(sid, call_id, tool="bash", args={"n": n}, output=str(n))
    service.record_user_message(sid, "after the restart")
    expected = [*acked, in_flight, *more]
    assert list(service.state(sid).index) == expected

    fresh = build_service(store=store, workspace=str(tmp_path), settings=Settings(policy="ssot"))
    fresh.resume_session(sid)
    assert list(fresh.state(sid).index) == expected
    recorded = [
        ev["object_id"]
        for e in store.session_log(sid)
        for ev in entry_events(e)
        if ev["event"] == "ToolCallRecorded"
    ]
    assert recorded == expected  # none lost, none twice
    store.close()
