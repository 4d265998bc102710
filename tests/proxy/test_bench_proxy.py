"""``selfctx bench proxy`` runs end to end (its servers, its clients) and reports each figure it
names, the proxy's CPU per request beside the pass-through's included (with workers, the front's
apart). It prints figures; this
test only checks that they are there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from selfctx.adapters.bench.proxy import _JIT_THREADS, _thread_ticks, run_proxy
from selfctx.adapters.xtdb import local


def test_the_benchmark_reports_latency_cpu_and_throughput() -> None:
    result = run_proxy((5,), 2, clients=2, concurrent_size=5, concurrent_requests=2, warmup=3)
    assert result["store"] == "memory" and result["warmup"] == 3
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
