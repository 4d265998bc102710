"""``selfctx bench proxy`` runs end to end (its servers, its clients) and reports each figure it
names, the proxy's CPU per request beside the pass-through's included (with workers, the front's
apart). It prints figures; this
test only checks that they are there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from selfctx.adapters.bench.proxy import (
    _JIT_THREADS,
    _group,
    _settle,
    _thread_ticks,
    _windows,
    run_proxy,
)
from selfctx.adapters.proxy.serving import stack
from selfctx.adapters.xtdb import local


def test_the_benchmark_reports_latency_cpu_and_throughput() -> None:
    result = run_proxy((5,), 2, clients=2, concurrent_size=5, concurrent_requests=2, warmup=3)
    assert result["store"] == "memory" and result["warmup"] == 3
    assert result["stack"] == stack()  # both sides served on it (decision 0147)
    (run,) = result["runs"]
    assert set(run["cpu_ms_per_request"]) == {"passthrough", "proxy", "proxy_front"}
    assert run["requests"] == 2 and "p50" in run["added_ms"]
    together = result["concurrent"]
    assert together["clients"] == 2
    assert set(together["cpu_ms_per_request"]) == {"passthrough", "proxy", "proxy_front"}
    assert together["proxy_per_s"] > 0 and together["passthrough_per_s"] > 0


def test_with_workers_the_fronts_cpu_is_reported_apart() -> None:
    result = run_proxy(
        (5,), 2, clients=2, concurrent_size=5, concurrent_requests=2, workers=2, warmup=0
    )
    assert result["workers"] == 2 and result["warmup"] == 0
    cpu = result["runs"][0]["cpu_ms_per_request"]
    # the front alone, and front and workers (in clock ticks: a tiny run may count 0 for both)
    assert 0 <= cpu["proxy_front"] <= cpu["proxy"]
    assert result["concurrent"]["proxy_per_s"] > 0


@pytest.mark.xtdb
def test_on_the_local_node_the_nodes_cpu_is_reported(
    xtdb_jars: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "auto"
    monkeypatch.setenv("SELFCTX_XTDB_DATA", str(data))
    try:
        result = run_proxy(
            (5,), 2, clients=2, concurrent_size=5, concurrent_requests=2, store="auto", warmup=0
        )
        info = local.read_run_info(data)
        assert info is not None
        jit = _thread_ticks(info.pid, _JIT_THREADS)
    finally:
        local.stop_background(data)
    assert result["store"] == "xtdb" and info is not None
    # each phase waited for the node's background threads after building its sessions
    assert 0 <= result["runs"][0]["settled_s"] <= 60
    assert 0 <= result["concurrent"]["settled_s"] <= 60
    # the JVM's compiler threads are found by name: at least one C1 and one C2 (HotSpot's
    # tiered compilation); this process is no JVM and has none
    assert len(jit) >= 2 and all(ticks >= 0 for ticks in jit.values())
    assert _thread_ticks(os.getpid(), _JIT_THREADS) == {} and _thread_ticks(0, _JIT_THREADS) == {}
    for cpu in (
        result["runs"][0]["cpu_ms_per_request"],
        result["concurrent"]["cpu_ms_per_request"],
    ):
        # the node's JVM, counted while the proxy's requests were served (in clock ticks: a tiny
        # run may count 0), and the parts of it its JIT compiler threads and its RocksDB
        # background threads used, counted inside the node's window (decision 0125)
        parts = {"node_jit", "node_rocksdb"}
        assert set(cpu) == {"passthrough", "proxy", "proxy_front", "node"} | parts
        assert all(cpu[part] >= 0 for part in parts)
        assert cpu["node_jit"] + cpu["node_rocksdb"] <= cpu["node"]
    for phase in (result["runs"][0], result["concurrent"]):
        # the node's CPU by thread group (decision 0149): groups named without their threads'
        # numbers, each a share of a request (a tiny run may count no tick: an empty map)
        groups = phase["node_threads"]
        assert all(ms > 0 and not name[-1].isdigit() for name, ms in groups.items())
        assert list(groups.values()) == sorted(groups.values(), reverse=True)
    # one client: the node's CPU a request in each window of 40 requests, the first (cold) one
    # reported beside the later ones (decision 0165); two requests make one window
    (window,) = result["runs"][0]["node_windows"]
    assert window >= 0


def test_the_nodes_cpu_is_reported_by_window_the_cold_one_first() -> None:
    # 90 requests: a cold first window, a warm second, a short last one (seconds a request)
    spent = [0.020] * 40 + [0.005] * 40 + [0.004] * 10
    assert _windows(spent) == [20.0, 5.0, 4.0]
    assert _windows(spent, size=45) == [18.33, 4.78]
    assert _windows([]) == []


def test_a_threads_group_is_its_name_without_its_number() -> None:
    assert _group("pool-1-thread-12") == _group("pool-1-thread-7") == "pool-1-thread"
    assert _group("C2 CompilerThread0") == "C2 CompilerThread"
    assert _group("rocksdb:high") == "rocksdb:high"
    assert _group("xtdb-tx-processor-1") == "xtdb-tx-processor"
    assert _group("42") == "42"


class _Clock:
    """A clock that :func:`_settle`'s sleeps move, and the RocksDB threads' ticks it reads."""

    def __init__(self, busy_until: float) -> None:
        self.now = 0.0
        self.busy_until = busy_until

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def ticks(self) -> int:
        # the threads use CPU (one tick per 0.1 s) until ``busy_until``, then none
        return int(min(self.now, self.busy_until) * 10)


def test_a_phase_waits_until_the_nodes_background_threads_are_idle_for_a_second() -> None:
    clock = _Clock(busy_until=4.0)
    waited = _settle(1, ticks=clock.ticks, clock=lambda: clock.now, sleep=clock.sleep)
    assert 4.9 <= waited <= 5.2  # busy for 4 s, then one idle second


def test_the_wait_for_a_node_that_stays_busy_is_bounded() -> None:
    clock = _Clock(busy_until=1e9)
    waited = _settle(1, limit=7.0, ticks=clock.ticks, clock=lambda: clock.now, sleep=clock.sleep)
    assert 7.0 <= waited <= 7.2


def test_without_a_node_nothing_is_waited_for() -> None:
    clock = _Clock(busy_until=1e9)
    assert _settle(0, ticks=clock.ticks, clock=lambda: clock.now, sleep=clock.sleep) == 0.0
    assert clock.now == 0.0
