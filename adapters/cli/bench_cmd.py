"""``selfctx bench ...``: benchmarks that print figures (JSON with ``--json``)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from adapters.bench.core import SIZES, run_core
from adapters.bootstrap import build_service
from adapters.memory import MemoryStore


def _progress(quiet: bool) -> Any:
    def report(message: str) -> None:
        if not quiet:
            print(f"... {message}", file=sys.stderr, flush=True)

    return report


def _core(args: argparse.Namespace) -> int:
    def make() -> Any:
        store = MemoryStore()
        service = build_service(store=store, workspace="/", host_id="bench-host")
        return service, lambda: store.bytes_received

    sizes = tuple(int(s) for s in args.sizes.split(",")) if args.sizes else SIZES
    result = run_core(make, sizes, _progress(args.json))
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{'objects':>8} {'median ms':>10} {'p95 ms':>8} {'bytes/turn':>11}")
    for size in result["per_turn_ms"]:
        t = result["per_turn_ms"][size]
        print(
            f"{size:>8} {t['median']:>10.3f} {t['p95']:>8.3f} {result['bytes_per_turn'][size]:>11.1f}"
        )
    first, last = (
        next(iter(result["bytes_per_turn"].values())),
        list(result["bytes_per_turn"].values())[-1],
    )
    print(f"bytes per turn, largest over smallest session: {last / first:.2f}x")
    return 0


def _watch(args: argparse.Namespace) -> int:
    from adapters.bench.watch import run_watch  # imported here: it starts watchdog threads

    result = run_watch(
        files=args.files,
        dirs=args.dirs,
        edits=args.edits,
        idle_seconds=args.idle_seconds,
        progress=_progress(args.json),
    )
    if args.json:
        print(json.dumps(result))
        return 0
    lat = result["latency_ms"]
    print(f"edit to stored version over {result['edits']} edits, {result['watched_files']} files")
    print(f"  p50 {lat['p50']} ms, p95 {lat['p95']} ms, max {lat['max']} ms")
    print(f"idle CPU: {result['idle_cpu_percent']} %")
    return 0


def _register_watch(benches: Any) -> None:
    watch = benches.add_parser(
        "watch", help="latency from a file edit to its stored version; idle CPU while watching"
    )
    watch.add_argument("--json", action="store_true", help="print one JSON object")
    watch.add_argument("--files", type=int, default=5_000, help="files watched (default 5000)")
    watch.add_argument("--dirs", type=int, default=50, help="directories they are in (50)")
    watch.add_argument("--edits", type=int, default=200, help="edits timed (default 200)")
    watch.add_argument(
        "--idle-seconds", type=float, default=10.0, help="idle window for CPU (default 10)"
    )
    watch.set_defaults(handler=_watch)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("bench", help="run a benchmark and print its figures")
    benches = parser.add_subparsers(dest="bench", metavar="BENCH", required=True)
    core = benches.add_parser(
        "core", help="per-turn cost and bytes per turn on the in-memory store"
    )
    core.add_argument("--json", action="store_true", help="print one JSON object")
    core.add_argument("--sizes", help="comma-separated session sizes (default 100,1000,10000)")
    core.set_defaults(handler=_core)
    _register_watch(benches)
