"""``selfctx serve --stdio``: JSON-RPC 2.0 for harnesses in any language (one message per line).

stdout carries the protocol and nothing else: anything else that would print there (a library's
banner, a stray ``print``) is sent to stderr, with the logs.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import IO, Any

from selfctx.adapters.bootstrap import build_service, open_store
from selfctx.adapters.cli.stores import STORE_HELP
from selfctx.adapters.config import setting
from selfctx.adapters.harness.stdio import StdioServer

STDIN_BUFFER = 1 << 16
"""Bytes read from stdin at once (a pipe holds 64 KB)."""


def _serve(args: argparse.Namespace, protocol: IO[bytes]) -> None:
    workspace = os.path.realpath(args.workspace or os.getcwd())
    roots = [os.path.realpath(r) for r in args.root] or [workspace]
    store = open_store(args.store)
    service = None
    try:
        # A server lives as long as its agents: it watches the files they read
        # (docs/specification.md §3, Tracking).
        service = build_service(
            store=store,
            workspace=workspace,
            roots=roots,
            track=not args.no_track,
            store_name=args.store,
        )
        server = StdioServer(service, cwd=workspace, roots=roots)
        logging.getLogger("selfctx.serve").info(
            "ready: store %s, workspace %s, roots %s, tracking %s",
            args.store,
            workspace,
            roots,
            "off" if args.no_track else "on",
        )
        # Read with a buffer as large as a pipe's: a harness's line is often a megabyte, which
        # the default 8 KB buffer reads at four times the CPU (2.4 against 0.6 ms for 1.1 MB).
        with open(sys.stdin.fileno(), "rb", buffering=STDIN_BUFFER, closefd=False) as instream:
            server.serve(instream, protocol)
    finally:
        if service is not None:
            service.close()
        store.close()


def _run(args: argparse.Namespace) -> int:
    args.store = setting("store", args.store)
    logging.basicConfig(
        stream=sys.stderr,
        level=args.log_level.upper(),
        format="selfctx serve: %(levelname)s %(message)s",
    )
    if args.log_level != "debug":
        # One line per store request (every turn of every session) is debugging, not news.
        for noisy in ("httpx", "httpcore"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    stdout = sys.stdout
    sys.stdout = sys.stderr  # only the server writes to the real stdout
    try:
        _serve(args, stdout.buffer)
    finally:
        sys.stdout = stdout
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve harnesses over JSON-RPC 2.0 on stdin/stdout (one message per line)",
        description="Serve the context manager as JSON-RPC 2.0, one message per line on "
        "stdin/stdout; logs go to stderr. See docs/harness.md for the methods.",
    )
    parser.add_argument(
        "--stdio",
        action="store_true",
        required=True,
        help="speak JSON-RPC on stdin/stdout (the only transport so far)",
    )
    parser.add_argument("--store", default=None, help=STORE_HELP)
    parser.add_argument(
        "--workspace",
        metavar="DIR",
        help="the agent's working directory: relative paths in commands resolve against it, "
        "and it is the allowed root unless --root is given (default: the current directory)",
    )
    parser.add_argument(
        "--root",
        metavar="DIR",
        action="append",
        default=[],
        help="a directory files may be read from (repeatable; default: the workspace)",
    )
    parser.add_argument(
        "--no-track",
        action="store_true",
        help="do not watch the files sessions read (external edits are then seen on resume or "
        "on a re-read only)",
    )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="stderr log level (default: info)",
    )
    parser.set_defaults(handler=_run)
