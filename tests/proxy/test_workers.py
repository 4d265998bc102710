"""How the front of ``selfctx proxy --workers N`` places conversations on workers."""

from __future__ import annotations

import atexit
import collections
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

from selfctx.adapters.proxy import spawn
from selfctx.adapters.proxy.workers import Workers, routing_key


def _key(session: str, key: str = "Bearer k") -> bytes:
    return routing_key({"authorization": key, "x-selfctx-session": session})


def test_a_few_conversations_spread_evenly_and_each_stays_where_it_was_placed() -> None:
    placed = Workers(2)
    first = {n: placed.of(_key(f"bench-c{n}-1000")) for n in range(8)}
    assert collections.Counter(first.values()) == {0: 4, 1: 4}
    for _ in range(3):
        assert {n: placed.of(_key(f"bench-c{n}-1000")) for n in range(8)} == first


def test_the_routing_key_is_the_conversation_and_the_credentials() -> None:
    assert _key("a") == _key("a")
    assert _key("a") != _key("b")
    assert _key("a") != _key("a", key="Bearer other")


def test_forgotten_keys_free_their_place() -> None:
    placed = Workers(3, limit=4)
    for n in range(10):
        placed.of(_key(str(n)))
    assert sum(placed.held) == 4
    assert max(placed.held) - min(placed.held) <= 1


def test_a_worker_that_ignores_sigterm_is_killed_within_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The front's shutdown is bounded: a worker that does not end on SIGTERM is killed once
    ``STOP_SECONDS`` have passed, so the front itself always ends."""
    stubborn = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('listening on http://127.0.0.1:9', flush=True)\n"
        "time.sleep(60)\n"
    )
    real_popen = subprocess.Popen
    started: list[subprocess.Popen[str]] = []

    def popen(command: list[str], **kwargs: Any) -> subprocess.Popen[str]:
        process = real_popen([sys.executable, "-c", stubborn], **kwargs)
        started.append(process)
        return process

    stops: list[Callable[[], None]] = []
    monkeypatch.setattr(subprocess, "Popen", popen)
    monkeypatch.setattr(atexit, "register", stops.append)
    monkeypatch.setattr(spawn, "STOP_SECONDS", 1.0)
    _, urls = spawn.start_workers(2, [])
    assert urls == ["http://127.0.0.1:9"] * 2
    began = time.monotonic()
    stops[0]()
    assert time.monotonic() - began < 10
    assert [p.returncode for p in started] == [-signal.SIGKILL] * 2
