"""``selfctx ui``: the web inspector of a store, served on this machine only.

It lists the store's sessions, each session's requests as a timeline, each request exactly as
it was sent, every object's versions and diffs, and search (docs/ui.md). It binds a loopback
address and prints the address to open, with a token drawn for this start; the token is the
only way in. ``selfctx proxy`` serves the same inspector at ``/_selfctx/ui`` of its own
address.
"""

from __future__ import annotations

import argparse
from typing import Any

from selfctx.adapters.cli.search_cmd import search_service
from selfctx.domain.errors import InvalidInput

LOOPBACK = ("127.0.0.1", "::1", "localhost")


def _run(args: argparse.Namespace) -> int:
    # imported here: the web stack loads only for the command that serves
    from selfctx.adapters.proxy.serving import bind, serve
    from selfctx.adapters.ui import Inspector

    if args.host not in LOOPBACK:
        raise InvalidInput("host", args.host, "the inspector serves this machine only: use "
                           "127.0.0.1, ::1 or localhost")  # fmt: skip
    sock = bind(args.host, args.port)  # before the store: a taken port fails fast
    service = search_service(args.store, args.index)
    try:
        inspector = Inspector(service)
        host = f"[{args.host}]" if ":" in args.host else args.host
        base = f"http://{host}:{sock.getsockname()[1]}"
        print(
            f"selfctx ui: the inspector of {args.store or 'the store'} is at\n"
            f"  {inspector.url(base)}\n"
            "  (open it in a browser on this machine; the token is new at every start)",
            flush=True,
        )
        serve(inspector.app, sock, log_level="warning")
    finally:
        service.close()
        service.store.close()
        sock.close()
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "ui",
        help="a local web inspector: sessions, requests as sent, objects and their versions",
        description="Serve the web inspector of a store on this machine (see docs/ui.md). "
        "The address it prints carries a token drawn at start; nothing else gets in.",
    )
    parser.add_argument("--store", help="xtdb://HOST:PORT or auto (default: $SELFCTX_STORE)")
    parser.add_argument(
        "--host", default="127.0.0.1", help="a loopback address (default 127.0.0.1)"
    )
    parser.add_argument("--port", type=int, default=8790, help="port (default 8790; 0: any free)")
    parser.add_argument(
        "--index",
        metavar="PATH",
        help="the search index file (default: the one `selfctx search` keeps for the store)",
    )
    parser.set_defaults(handler=_run)
