"""``selfctx bench ui`` runs, small, and prints its figures (the figures themselves are in
docs/benchmarks.md: a benchmark is no test of speed)."""

from __future__ import annotations

import json
import subprocess
import sys


def test_the_inspector_benchmark_prints_figures_for_every_page() -> None:
    argv = ["bench", "ui", "--requests", "30", "--objects", "300", "--repeat", "1"]
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
