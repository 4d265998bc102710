"""``selfctx bench proxy`` runs end to end (its servers, its clients) and reports each figure it
names, the proxy's CPU per request beside the pass-through's included (with workers, the front's
apart). It prints figures; this
test only checks that they are there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from selfctx.adapters.bench.proxy import _jit_ticks, run_proxy
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
        jit = _jit_ticks(info.pid)
    finally:
        local.stop_background(data)
    assert result["store"] == "xtdb" and info is not None
    # the JVM's compiler threads are found by name: at least one C1 and one C2 (HotSpot's
    # tiered compilation); this process is no JVM and has none
    assert len(jit) >= 2 and all(ticks >= 0 for ticks in jit.values())
    assert _jit_ticks(os.getpid()) == {} and _jit_ticks(0) == {}
    for cpu in (
        result["runs"][0]["cpu_ms_per_request"],
        result["concurrent"]["cpu_ms_per_request"],
    ):
        # the node's JVM, counted while the proxy's requests were served (in clock ticks: a tiny
        # run may count 0), and the part of it its JIT compiler threads used (decision 0125)
        assert set(cpu) == {"passthrough", "proxy", "proxy_front", "node", "node_jit"}
        assert cpu["node"] >= 0 and 0 <= cpu["node_jit"] <= cpu["node"]
