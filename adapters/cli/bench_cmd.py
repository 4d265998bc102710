"""``selfctx bench ...``: benchmarks that print figures (JSON with ``--json``)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from typing import Any

from selfctx.adapters.bench.core import SIZES, run_core
from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.memory import MemoryStore
from selfctx.domain.errors import InvalidInput


def _progress(quiet: bool) -> Any:
    def report(message: str) -> None:
        if not quiet:
            print(f"... {message}", file=sys.stderr, flush=True)

    return report


def _core(args: argparse.Namespace) -> int:
    from selfctx.application.policies import DEFAULT_POLICY, policy_by_name
    from selfctx.application.settings import Settings

    settings = Settings(policy=policy_by_name(args.policy or DEFAULT_POLICY))

    def make() -> Any:
        store = MemoryStore()
        service = build_service(store=store, workspace="/", host_id="bench-host", settings=settings)
        return service, lambda: store.bytes_received

    sizes = tuple(int(s) for s in args.sizes.split(",")) if args.sizes else SIZES
    result = run_core(make, sizes, _progress(args.json))
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{'objects':>8} {'median ms':>10} {'p95 ms':>8} {'bytes/turn':>11}")
    for size in result["per_turn_ms"]:
        t = result["per_turn_ms"][size]
        per = result["bytes_per_turn"][size]
        print(f"{size:>8} {t['median']:>10.3f} {t['p95']:>8.3f} {per:>11.1f}")
    first, last = (
        next(iter(result["bytes_per_turn"].values())),
        list(result["bytes_per_turn"].values())[-1],
    )
    print(f"bytes per turn, largest over smallest session: {last / first:.2f}x")
    return 0


def _watch(args: argparse.Namespace) -> int:
    from selfctx.adapters.bench.watch import run_watch  # imported here: it starts watchdog threads

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


def _search(args: argparse.Namespace) -> int:
    from selfctx.adapters.bench.context import trajectories_in
    from selfctx.adapters.bench.search import run_search_bench
    from selfctx.adapters.harness.trajectories import default_directory

    if args.trajectories:
        paths = args.trajectories
    else:
        found = default_directory()
        paths = [found] if found else []
    trajectories = trajectories_in(paths) if paths else []

    def make() -> Any:
        return build_service(store=MemoryStore(), workspace="/", host_id="bench-host")

    result = run_search_bench(
        make,
        trajectories,
        objects=args.objects,
        queries=args.queries,
        progress=_progress(args.json),
    )
    if args.json:
        print(json.dumps(result))
        return 0
    q = result["query_ms"]
    print(
        f"{result['objects']:,} searchable objects ({result['sessions']} sessions, "
        f"{result['trajectories']} trajectories)"
    )
    print(f"index: {result['index_per_s']:,} objects/s ({result['index_seconds']} s)")
    print(
        f"query: p50 {q['p50']} ms, p95 {q['p95']} ms, max {q['max']} ms over {result['queries']}"
    )
    return 0


def _register_search(benches: Any) -> None:
    search = benches.add_parser(
        "search", help="build the search index over a large store and time queries"
    )
    search.add_argument("--json", action="store_true", help="print one JSON object")
    search.add_argument(
        "--objects", type=int, default=100_000, help="objects to write (default 100000)"
    )
    search.add_argument("--queries", type=int, default=300, help="queries timed (default 300)")
    search.add_argument(
        "--trajectories",
        nargs="*",
        metavar="PATH",
        help="trajectory files or folders (default: $SELFCTX_TRAJECTORIES or the development set)",
    )
    search.set_defaults(handler=_search)


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


def _store(args: argparse.Namespace) -> int:
    from selfctx.adapters.bench.store import run_store_bench, stdlib_sources  # starts JVMs

    sizes = tuple(int(s) for s in args.sizes.split(",")) if args.sizes else SIZES
    files = stdlib_sources()[: args.index_limit] if args.index_limit else None
    result = run_store_bench(
        sizes,
        config=args.node,
        index_files=files,
        progress=_progress(False),  # stderr: long run
    )
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"XTDB node: {args.node}; both stores with the ssot layout policy")
    print(
        f"{'objects':>8} {'memory ms':>10} {'p95':>8} {'xtdb ms':>9} {'p95':>8} {'bytes/turn':>11}"
    )
    for size, xt in result["per_turn_ms"]["xtdb"].items():
        mem = result["per_turn_ms"]["memory"][size]
        per = result["bytes_per_turn"]["xtdb"][size]
        print(
            f"{size:>8} {mem['median']:>10.3f} {mem['p95']:>8.3f}"
            f" {xt['median']:>9.3f} {xt['p95']:>8.3f} {per:>11.1f}"
        )
    resume, index = result["resume_s"], result["index"]
    print(f"resume: batch {resume['batch']} s, one by one {resume['one_by_one']} s")
    print(
        f"index: {index['files']} files, {index['files_per_s']} files/s, {index['mb_per_s']} MB/s"
        f" (raw read + SHA-256: {index['raw_read_sha256_mb_per_s']} MB/s);"
        f" every pass: {', '.join(str(rate) for rate in index['passes_files_per_s'])} files/s"
    )
    return 0


def _register_store(benches: Any) -> None:
    store = benches.add_parser(
        "store",
        help="per-turn cost on the in-memory store and XTDB, resume, indexing a source tree",
    )
    store.add_argument("--json", action="store_true", help="print one JSON object")
    store.add_argument("--sizes", help="comma-separated session sizes (default 100,1000,10000)")
    store.add_argument(
        "--node",
        choices=("rocksdb", "memory"),
        default="rocksdb",
        help="configuration of the XTDB nodes the bench starts (default rocksdb, as in production)",
    )
    store.add_argument(
        "--index-limit",
        type=int,
        help="index only the first N files of the standard library (default: all)",
    )
    store.set_defaults(handler=_store)


def _large(args: argparse.Namespace) -> int:
    from selfctx.adapters.bench.large import SIZES_MB, run_large

    sizes = tuple(float(s) for s in args.sizes.split(",")) if args.sizes else SIZES_MB
    result = run_large(sizes, count=args.count, runs=args.runs, progress=_progress(args.json))
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"tokenizer: {result['tokenizer']}; medians of {result['runs']} runs, inline policy")
    print(
        f"{'list':>11} {'ingest s':>9} {'assemble s':>11} {'again s':>8}"
        f" {'encoded/chars':>14} {'us/char':>8}"
    )
    for row in result["rows"]:
        shown = f"{row['count']} x {row['size_mb']:g} MB"
        ratio = row["encoded_chars"] / row["chars"]
        print(
            f"{shown:>11} {row['ingest_s']:>9.2f} {row['assemble_s']:>11.2f}"
            f" {row['assemble_again_s']:>8.3f} {ratio:>14.3f} {row['assemble_us_per_char']:>8.3f}"
        )
    return 0


def _register_large(benches: Any) -> None:
    large = benches.add_parser(
        "large", help="ingest and assemble lists of multi-megabyte tool outputs"
    )
    large.add_argument("--json", action="store_true", help="print one JSON object")
    large.add_argument("--sizes", help="comma-separated output sizes in MB (default 1,2,4,7)")
    large.add_argument("--count", type=int, default=8, help="outputs in the list (default 8)")
    large.add_argument("--runs", type=int, default=3, help="runs per size (default 3)")
    large.set_defaults(handler=_large)


GOALS = {"tokens": 0.50, "peak": 0.55, "cost": 0.65}
"""The default policy's goals against naive: at most these ratios (docs/benchmarks.md)."""
RECALL_GOAL = 0.92
"""The default policy's goal: at least this share of the used lines visible, overall."""
TRAJECTORY_RECALL_GOAL = 0.85
"""... and at least this share on every trajectory with :data:`TRAJECTORY_USED` used lines."""
TRAJECTORY_USED = 10


def _require_chart_library(args: argparse.Namespace) -> None:
    """Refuse a chart before the bench runs, in a sentence, when matplotlib is not installed."""
    if (args.chart or args.calls_chart) and importlib.util.find_spec("matplotlib") is None:
        raise InvalidInput(
            "--chart",
            args.chart or args.calls_chart,
            "charts need matplotlib, which is not installed: "
            "pip install 'self-context-manager[chart]' (or run without --chart)",
        )


def _context(args: argparse.Namespace) -> int:
    _require_chart_library(args)
    from selfctx.adapters.bench.context import (
        default_directory,
        replay_service_factory,
        run_context_bench,
        trajectories_in,
    )
    from selfctx.adapters.bench.peers import default_peers
    from selfctx.adapters.tokenizer import default_tokenizer
    from selfctx.application.policies import DEFAULT_POLICY, POLICIES

    paths = args.paths or [p for p in [default_directory()] if p is not None]
    if not paths:
        print(
            "selfctx: no trajectories given and none found (set SELFCTX_TRAJECTORIES)",
            file=sys.stderr,
        )
        return 2
    unknown = [n for n in args.policy or () if n not in POLICIES]
    if unknown:
        print(f"selfctx: unknown policy {unknown[0]!r}; known: {list(POLICIES)}", file=sys.stderr)
        return 2
    policies = {n: p for n, p in POLICIES.items() if not args.policy or n in args.policy}
    variants = []
    for variant in args.variant or ():
        name, policy = parse_variant(variant)
        policies[name] = policy
        variants.append(name)
    tokenizer = default_tokenizer()
    trajectories = trajectories_in(paths)
    if args.long_session:
        return _long_session(args, trajectories, tokenizer)
    named = [n for n in POLICIES if n in policies]
    diagnosed = [*(args.policy or [DEFAULT_POLICY]), *variants] if args.losses else []
    result = run_context_bench(
        trajectories,
        replay_service_factory(build_service, tokenizer),
        tokenizer,
        policies,
        _progress(args.json),
        losses=diagnosed,
        peers=[] if args.no_peers else default_peers(),
    )
    per_call = result.pop("per_call")
    result["default_policy"] = choose_default(result["total"], named or list(policies))
    if args.chart:
        from selfctx.adapters.bench.chart import sweep_chart

        sweep_chart(args.chart, result["total"], result["default_policy"], result["tokenizer"])
    if args.calls_chart:
        _chart(args.calls_chart, per_call, result["default_policy"], result["tokenizer"])
    if args.json:
        print(json.dumps(result))
        return 0
    _context_table(result)
    for name, found in result.get("losses", {}).items():
        _losses_table(name, found)
    return 0


def _losses_table(name: str, found: dict[str, Any]) -> None:
    """Every hidden used line of one contender, then the counts by cause."""
    print()
    print(f"hidden used lines of {name}: {found['summary']['hidden']}")
    print(f"{'trajectory':28} {'call':>4} {'back':>4} {'cause':18} {'output':7} {'view':7} command")
    for e in found["lines"]:
        cause = f"{e.get('cause')}/{e.get('tier', '-')}"
        if e.get("working_set") is not None:
            cause += "/ws" if e["working_set"] else ""
        print(
            f"{e['trajectory'][:28]:28} {e['call']:>4} {e.get('calls_back', '?'):>4} "
            f"{cause[:18]:18} {e.get('output', '?'):7} {e.get('view', '-'):7} "
            f"{str(e.get('command', ''))[:70]}"
        )
        print(f"{'':38}line: {e['line'][:90]}")
    for key, counts in found["summary"].items():
        if isinstance(counts, dict) and key != "by_trajectory":
            print(f"{key.replace('_', ' ')}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))


def _long_session(args: argparse.Namespace, trajectories: Any, tokenizer: Any) -> int:
    from selfctx.adapters.bench.context import replay_service_factory
    from selfctx.adapters.bench.long_session import run_long_session

    result = run_long_session(
        trajectories,
        replay_service_factory(build_service, tokenizer),
        tokenizer,
        _progress(args.json),
    )
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"one session of {len(trajectories)} trajectories: {result['calls']} model calls, "
        f"{result['messages']} messages; input limit {result['budget']:,} tokens"
    )
    _context_table(result)
    print(
        f"requests over the input limit of {result['budget']:,} tokens: "
        + ", ".join(f"{n} {t['over_limit']}" for n, t in result["total"].items())
    )
    return 0


def parse_variant(text: str) -> tuple[str, Any]:
    """``--variant``: ``POLICY:KEY=VALUE,...`` (any field of the policy, integers or ``none``),
    or ``TRIGGER,CLEAR,KEEP`` for ``inline`` as before. Returns its name and its policy."""
    from selfctx.application.policies import policy_by_name
    from selfctx.domain.errors import InvalidInput

    if ":" not in text:
        parts = text.split(",")
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            raise InvalidInput("--variant", text, "use POLICY:KEY=VALUE,... or TRIGGER,CLEAR,KEEP")
        trigger, clear, keep = (int(p) for p in parts)
        policy = policy_by_name(
            "inline", trigger_tokens=trigger, clear_at_least=clear, keep_recent=keep
        )
        return f"inline-{trigger}-{clear}-{keep}", policy
    base, _, settings = text.partition(":")
    overrides: dict[str, Any] = {}
    for item in filter(None, settings.split(",")):
        key, equals, value = item.partition("=")
        if not equals or not (value.isdigit() or value == "none"):
            raise InvalidInput("--variant", text, f"{item!r} is not KEY=INTEGER or KEY=none")
        overrides[key.strip()] = None if value == "none" else int(value)
    return f"{base}[{settings}]", policy_by_name(base, **overrides)


def choose_default(total: dict[str, Any], named: list[str]) -> str:
    """The default policy, by measurement (decision 0021): of the named policies that meet
    every goal (tokens, peak, cost against naive, recall), the cheapest; if none meets them all,
    the one that meets most, then the cheapest."""
    naive = total["naive"]

    def met(name: str) -> int:
        t = total[name]
        goals = sum(1 for k, goal in GOALS.items() if t[k] / naive[k] <= goal)
        return goals + int(t.get("recall") is not None and t["recall"] >= RECALL_GOAL)

    candidates = [n for n in named if n in total]
    return min(candidates, key=lambda n: (-met(n), total[n]["cost"]))


def _context_table(result: dict[str, Any]) -> None:
    names = list(result["total"])
    print(f"tokenizer: {result['tokenizer']}; cost = cache-adjusted input tokens")
    header = f"{'trajectory':34} {'calls':>5} {'recorded':>10}"
    print(header + "".join(f" {n + ' tokens':>22}" for n in names))
    for row in result["trajectories"]:
        # what the original harness's provider billed, where the trajectory says: a check
        recorded = row["naive"].get("recorded_prompt_tokens")
        cells = "".join(f" {row[n]['tokens']:>22,}" for n in names)
        shown = f"{recorded:>10,}" if recorded is not None else f"{'—':>10}"
        print(f"{row['name'][:34]:34} {row['calls']:>5} {shown}{cells}")
    naive = result["total"]["naive"]
    print()
    print()
    print("recall (visible / used lines) per trajectory:")
    print(f"{'trajectory':34}" + "".join(f" {n:>18}" for n in names))
    for row in result["trajectories"]:
        cells = "".join(f" {_recall_cell(row[n]):>18}" for n in names)
        print(f"{row['name'][:34]:34}{cells}")
    print()
    print(
        f"{'total':24} {'tokens':>12} {'peak':>9} {'cost':>12} {'recall':>13}"
        "   vs naive (tokens, peak, cost)"
    )
    for name in names:
        t = result["total"][name]
        ratios = "  ".join(f"{t[k] / naive[k]:.2f}" for k in ("tokens", "peak", "cost"))
        extra = (
            f"   retrievable {t['retrievable']}/{t['collapsed_outputs']}"
            if "retrievable" in t
            else ""
        )
        print(
            f"{name[:24]:24} {t['tokens']:>12,} {t['peak']:>9,} {t['cost']:>12,}"
            f" {_recall_cell(t):>13}   {ratios}{extra}"
        )
    default = result["default_policy"]
    t = result["total"][default]
    met = {k: t[k] / naive[k] <= goal for k, goal in GOALS.items()}
    recall_met = t.get("recall") is not None and t["recall"] >= RECALL_GOAL
    goals = ", ".join(f"{k} <= {goal:.2f}" for k, goal in GOALS.items())
    print(
        f"default policy: {default}; goals ({goals} of naive, recall >= {RECALL_GOAL:.2f}): "
        + ", ".join(f"{k} {'met' if ok else 'MISSED'}" for k, ok in met.items())
        + f", recall {'met' if recall_met else 'MISSED'}"
    )
    low = [
        f"{row['name']} {_recall_cell(row[default])}"
        for row in result["trajectories"]
        if row[default].get("used", 0) >= TRAJECTORY_USED
        and row[default]["recall"] < TRAJECTORY_RECALL_GOAL
    ]
    print(
        f"trajectories with {TRAJECTORY_USED} or more used lines under recall "
        f"{TRAJECTORY_RECALL_GOAL:.2f}: " + (", ".join(low) if low else "none")
    )


def _recall_cell(figures: dict[str, Any]) -> str:
    if not figures.get("used"):
        return "—"
    return f"{figures['visible']}/{figures['used']} {figures['recall']:.2f}"


def _chart(
    path: str, per_call: dict[str, dict[str, list[int]]], default: str, tokenizer: str
) -> None:
    """Prompt size per call on the longest trajectory, for naive, ssot and the default."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    name = max(per_call, key=lambda n: len(per_call[n]["naive"]))
    series = per_call[name]
    figure, axes = plt.subplots(figsize=(9, 4.5), dpi=120)
    for label in dict.fromkeys(["naive", "ssot", default]):
        if label in series:
            axes.plot(range(1, len(series[label]) + 1), series[label], label=label, linewidth=1.6)
    axes.set_title(f"Prompt size per model call: {name}")
    axes.set_xlabel("model call")
    axes.set_ylabel(f"input tokens ({tokenizer})")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def _read(args: argparse.Namespace) -> int:
    from selfctx.adapters.bench.read import run_read_bench
    from selfctx.adapters.bench.store import stdlib_sources

    result = run_read_bench(stdlib_sources(), rounds=args.rounds)
    if args.json:
        print(json.dumps(result))
        return 0
    rates, per_file = result["files_per_s"], result["per_file_us"]
    print(f"{result['files']} files, median of {result['rounds']} alternating rounds")
    for name in ("confined", "reference"):
        print(f"{name:>10}: {rates[name]:>8,} files/s ({per_file[name]} us per file)")
    print(f"ratio confined/reference: {result['ratio']}")
    return 0


def _proxy(args: argparse.Namespace) -> int:
    from selfctx.adapters.bench.proxy import SIZES as PROXY_SIZES
    from selfctx.adapters.bench.proxy import run_proxy
    from selfctx.adapters.cli.proxy_cmd import workers_wanted

    sizes = tuple(int(s) for s in args.sizes.split(",")) if args.sizes else PROXY_SIZES
    result = run_proxy(
        sizes,
        args.requests,
        _progress(args.json),
        clients=args.clients,
        concurrent_size=args.concurrent_objects,
        concurrent_requests=args.concurrent_requests,
        workers=workers_wanted(args.workers),
        store=args.store,
        warmup=args.warmup,
    )
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"proxy with {result['workers']} worker process(es), {result['store']} store, both sides "
        f"on {result['stack']}, after {result['warmup']} unmeasured requests; one client:"
    )
    print(
        f"{'objects':>8} {'requests':>9} {'added p50 ms':>13} {'added p95 ms':>13} "
        f"{'pass-through p50':>17} {'proxy p50 ms':>13} {'CPU ms/request':>15}"
    )
    for run in result["runs"]:
        cpu = run["cpu_ms_per_request"]
        print(
            f"{run['objects']:>8} {run['requests']:>9} {run['added_ms']['p50']:>13.2f} "
            f"{run['added_ms']['p95']:>13.2f} {run['passthrough_ms']['p50']:>17.2f} "
            f"{run['proxy_ms']['p50']:>13.2f} {cpu['proxy']:>6.1f} vs {cpu['passthrough']:.1f}"
            + (f" (front {cpu['proxy_front']:.1f})" if result["workers"] > 1 else "")
            + (
                f", node {cpu['node']:.1f} (JIT {cpu['node_jit']:.1f},"
                f" RocksDB {cpu['node_rocksdb']:.1f}; settled {run['settled_s']:.1f} s)"
                if "node" in cpu
                else ""
            )
        )
        if run.get("node_threads"):
            print(f"{'':>8} the node by thread, CPU ms/request: {_top(run['node_threads'])}")
    together = result["concurrent"]
    if together:
        print(
            f"{together['clients']} clients at once, sessions of {together['objects']} objects, "
            f"{together['requests']} requests each:"
        )
        for side in ("passthrough", "proxy"):
            figures = together[f"{side}_ms"]
            print(
                f"  {side:>12}: p50 {figures['p50']:.1f} ms, p95 {figures['p95']:.1f} ms, "
                f"{together[f'{side}_per_s']} requests/s, "
                f"{together['cpu_ms_per_request'][side]:.1f} CPU ms/request"
            )
        if "node" in together["cpu_ms_per_request"]:
            node_cpu = together["cpu_ms_per_request"]
            print(
                f"  the node: {node_cpu['node']:.1f} CPU ms/request"
                f" (its JIT compiler {node_cpu['node_jit']:.1f},"
                f" RocksDB's flushes and compactions {node_cpu['node_rocksdb']:.1f};"
                f" measured after {together['settled_s']:.1f} s of the node settling)"
            )
            print(f"  the node by thread: {_top(together.get('node_threads', {}))}")
        print(f"  added p95: {together['added_p95_ms']:.1f} ms")
    return 0


def _top(groups: dict[str, float], count: int = 6) -> str:
    """The largest ``count`` of the node's thread groups and their CPU ms a request."""
    return ", ".join(f"{name} {ms:.2f}" for name, ms in list(groups.items())[:count])


def _cache(args: argparse.Namespace) -> int:
    from selfctx.adapters.bench.cache import run_cache

    options = {}
    for text in args.policy_option:
        name, _, value = text.partition("=")
        if not value.strip().isdigit():
            raise SystemExit(f"--policy-option {text!r}: use NAME=INTEGER")
        options[name.strip()] = int(value)
    result = run_cache(
        args.recordings, policy=args.policy, options=options, progress=_progress(args.json)
    )
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"policy {result['policy']}; costs in base-input tokens (1.0 = one uncached token)")
    head = (
        f"{'recording':<24} {'rules':<10} {'req':>4} {'client KB':>10} {'upstream KB':>12} "
        f"{'':>6}{'read':>10} {'write':>10} {'uncached':>9} {'cost':>10} {'ratio':>6}"
    )
    print(head)
    for run in result["runs"]:
        for api, figures in run["apis"].items():
            for side in ("direct", "managed"):
                f = figures[side]
                first = side == "direct"
                name = run["recording"].removesuffix(".jsonl.xz") if first else ""
                kb = run["client_bytes"] if first else run["upstream_bytes"]
                print(
                    f"{name:<24} {figures['rules'] if first else '':<10} "
                    f"{figures['requests'] if first else '':>4} "
                    f"{kb / 1000 if first else '':>10} {'' if first else kb / 1000:>12} "
                    f"{side:>6}{f['cache_read']:>10,} {f['cache_write']:>10,} "
                    f"{f['uncached']:>9,} {f['cost']:>10,} "
                    f"{'' if first else figures['ratio']:>6}"
                )
            del api
    return 0


def _register_cache(benches: Any) -> None:
    cache = benches.add_parser(
        "cache",
        help="prompt-cache reads, writes and cost of recorded client sessions, direct and "
        "through the proxy",
    )
    cache.add_argument(
        "recordings", nargs="*", help="recording files or directories (default: the shipped ones)"
    )
    cache.add_argument("--policy", help="layout policy of the proxy's sessions (default: default)")
    cache.add_argument(
        "--policy-option", metavar="NAME=N", action="append", default=[], help="(repeatable)"
    )
    cache.add_argument("--json", action="store_true", help="print JSON")
    cache.set_defaults(handler=_cache)


def _ui(args: argparse.Namespace) -> int:
    from selfctx.adapters.bench.ui import run_ui_bench  # imported here: it may start a JVM

    stores = tuple(s.strip() for s in args.stores.split(","))
    for kind in stores:
        if kind not in ("memory", "xtdb"):
            raise SystemExit(f"selfctx bench ui: unknown store {kind!r} (memory, xtdb)")
    result = run_ui_bench(
        requests=args.requests,
        objects=args.objects,
        repeat=args.repeat,
        cold=args.cold,
        stores=stores,
        progress=_progress(False),  # stderr: long run
    )
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"inspector page loads, one session of {args.requests:,} requests and about "
        f"{args.objects:,} objects; ms over HTTP on 127.0.0.1. cold: median wall clock of "
        f"{args.cold} loads, each in a fresh service and inspector of this process (low-high, "
        f"first load); cpu: median CPU of this process (server and client), node: of the XTDB "
        f"node; warm: median of {args.repeat} loads after the last cold one"
    )
    for kind in stores:
        built = result[kind]["session"]
        rec = built["record_ms"]
        print(
            f"\n{kind}: {built['objects']:,} objects, log position {built['log_position']:,}, "
            f"written in {built['build_seconds']} s; recording a request: median "
            f"{rec['median']} ms (first 100: {rec['first_100_median']}, last 100: "
            f"{rec['last_100_median']}), p95 {rec['p95']} ms, {built['record_bytes']} bytes; "
            f"the search index built from scratch in {built['search_index_build_s']} s"
        )
        print(
            f"  {'page':<24} {'cold':>7} {'low-high':>13} {'first':>7} {'cpu':>7} {'node':>6} "
            f"{'warm':>7} {'KB':>8}"
        )
        for name, f in result[kind]["pages"].items():
            node = "-" if f["node_cpu_ms"] is None else f"{f['node_cpu_ms']:.0f}"
            warm = "-" if f["warm_ms"] is None else f"{f['warm_ms']:.1f}"
            spread = f"{f['cold_min_ms']:.0f}-{f['cold_max_ms']:.0f}"
            print(
                f"  {name:<24} {f['cold_ms']:>7.1f} {spread:>13} {f['cold_first_ms']:>7.1f} "
                f"{f['cold_cpu_ms']:>7.1f} {node:>6} {warm:>7} {f['kb']:>8.1f}"
            )
    return 0


def _register_ui(benches: Any) -> None:
    ui = benches.add_parser(
        "ui", help="page-load times of the web inspector for a long session, both stores"
    )
    ui.add_argument("--requests", type=int, default=1000, help="model requests (default 1000)")
    ui.add_argument("--objects", type=int, default=10_000, help="objects (default 10000)")
    ui.add_argument("--repeat", type=int, default=5, help="warm loads per page (default 5)")
    ui.add_argument(
        "--cold", type=int, default=5, help="cold loads per page, each a fresh service (default 5)"
    )
    ui.add_argument("--stores", default="memory,xtdb", help="memory,xtdb (default: both)")
    ui.add_argument("--json", action="store_true", help="print one JSON object")
    ui.set_defaults(handler=_ui)


def _register_proxy(benches: Any) -> None:
    proxy = benches.add_parser(
        "proxy",
        help="time the proxy adds per request, against the same scripted model called directly",
    )
    proxy.add_argument("--sizes", help="session sizes in objects, comma-separated (100,1000)")
    proxy.add_argument("--requests", type=int, default=50, help="measured requests per size")
    proxy.add_argument("--clients", type=int, default=8, help="concurrent clients (1: none)")
    proxy.add_argument(
        "--concurrent-objects", type=int, default=1000, help="session size of each such client"
    )
    proxy.add_argument(
        "--concurrent-requests", type=int, default=20, help="requests of each such client"
    )
    proxy.add_argument(
        "--workers",
        default="auto",
        help="the proxy's worker processes: auto (the default, as selfctx proxy's: one per core, "
        "one process on a single core) or a number",
    )
    proxy.add_argument(
        "--store",
        default="memory",
        help="the proxy's store: memory (default), auto (the local XTDB node) or xtdb://HOST:PORT",
    )
    proxy.add_argument(
        "--warmup",
        type=int,
        default=200,
        help="unmeasured requests through both sides first (default 200; 0: a cold start)",
    )
    proxy.add_argument("--json", action="store_true", help="print JSON")
    proxy.set_defaults(handler=_proxy)


def _scale(args: argparse.Namespace) -> int:
    from selfctx.adapters.bench.scale import print_scale, run_scale

    def ints(text: str) -> tuple[int, ...]:
        return tuple(int(x) for x in text.split(",") if x)

    result = run_scale(
        checkpoints=ints(args.turns),
        window=args.window,
        stores=tuple(args.stores.split(",")),
        modes=tuple(args.modes.split(",")),
        resume_objects=args.resume_objects,
        agent_counts=ints(args.agents),
        agent_turns=args.agent_turns,
        agent_rounds=args.agent_rounds,
        agent_layouts=tuple(args.agent_layouts.split(",")) if args.agent_layouts else None,
        cluster=args.cluster or "two_nodes" in (args.agent_layouts or ""),
        parts=tuple(args.only.split(",")),
        memory_checkpoints=ints(args.memory_turns),
        memory_budget=args.memory_budget,
        server_env={"PYTHONPATH": args.server_path} if args.server_path else None,
        cache_budget=args.cache_budget,
        progress=_progress(args.json),
    )
    if args.json:
        print(json.dumps(result))
    else:
        print_scale(result)
    return 0


def _register_scale(benches: Any) -> None:
    scale = benches.add_parser(
        "scale",
        help="cost per turn in long sessions, N agents on one store (and a cluster), resume; "
        "every figure beside parsing and hashing the same lists",
    )
    scale.add_argument("--json", action="store_true", help="print one JSON object")
    scale.add_argument(
        "--turns", default="100,1000,1700", help="turns the per-turn figures are taken at"
    )
    scale.add_argument(
        "--window", type=int, default=50, help="turns each per-turn figure is a median of"
    )
    scale.add_argument("--stores", default="memory,xtdb", help="memory, xtdb (a RocksDB node)")
    scale.add_argument("--modes", default="list,append", help="list (whole list), append")
    scale.add_argument("--agents", default="1,4,16,32", help="numbers of agents")
    scale.add_argument(
        "--agent-turns", type=int, default=192, help="turns measured per agent count, in all"
    )
    scale.add_argument(
        "--agent-rounds",
        type=int,
        default=3,
        help="rounds per agent count (new sessions on the same nodes); each figure is their median",
    )
    scale.add_argument(
        "--agent-layouts",
        default=None,
        help="one_node, two_nodes (default: one_node, and two_nodes with --cluster)",
    )
    scale.add_argument(
        "--cluster",
        action="store_true",
        help="the agents on two nodes over one PostgreSQL too, and the tx-log options' commits",
    )
    scale.add_argument(
        "--resume-objects", type=int, default=10_000, help="objects of the resumed session"
    )
    scale.add_argument(
        "--only",
        default="per_turn,agents,resume",
        help="parts to run: per_turn,agents,resume,memory (memory: server memory on XTDB with "
        "small and with large outputs, the content cache full)",
    )
    scale.add_argument(
        "--memory-turns", default="300,600,900", help="turns the memory part's figures are taken at"
    )
    scale.add_argument(
        "--memory-budget",
        type=int,
        default=1_000_000,
        help="the memory part's content cache, characters (files.content_budget)",
    )
    scale.add_argument(
        "--cache-budget",
        type=int,
        metavar="BYTES",
        help="the per-turn servers' cache budget (memory.cache_budget, decision 0169; and its "
        "shares as files.content_budget, metadata_budget, rendering_budget, which a server "
        "without the setting reads; default: the servers' own)",
    )
    scale.add_argument(
        "--server-path",
        metavar="DIR",
        help="run the servers from another copy of the package (a folder holding selfctx/), "
        "to measure another build in the same run",
    )
    scale.set_defaults(handler=_scale)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("bench", help="run a benchmark and print its figures")
    benches = parser.add_subparsers(dest="bench", metavar="BENCH", required=True)
    core = benches.add_parser(
        "core", help="per-turn cost and bytes per turn on the in-memory store"
    )
    core.add_argument("--json", action="store_true", help="print one JSON object")
    core.add_argument("--sizes", help="comma-separated session sizes (default 100,1000,10000)")
    core.add_argument("--policy", help="layout policy of the session (default: the default policy)")
    core.set_defaults(handler=_core)
    context = benches.add_parser(
        "context", help="tokens, peak and cache-adjusted cost per policy on real trajectories"
    )
    context.add_argument(
        "paths", nargs="*", help="trajectory files or directories (default: the development set)"
    )
    context.add_argument("--json", action="store_true", help="print one JSON object")
    context.add_argument(
        "--chart",
        help="write a PNG of recall against tokens (share of naive) for every contender",
    )
    context.add_argument(
        "--calls-chart", help="write a PNG of prompt size per call on the longest trajectory"
    )
    context.add_argument(
        "--long-session",
        action="store_true",
        help="the trajectories as one session, with and without compaction at a 32k limit",
    )
    context.add_argument(
        "--variant",
        action="append",
        help="also measure POLICY:KEY=VALUE,... (say relevance:keep_tokens=2000), or inline "
        "with TRIGGER,CLEAR,KEEP (repeatable)",
    )
    context.add_argument(
        "--policy",
        action="append",
        help="measure only this named policy (repeatable; default: every named policy)",
    )
    context.add_argument(
        "--no-peers",
        action="store_true",
        help="leave out the peers (observation masking, Anthropic's tool result clearing, "
        "OpenHands' amortized forgetting)",
    )
    context.add_argument(
        "--losses",
        action="store_true",
        help="list every used line the default policy (or each --policy) and each --variant "
        "hid, and why, with a summary by cause",
    )
    context.set_defaults(handler=_context)
    _register_watch(benches)
    _register_store(benches)
    _register_large(benches)
    _register_proxy(benches)
    _register_scale(benches)
    _register_cache(benches)
    _register_ui(benches)
    read = benches.add_parser(
        "read", help="confined reads (canonical + read) against realpath-then-open, files/s"
    )
    read.add_argument("--json", action="store_true", help="print one JSON object")
    read.add_argument("--rounds", type=int, default=7, help="alternating rounds (default 7)")
    read.set_defaults(handler=_read)
    _register_search(benches)
