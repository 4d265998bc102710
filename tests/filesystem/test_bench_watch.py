"""``selfctx bench watch`` runs end to end and prints the figures it promises (small sizes; the
figures themselves are reported in docs/benchmarks.md, not asserted)."""

from __future__ import annotations

import json

import pytest

from selfctx.adapters.cli.main import main


def test_bench_watch_prints_one_json_object_with_its_figures(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = "bench watch --json --files 30 --dirs 3 --edits 5 --idle-seconds 0.2"
    code = main(args.split())

    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) == {"latency_ms", "edits", "watched_files", "idle_cpu_percent"}
    assert set(result["latency_ms"]) == {"p50", "p95", "max"}
    assert result["edits"] == 5 and result["watched_files"] == 30
    assert 0 <= result["latency_ms"]["p50"] <= result["latency_ms"]["p95"]
    assert result["latency_ms"]["p95"] <= result["latency_ms"]["max"]
    assert result["idle_cpu_percent"] >= 0
