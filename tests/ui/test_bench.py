"""``selfctx bench ui`` runs, small, and prints its figures (the figures themselves are in
docs/benchmarks.md: a benchmark is no test of speed)."""

from __future__ import annotations

import json
import subprocess
import sys


def test_the_inspector_benchmark_prints_figures_for_every_page() -> None:
    argv = ["bench", "ui", "--requests", "30", "--objects", "300", "--repeat", "1", "--cold", "2"]
    done = subprocess.run(
        [sys.executable, "-m", "selfctx.adapters.cli.main", *argv, "--stores", "memory", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    session = result["memory"]["session"]
    assert session["requests"] == 30 and 280 <= session["objects"] <= 330
    assert session["record_bytes"] > 0 and session["record_ms"]["median"] > 0
    pages = result["memory"]["pages"]
    assert {"sessions", "timeline", "request (latest)", "file and a diff", "search"} <= set(pages)
    assert all(p["cold_ms"] > 0 and p["warm_ms"] > 0 and p["kb"] > 0 for p in pages.values())
    for page in pages.values():  # the median of each page's cold loads, and their spread
        assert len(page["cold_runs_ms"]) == 2 and page["cold_first_ms"] == page["cold_runs_ms"][0]
        assert page["cold_min_ms"] <= page["cold_ms"] <= page["cold_max_ms"]
        assert page["cold_cpu_ms"] > 0 and page["node_cpu_ms"] is None  # no node: memory


def test_the_inspector_benchmark_prints_a_table() -> None:
    argv = ["bench", "ui", "--requests", "10", "--objects", "100", "--repeat", "1", "--cold", "1"]
    done = subprocess.run(
        [sys.executable, "-m", "selfctx.adapters.cli.main", *argv, "--stores", "memory"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "low-high" in done.stdout and "request (latest)" in done.stdout
