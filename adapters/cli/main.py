"""``selfctx``: the command-line front of the context manager.

Each sub-command lives in its own module under ``selfctx.adapters.cli`` and exposes
``register(subparsers)``; this module only collects them.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from selfctx.domain.errors import SelfContextError

# Modules that contribute sub-commands, in the order `selfctx --help` lists them.
COMMAND_MODULES = (
    "selfctx.adapters.cli.demo",
    "selfctx.adapters.cli.replay_cmd",
    "selfctx.adapters.cli.inspect_cmd",
    "selfctx.adapters.cli.search_cmd",
    "selfctx.adapters.cli.checkpoint_cmd",
    "selfctx.adapters.cli.xtdb_cmd",
    "selfctx.adapters.cli.bench_cmd",
    "selfctx.adapters.cli.tokenizer_cmd",
    "selfctx.adapters.cli.serve_cmd",
    "selfctx.adapters.cli.proxy_cmd",
    "selfctx.adapters.cli.pi_cmd",
    "selfctx.adapters.cli.config_cmd",
    "selfctx.adapters.cli.ui_cmd",
)


def _version() -> str:
    from selfctx import __version__

    return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="selfctx",
        description="Context manager for LLM coding agents: objects, metadata lines, active set.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except SelfContextError as exc:
        print(f"selfctx: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (``selfctx ... | head``): stop quietly, as Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    raise SystemExit(main())
