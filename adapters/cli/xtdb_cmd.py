"""``selfctx xtdb``: fetch XTDB's jars and run a local node in the background.

- ``selfctx xtdb fetch``: download the jars from Maven Central once (a second run does nothing).
- ``selfctx xtdb start [--data DIR | --in-memory] [--port N]``: start a node that outlives the
  command, print its URL (use it as ``--store xtdb://127.0.0.1:PORT``); without ``--data`` it is
  the RocksDB node ``--store auto`` uses.
- ``selfctx xtdb status`` / ``selfctx xtdb stop``: the same ``--data`` / ``--in-memory`` choice
  names the node.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import attrs

from selfctx.adapters.xtdb import fetch_jars, local, paths


def _run_dir(args: argparse.Namespace) -> tuple[Path, Path | None]:
    """The node's run directory and data directory (None for an in-memory node)."""
    if args.in_memory:
        return paths.default_memory_run_dir(), None
    data = Path(args.data).resolve() if args.data else paths.default_data_dir()
    return data, data


def _fetch(args: argparse.Namespace) -> int:
    result = fetch_jars()
    verb = "fetched" if result.fetched else "already present:"
    print(f"{verb} {result.jars} jars in {result.lib} ({result.seconds:.1f} s)")
    return 0


def _start(args: argparse.Namespace) -> int:
    run_dir, data = _run_dir(args)
    info = local.start_background(
        "memory" if data is None else "rocksdb", data, run_dir=run_dir, port=args.port
    )
    # The URL alone on stdout, so that scripts can capture it; the rest is for people.
    print(info.url)
    hint = "--in-memory" if data is None else f"--data {run_dir}"
    print(
        f"pid {info.pid}, log {run_dir / 'node.log'}; stop it with: selfctx xtdb stop {hint}",
        file=sys.stderr,
    )
    return 0


def _status(args: argparse.Namespace) -> int:
    run_dir, _ = _run_dir(args)
    status = local.node_status(run_dir)
    if args.json:
        info = None if status.info is None else attrs.asdict(status.info)
        print(json.dumps({"running": status.running, "node": info, "xtdb": status.xtdb}))
    elif status.running and status.info is not None:
        xtdb = status.xtdb or {}
        print(
            f"running: {status.info.url} pid {status.info.pid} ({status.info.config}, "
            f"XTDB {xtdb.get('version')}, {xtdb.get('kvStore')})"
        )
    else:
        stale = " (stale pid file)" if status.info is not None else ""
        print(f"not running{stale}: {run_dir}")
    return 0 if status.running else 1


def _stop(args: argparse.Namespace) -> int:
    run_dir, _ = _run_dir(args)
    stopped = local.stop_background(run_dir)
    print(f"stopped the node of {run_dir}" if stopped else f"no node running for {run_dir}")
    return 0


def _node_options(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--data", metavar="DIR", help=f"RocksDB data directory (default {paths.default_data_dir()})"
    )
    where.add_argument("--in-memory", action="store_true", help="an in-memory node (no data)")


def register(subparsers: Any) -> None:
    """Add ``selfctx xtdb`` and its actions."""
    parser = subparsers.add_parser("xtdb", help="fetch XTDB and run a local node (fetch, start...)")
    actions = parser.add_subparsers(dest="xtdb_action", metavar="ACTION", required=True)

    fetch = actions.add_parser("fetch", help="download XTDB's jars from Maven Central (once)")
    fetch.set_defaults(handler=_fetch)

    start = actions.add_parser("start", help="start a background node and print its URL")
    _node_options(start)
    start.add_argument("--port", type=int, help="HTTP port on 127.0.0.1 (default: a free one)")
    start.set_defaults(handler=_start)

    status = actions.add_parser("status", help="is the node running? (exit code 1 if not)")
    _node_options(status)
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    status.set_defaults(handler=_status)

    stop = actions.add_parser("stop", help="stop the background node")
    _node_options(stop)
    stop.set_defaults(handler=_stop)
