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


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("bench", help="run a benchmark and print its figures")
    benches = parser.add_subparsers(dest="bench", metavar="BENCH", required=True)
    core = benches.add_parser(
        "core", help="per-turn cost and bytes per turn on the in-memory store"
    )
    core.add_argument("--json", action="store_true", help="print one JSON object")
    core.add_argument("--sizes", help="comma-separated session sizes (default 100,1000,10000)")
    core.set_defaults(handler=_core)
