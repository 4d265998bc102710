"""``selfctx bench proxy`` runs end to end (its servers, its clients) and reports each figure it
names, the proxy's CPU per request beside the pass-through's included. It prints figures; this
test only checks that they are there."""

from __future__ import annotations

from selfctx.adapters.bench.proxy import run_proxy


def test_the_benchmark_reports_latency_cpu_and_throughput() -> None:
    result = run_proxy((5,), 2, clients=2, concurrent_size=5, concurrent_requests=2)
    assert result["store"] == "memory"
    (run,) = result["runs"]
    assert set(run["cpu_ms_per_request"]) == {"passthrough", "proxy"}
    assert run["requests"] == 2 and "p50" in run["added_ms"]
    together = result["concurrent"]
    assert together["clients"] == 2
    assert set(together["cpu_ms_per_request"]) == {"passthrough", "proxy"}
    assert together["proxy_per_s"] > 0 and together["passthrough_per_s"] > 0
