"""``selfctx bench scale``: cost per turn in long sessions, and many agents on one store.

Every figure comes from ``selfctx serve --stdio`` subprocesses driven the way a harness drives
them, with the turns of :mod:`selfctx.adapters.bench.workload` (2-20 KB outputs, whole-file reads,
edits on disk). The server's CPU time is read from ``/proc`` (every thread); the reference is
measured in this process on the very same lists: parsing the request line
(``json.loads``) and hashing each message (SHA-256 of its compact JSON). Each figure is also
given as a ratio to that reference, which is what stays meaningful on a shared machine.

* **per turn**: one session, on the in-memory store and on a RocksDB XTDB node, whole list
  resent each turn (``ingest`` with ``messages``) and in the append form (only the new messages
  with the digest of what they extend). At each checkpoint turn the median over a window of
  turns of: server CPU per turn (ingest + assemble), wall time per turn, the reference
  (measured on the turn's whole list just before and just after the turn, so that it sees the
  machine the turn saw). Also the server's resident memory against the messages' bytes, over
  the whole run and between the last two checkpoints (with the content the server holds in
  memory beside each: once that cache is full, what still grows is kept per message), and on
  XTDB the node's data on disk (after a clean stop) against the messages' bytes.
* **agents**: N servers, one session each, on one node, sharing a workspace of edited files,
  each running turns as fast as it can: turns per second over all of them, p50 of a turn, and
  the node's HTTP requests per turn. ``--cluster`` runs them on two nodes over one PostgreSQL.
* **resume**: a session of 10,000 objects built through ``ingest``, its server killed with
  ``kill -9``, then a new server: ``session.open`` (the resume), the first ``assemble`` after it
  against an ordinary one, and whether re-sending the identical list reports ``diverged``.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

from selfctx.adapters.bench.stats import percentile
from selfctx.adapters.bench.stdio_client import RpcFailure, StdioClient, cpu_ns
from selfctx.adapters.bench.workload import Agent, make_workspace, message_bytes
from selfctx.adapters.xtdb.node import ConfigName

__all__ = ["reference_ns", "run_scale"]

Progress = Callable[[str], None]

SESSION = "bench-scale"

WINDOW = 50
"""Turns each per-turn figure is the median of. The workload's turns are of two kinds of about
equal weight whose CPU differs by a quarter (commands' outputs, and reads or edits of files): a
median of 20 moved by up to a fifth with the mix of kinds in its window."""

MEMORY_OUTPUTS: dict[str, tuple[float, float]] = {"small": (0.3, 0.9), "large": (20.0, 60.0)}
"""KB of each command's output in the memory part's two sessions (whole-file reads and edits as
in every session): the same turns, about 25 times the bytes."""

MEMORY_BUDGET = 1_000_000
"""The content cache (``files.content_budget``, characters) of the memory part's servers: small
enough that it is full in both sessions before the late checkpoints."""


def reference_ns(line: bytes) -> int:
    """The reference for one request: parse its line and hash each message (thread CPU ns)."""
    began = time.thread_time_ns()
    request = json.loads(line)
    for message in request["params"]["messages"]:
        hashlib.sha256(json.dumps(message, separators=(",", ":")).encode("utf-8")).digest()
    return time.thread_time_ns() - began


def _dir_bytes(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


@contextmanager
def _node(root: Path, name: str, config: ConfigName = "rocksdb", **kwargs: Any) -> Iterator[Any]:
    from selfctx.adapters.xtdb import XtdbNode

    data = root / name
    node = XtdbNode(config, data if config != "memory" else None, run_dir=data / "run", **kwargs)
    with node:
        yield node


def _session_params(
    mode: str, agent: Agent, new: list[dict[str, Any]], digest: Any
) -> dict[str, Any]:
    if mode == "append":
        return {"session_id": SESSION, "messages": new, "extends": digest}
    return {"session_id": SESSION, "messages": agent.messages}


class _Driven:
    """One session on its own server, driven one turn at a time; the figures of its turns in
    the windows ending at ``checkpoints``."""

    def __init__(
        self,
        session: str,
        store: str,
        mode: str,
        checkpoints: Sequence[int],
        window: int,
        workspace: Path,
        server: Sequence[str] | None,
        server_env: dict[str, str] | None,
        output_kb: tuple[float, float],
    ) -> None:
        if not workspace.exists():
            make_workspace(workspace, 200)
        files = sorted((workspace / "src").rglob("*.py"))
        self.session = session
        self.mode = mode
        self.checkpoints = checkpoints
        self.window = window
        self.agent = Agent("a", files, seed=11, output_kb=output_kb)
        self.client = StdioClient(
            store=store, workspace=workspace, command=server, extra=["--no-track"], env=server_env
        )
        self.turn = 0
        self.digest: Any = None
        self.sent = 0
        self.rss_at: dict[int, int] = {}
        self.cached_at: dict[int, int | None] = {0: 0}
        self.caches_at: dict[int, dict[str, int] | None] = {0: None}
        self.bytes_at: dict[int, int] = {0: 0}
        self.figures: dict[str, dict[str, Any]] = {}
        self.unsupported: str | None = None
        self._cpu: list[int] = []
        self._wall: list[float] = []
        self._ref: list[int] = []

    def open(self) -> None:
        self.client.call("session.open", session_id=self.session, policy="relevance")
        self.rss_at[0] = self.client.rss()

    def step(self) -> dict[str, Any] | None:
        """One more turn; the figures of a checkpoint when this turn is one."""
        self.turn += 1
        turn, agent, client = self.turn, self.agent, self.client
        new = agent.turn()
        self.sent += message_bytes(new)
        measured = any(c - self.window < turn <= c for c in self.checkpoints)
        if self.mode == "append":
            params = {"session_id": self.session, "messages": new, "extends": self.digest}
        else:
            params = {"session_id": self.session, "messages": agent.messages}
        line = client.encode("ingest", params)
        full = b""
        if measured:  # the reference on this turn's whole list, before and after the turn
            full = client.encode("ingest", {"session_id": self.session, "messages": agent.messages})
            self._ref.append(reference_ns(full))
        began_cpu, began = client.cpu_ns(), time.perf_counter()
        try:
            result = client.send(line)
        except RpcFailure as exc:
            if self.mode == "append":
                self.unsupported = f"{exc.kind}: {exc}"
                return None
            raise
        assembled = client.call("assemble", session_id=self.session)
        spent_wall, spent_cpu = time.perf_counter() - began, client.cpu_ns() - began_cpu
        self.digest = result.get("digest")
        if measured:
            self._cpu.append(spent_cpu)
            self._wall.append(spent_wall)
            self._ref.append(reference_ns(full))
        if turn not in self.checkpoints:
            return None
        self.rss_at[turn] = client.rss()
        self.cached_at[turn] = assembled.get("stats", {}).get("cached_chars")
        try:
            self.caches_at[turn] = client.call("session.caches", session_id=self.session)
        except RpcFailure:  # a server before decision 0169
            self.caches_at[turn] = None
        self.bytes_at[turn] = self.sent
        c_ms = statistics.median(self._cpu) / 1e6
        r_ms = statistics.median(self._ref) / 1e6
        figures = {
            "cpu_ms": round(c_ms, 2),
            "wall_ms": round(statistics.median(self._wall) * 1000, 2),
            "p95_wall_ms": round(percentile(self._wall, 95) * 1000, 2),
            "reference_ms": round(r_ms, 2),
            "ratio": round(c_ms / r_ms, 2) if r_ms else None,
            "rss_mb": round(self.rss_at[turn] / 1e6, 1),
            "messages_mb": round(self.sent / 1e6, 2),
            "cached_mchars": _mega(self.cached_at[turn]),
            "caches_mb": _caches_mb(self.caches_at[turn]),
            "turns_measured": len(self._cpu),
        }
        self.figures[str(turn)] = figures
        self._cpu, self._wall, self._ref = [], [], []
        return figures

    def close(self) -> None:
        self.client.close()


def _one_session(
    store: str,
    mode: str,
    checkpoints: Sequence[int],
    window: int,
    root: Path,
    progress: Progress,
    server: Sequence[str] | None,
    server_env: dict[str, str] | None,
    output_kb: tuple[float, float] = (2, 20),
    paired: bool = False,
) -> dict[str, Any]:
    """Drive one session to the last checkpoint; figures at each checkpoint.

    ``paired``: the CPU and wall figures of every earlier checkpoint come from a session of its
    own (the same turns, its own server and workspace) started so that it reaches that
    checkpoint as this one reaches the last: the two sessions take turns, one each, so every
    window is measured in the same minutes of the same machine. A shared machine's load drifts
    over a run; without this, the ratio of a late turn to an early one (the append form's goal)
    measured the drift as much as the turns. Memory and disk figures stay the long session's."""
    last = max(checkpoints)
    out: dict[str, Any] = {"checkpoints": {}}
    main = _Driven(
        SESSION, store, mode, checkpoints, window, root / "workspace", server, server_env,
        output_kb,
    )  # fmt: skip
    beside: dict[int, _Driven] = {}
    try:
        main.open()
        if paired:
            for c in sorted(set(checkpoints) - {last}):
                beside[c] = _Driven(
                    f"{SESSION}-{c}", store, mode, (c,), window, root / f"workspace-{c}",
                    server, server_env, output_kb,
                )  # fmt: skip
                beside[c].open()
        for turn in range(1, last + 1):
            for c, other in beside.items():
                if turn > last - c:  # it reaches turn c as the long session reaches the last
                    mine = other.step()
                    if other.unsupported is not None:
                        out["unsupported"] = other.unsupported
                        return out
                    if mine is not None:
                        progress(f"{store} {mode}: turn {c} (beside turn {last}): {mine}")
            figures = main.step()
            if main.unsupported is not None:
                out["unsupported"] = main.unsupported
                return out
            if figures is not None:
                progress(f"{store} {mode}: turn {turn}: {figures}")
        for c, other in beside.items():
            own = main.figures[str(c)]
            for key in ("cpu_ms", "wall_ms", "p95_wall_ms", "reference_ms", "ratio"):
                own[f"alone_{key}"] = own[key]  # measured when the long session passed it
                own[key] = other.figures[str(c)][key]
            own["beside_turn"] = last
        out["checkpoints"] = main.figures
        first, final = min(checkpoints), last
        if first == final:  # one checkpoint: the growth since the session was opened
            first = 0
        out["memory"] = _growth(main.rss_at, main.bytes_at, first, final)
        if len(checkpoints) > 2:
            # Between the last two checkpoints: once the content cache has filled (its size is
            # beside each checkpoint), what still grows is what the session keeps per message.
            before = sorted(checkpoints)[-2]
            out["memory_late"] = _growth(main.rss_at, main.bytes_at, before, final)
            caches = _caches_growth(main.caches_at, before, final)
            if caches is not None:  # what the caches filled, and the rest: kept per message
                late = out["memory_late"]
                late["caches_growth_mb_per_100_turns"] = caches
                late["residue_mb_per_100_turns"] = round(
                    late["rss_growth_mb_per_100_turns"] - caches, 2
                )
        out["messages_bytes"] = main.sent
        out["turns"] = last
    finally:
        main.close()
        for other in beside.values():
            other.close()
    return out


def _caches_mb(sizes: dict[str, int] | None) -> dict[str, float] | None:
    """The caches' bytes as the server counts them (decision 0169), MB each and in all."""
    if not sizes:
        return None
    out = {name: round(size / 1e6, 2) for name, size in sizes.items()}
    out["all"] = round(sum(sizes.values()) / 1e6, 2)
    return out


def _caches_growth(
    caches_at: dict[int, dict[str, int] | None], first: int, final: int
) -> float | None:
    """MB per 100 turns the caches grew by from turn ``first`` to ``final`` (None: a server
    that does not report them)."""
    a, b = caches_at.get(first), caches_at.get(final)
    if not a or not b:
        return None
    return round((sum(b.values()) - sum(a.values())) / 1e6 / (final - first) * 100, 2)


def _mega(chars: int | None) -> float | None:
    return None if chars is None else round(chars / 1e6, 2)


def _growth(
    rss_at: dict[int, int], bytes_at: dict[int, int], first: int, final: int
) -> dict[str, Any]:
    """The server's resident memory growth from turn ``first`` to ``final``, against the
    bytes of the messages sent meanwhile."""
    grown = rss_at[final] - rss_at[first]
    seen = bytes_at[final] - bytes_at[first]
    return {
        "turns": [first, final],
        "rss_growth_mb_per_100_turns": round(grown / 1e6 / (final - first) * 100, 2),
        "messages_mb_per_100_turns": round(seen / 1e6 / (final - first) * 100, 2),
        "ratio": round(grown / seen, 2) if seen else None,
    }


def _per_turn(
    checkpoints: Sequence[int],
    window: int,
    stores: Sequence[str],
    modes: Sequence[str],
    root: Path,
    progress: Progress,
    server: Sequence[str] | None,
    server_env: dict[str, str] | None,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for store in stores:
        for mode in modes:
            key = f"{store}/{mode}"
            if store == "memory":
                out[key] = _one_session(
                    "memory", mode, checkpoints, window, root, progress, server, server_env,
                    paired=True,
                )  # fmt: skip
                continue
            with _node(root, f"node-{mode}") as node:
                url = "xtdb://" + node.url.removeprefix("http://")
                figures = _one_session(
                    url, mode, checkpoints, window, root, progress, server, server_env,
                    paired=True,
                )  # fmt: skip
                data = Path(node.data_dir) if node.data_dir else None
            if data is not None and "turns" in figures:
                disk = sum(_dir_bytes(data / part) for part in os.listdir(data) if part != "run")
                figures["disk"] = {
                    "bytes_per_turn": round(disk / figures["turns"]),
                    "messages_bytes_per_turn": round(figures["messages_bytes"] / figures["turns"]),
                    "ratio": round(disk / figures["messages_bytes"], 2),
                }
                progress(f"{key}: on disk {figures['disk']}")
            out[key] = figures
    return out


def _node_requests(urls: Sequence[str]) -> int:
    """Requests the nodes have answered so far (their status counts them; decision 0066)."""
    from selfctx.adapters.xtdb import open_store

    total = 0
    for url in urls:
        store = open_store(url)
        try:
            total += int(store.client.status(timeout=30).get("selfctxRequests", 0))
        finally:
            store.close()
    return total


def _run_agents(
    urls: Sequence[str],
    n: int,
    turns: int,
    workspace: Path,
    server: Sequence[str] | None,
    server_env: dict[str, str] | None,
    tag: str,
) -> dict[str, Any]:
    """``n`` servers (tracking on), one session each, spread over the nodes at ``urls``,
    sharing ``workspace``; each runs ``turns`` measured turns after two of warm-up."""
    files = sorted((workspace / "src").rglob("*.py"))
    clients = [
        StdioClient(
            store="xtdb://" + urls[i % len(urls)].removeprefix("http://"),
            workspace=workspace,
            command=server,
            env=server_env,
        )
        for i in range(n)
    ]
    agents = [Agent(f"{tag}{i}", files, seed=100 + i) for i in range(n)]
    digests: list[Any] = [None] * n
    latencies: list[list[float]] = [[] for _ in range(n)]
    failures: list[str] = []
    try:
        for i, client in enumerate(clients):
            opened = client.call("session.open", session_id=f"{tag}{i}", policy="relevance")
            digests[i] = opened["digest"]

        def turn(i: int, record: bool) -> None:
            new = agents[i].turn()
            began = time.perf_counter()
            result = clients[i].call(
                "ingest", session_id=f"{tag}{i}", messages=new, extends=digests[i]
            )
            clients[i].call("assemble", session_id=f"{tag}{i}")
            digests[i] = result["digest"]
            if record:
                latencies[i].append(time.perf_counter() - began)

        def run(i: int) -> None:
            try:
                for _ in range(turns):
                    turn(i, True)
            except Exception as exc:  # reported with the figures, never hidden
                failures.append(f"agent {i}: {type(exc).__name__}: {exc}")

        for _ in range(2):
            for i in range(n):
                turn(i, False)
        requests = _node_requests(urls)
        cpu = sum(c.cpu_ns() for c in clients)
        threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
        began = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - began
        cpu = sum(c.cpu_ns() for c in clients) - cpu
        requests = _node_requests(urls) - requests
    finally:
        for client in clients:
            client.close()
    done = sum(len(x) for x in latencies)
    every = [x for xs in latencies for x in xs]
    out: dict[str, Any] = {
        "agents": n,
        "turns": done,
        "turns_per_s": round(done / wall, 2) if wall else None,
        "p50_ms": round(statistics.median(every) * 1000, 1) if every else None,
        "p95_ms": round(percentile(every, 95) * 1000, 1) if every else None,
        "requests_per_turn": round(requests / done, 2) if done else None,
        "server_cpu_ms_per_turn": round(cpu / 1e6 / done, 2) if done else None,
    }
    if failures:
        out["failures"] = failures[:5]
    return out


def _median_of_rounds(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One row from the rounds of one agent count: the median of each figure, with the turns/s
    of every round beside it (a short round is easily shifted by a neighbour's load)."""
    out: dict[str, Any] = dict(rounds[0])
    for key in rounds[0]:
        values: list[Any] = [r.get(key) for r in rounds]
        if key != "agents" and all(isinstance(v, (int, float)) for v in values):
            out[key] = round(statistics.median(values), 2)
    out["turns"] = sum(r["turns"] for r in rounds)
    out["rounds_turns_per_s"] = [r["turns_per_s"] for r in rounds]
    failures = [f for r in rounds for f in r.get("failures", ())]
    if failures:
        out["failures"] = failures[:5]
    return out


def _agents(
    counts: Sequence[int],
    cluster: bool,
    total_turns: int,
    root: Path,
    progress: Progress,
    server: Sequence[str] | None,
    server_env: dict[str, str] | None,
    rounds: int = 1,
    layouts: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The N-agent figures on one node, and with ``cluster`` on two over one PostgreSQL: for each
    N, ``rounds`` rounds on the same nodes (new sessions each), the median of each figure."""
    from selfctx.adapters.xtdb import XtdbNode

    out: dict[str, Any] = {}
    if layouts is None:
        layouts = ["one_node", "two_nodes"] if cluster else ["one_node"]
    for layout in layouts:
        figures = []
        for n in counts:
            workspace = root / f"agents-{layout}-{n}"
            make_workspace(workspace, 200)
            turns = max(6, total_turns // n)
            if layout == "one_node":
                with _node(root, f"node-agents-{n}") as node:
                    figures.append(
                        _median_of_rounds(
                            [
                                _run_agents(
                                    [node.url], n, turns, workspace, server, server_env, f"a{r}-"
                                )
                                for r in range(rounds)
                            ]
                        )
                    )
            else:
                from selfctx.adapters.xtdb.postgres import LocalPostgres, find_bin_dir

                bin_dir = find_bin_dir()
                if bin_dir is None:
                    out["two_nodes"] = "PostgreSQL is not installed: no cluster figures"
                    break
                with LocalPostgres(bin_dir) as pg:
                    nodes = [
                        XtdbNode("postgres", root / f"pg-{n}-{k}", postgres=pg.target)
                        for k in ("a", "b")
                    ]
                    try:
                        for node in nodes:
                            node.start()
                        urls = [node.url for node in nodes]
                        figures.append(
                            _median_of_rounds(
                                [
                                    _run_agents(
                                        urls, n, turns, workspace, server, server_env, f"c{r}-"
                                    )
                                    for r in range(rounds)
                                ]
                            )
                        )
                    finally:
                        for node in nodes:
                            node.stop()
            progress(f"{layout}, {n} agents: {figures[-1]}")
        else:
            out[layout] = figures
    return out


def _commits(url_a: str, url_b: str | None, count: int = 60) -> dict[str, Any]:
    """Median and p95 ms of a one-document commit through ``url_a``, and of the time until
    ``url_b`` (another node of the cluster) reads it."""
    from selfctx.adapters.xtdb import open_store

    a = open_store(url_a)
    b = open_store(url_b) if url_b else None
    commits: list[float] = []
    visible: list[float] = []
    try:
        tag = f"probe-{time.time_ns()}"
        for n in range(count):
            began = time.perf_counter()
            a.commit([{"xt/id": f"{tag}-{n}", "type": "probe", "n": n}])
            commits.append(time.perf_counter() - began)
            if b is not None:
                while b.get(f"{tag}-{n}") is None:
                    time.sleep(0.001)
                visible.append(time.perf_counter() - began)
    finally:
        a.close()
        if b is not None:
            b.close()
    skip = count // 6  # the first ones warm the nodes up
    out = {
        "commit_p50_ms": round(statistics.median(commits[skip:]) * 1000, 1),
        "commit_p95_ms": round(percentile(commits[skip:], 95) * 1000, 1),
    }
    if visible:
        out["visible_on_b_p50_ms"] = round(statistics.median(visible[skip:]) * 1000, 1)
    return out


def _cluster_commits(root: Path, progress: Progress) -> dict[str, Any]:
    """Commit latency of the tx-log options (decision 0067), with one RocksDB node beside them."""
    from selfctx.adapters.xtdb import XtdbNode
    from selfctx.adapters.xtdb.postgres import LocalPostgres, find_bin_dir

    out: dict[str, Any] = {}
    with _node(root, "node-commits") as node:
        out["one_rocksdb_node"] = _commits(node.url, None)
    bin_dir = find_bin_dir()
    if bin_dir is None:
        return {**out, "cluster": "PostgreSQL is not installed: no cluster figures"}
    variants: dict[str, dict[str, Any]] = {
        "xtdb_jdbc_tx_log": {"tx_log": "xtdb"},
        "woken_by_own_submits": {"notify": False},
        "woken_by_every_submit": {},
    }
    for name, options in variants.items():
        with LocalPostgres(bin_dir) as pg:
            target = attrs.evolve(pg.target, **options)
            nodes = [
                XtdbNode("postgres", root / f"commits-{name}-{k}", postgres=target)
                for k in ("a", "b")
            ]
            try:
                for node in nodes:
                    node.start()
                out[name] = _commits(nodes[0].url, nodes[1].url)
            finally:
                for node in nodes:
                    node.stop()
        progress(f"commits, {name}: {out[name]}")
    return out


def _resume(
    objects: int,
    root: Path,
    progress: Progress,
    server: Sequence[str] | None,
    server_env: dict[str, str] | None,
) -> dict[str, Any]:
    """A session of ``objects`` objects (a fifth of them files, each read once; the rest tool
    outputs of 300-900 bytes), built through the append form on a RocksDB node; its server
    killed; a new server resumes it."""
    workspace = root / "resume-workspace"
    files = objects // 5
    paths = make_workspace(workspace, files, sizes=(300, 1500))
    agent = Agent("r", paths, seed=5, output_kb=(0.3, 0.9), reads_in_order=True)
    calls = objects - files
    out: dict[str, Any] = {"objects": objects}
    with _node(root, "node-resume") as node:
        url = "xtdb://" + node.url.removeprefix("http://")
        extra = ["--no-track"]
        client = StdioClient(
            store=url, workspace=workspace, extra=extra, command=server, env=server_env
        )
        opened = client.call("session.open", session_id=SESSION, policy="relevance")
        digest = opened["digest"]
        began = time.perf_counter()
        batch: list[dict[str, Any]] = []
        made = 0
        while made < calls:
            batch += agent.turn()
            made += 1
            if len(batch) >= 200 or made == calls:
                digest = client.call("ingest", session_id=SESSION, messages=batch, extends=digest)[
                    "digest"
                ]
                client.call("assemble", session_id=SESSION)
                batch = []
                if made % 1000 < 100:
                    progress(f"resume: {made} of {calls} tool calls recorded")
        out["build_s"] = round(time.perf_counter() - began, 1)
        # An ordinary turn before the crash, for comparison.
        before = _timed_turn(client, agent, digest)
        digest = before.pop("digest")
        out["log_entries"] = client.call("assemble", session_id=SESSION)["stats"]["log_position"]
        client.kill()
        progress(f"resume: killed the server of a session of {out['log_entries']} log entries")
        client = StdioClient(
            store=url, workspace=workspace, extra=extra, command=server, env=server_env
        )
        try:
            client.call("tools", format="openai")  # the process is up and answering
            began, cpu, node_cpu = time.perf_counter(), client.cpu_ns(), _node_cpu_ns(node)
            opened = client.call("session.open", session_id=SESSION)
            out["resume_s"] = round(time.perf_counter() - began, 3)
            out["resume_cpu_s"] = round((client.cpu_ns() - cpu) / 1e9, 3)
            # the node's part: its reads of the session (the JVM, every thread)
            out["resume_node_cpu_s"] = round((_node_cpu_ns(node) - node_cpu) / 1e9, 3)
            out["digest_kept"] = opened["digest"] == digest
            began, cpu = time.perf_counter(), client.cpu_ns()
            client.call("assemble", session_id=SESSION)
            out["first_assemble_s"] = round(time.perf_counter() - began, 3)
            out["first_assemble_cpu_s"] = round((client.cpu_ns() - cpu) / 1e9, 3)
            out["turn_before_kill_s"] = before
            after = _timed_turn(client, agent, digest)
            after.pop("digest")
            out["turn_after_s"] = after
            again = client.call("ingest", session_id=SESSION, messages=agent.messages)
            out["resent_list"] = {"diverged": again["diverged"], "consumed": again["consumed"]}
        finally:
            client.close()
    progress(f"resume: {out}")
    return out


def _node_cpu_ns(node: Any) -> int:
    """CPU time the node's process has used so far (0 when it is not running)."""
    return cpu_ns(node.pid) if node.pid is not None else 0


def _timed_turn(client: StdioClient, agent: Agent, digest: str) -> dict[str, Any]:
    """One turn: wall seconds of its ingest and its assemble, and the server's CPU seconds."""
    new = agent.turn()
    began, cpu = time.perf_counter(), client.cpu_ns()
    result = client.call("ingest", session_id=SESSION, messages=new, extends=digest)
    ingest = time.perf_counter() - began
    middle = client.cpu_ns()
    client.call("assemble", session_id=SESSION)
    return {
        "ingest": round(ingest, 4),
        "assemble": round(time.perf_counter() - began - ingest, 4),
        "ingest_cpu": round((middle - cpu) / 1e9, 4),
        "assemble_cpu": round((client.cpu_ns() - middle) / 1e9, 4),
        "digest": result["digest"],
    }


def run_scale(
    *,
    checkpoints: Sequence[int] = (100, 1000, 1700),
    window: int = WINDOW,
    stores: Sequence[str] = ("memory", "xtdb"),
    modes: Sequence[str] = ("list", "append"),
    resume_objects: int = 10_000,
    agent_counts: Sequence[int] = (1, 4, 16, 32),
    agent_turns: int = 192,
    agent_rounds: int = 3,
    agent_layouts: Sequence[str] | None = None,
    cluster: bool = False,
    parts: Sequence[str] = ("per_turn", "agents", "resume"),
    memory_checkpoints: Sequence[int] = (300, 600, 900),
    memory_budget: int = MEMORY_BUDGET,
    server: Sequence[str] | None = None,
    server_env: dict[str, str] | None = None,
    progress: Progress = lambda _: None,
    cache_budget: int | None = None,
) -> dict[str, Any]:
    """Measure everything; the JSON shape of ``selfctx bench scale --json``. ``cache_budget``:
    the per-turn servers' (decision 0169), else their default."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="selfctx-bench-scale-") as tmp:
        root = Path(tmp)
        if "per_turn" in parts:
            env = server_env
            if cache_budget is not None:
                env = _cache_budget_env(root, cache_budget, server_env)
                out["cache_budget"] = cache_budget
            out["per_turn"] = _per_turn(
                checkpoints, window, stores, modes, root, progress, server, env
            )
        if "memory" in parts:
            out["memory"] = _memory(
                memory_checkpoints, window, memory_budget, root, progress, server, server_env
            )
        if cluster and "agents" in parts:
            out["commits"] = _cluster_commits(root, progress)
        if "agents" in parts:
            out["agents"] = _agents(
                agent_counts,
                cluster,
                agent_turns,
                root,
                progress,
                server,
                server_env,
                agent_rounds,
                agent_layouts,
            )
        if "resume" in parts:
            out["resume"] = _resume(resume_objects, root, progress, server, server_env)
    return out


def _cache_budget_env(root: Path, budget: int, server_env: dict[str, str] | None) -> dict[str, str]:
    """The servers' environment with a cache budget: the setting, and the three budgets of it
    a server before it reads too (so that such a server runs with the same content, metadata
    and rendering caches; its other caches keep their bounds)."""
    from selfctx.application.cache_budget import cache_shares

    shares = cache_shares(budget)
    config = root / "cache-budget-config.toml"
    config.write_text(
        f"[files]\ncontent_budget = {shares.content_chars}\n"
        f"metadata_budget = {shares.metadata_calls}\nrendering_budget = {shares.renderings}\n"
    )
    return {
        **(server_env or {}),
        "SELFCTX_CONFIG": str(config),
        "SELFCTX_CACHE_BUDGET": str(budget),
    }


def _memory(
    checkpoints: Sequence[int],
    window: int,
    budget: int,
    root: Path,
    progress: Progress,
    server: Sequence[str] | None,
    server_env: dict[str, str] | None,
) -> dict[str, Any]:
    """Server memory on XTDB (append form) with small and with large outputs: what grows with
    the bytes seen against what grows with the number of messages."""
    config = root / "memory-config.toml"
    config.write_text(f"[files]\ncontent_budget = {budget}\n")
    env = {**(server_env or {}), "SELFCTX_CONFIG": str(config)}
    out: dict[str, Any] = {"content_budget": budget}
    for name, kb in MEMORY_OUTPUTS.items():
        with _node(root, f"node-memory-{name}") as node:
            url = "xtdb://" + node.url.removeprefix("http://")
            figures = _one_session(
                url, "append", checkpoints, window, root, progress, server, env, output_kb=kb
            )
        figures["output_kb"] = list(kb)
        out[name] = figures
    return out


def _fmt(value: Any, unit: str = "") -> str:
    return "-" if value is None else f"{value:,}{unit}"


def _growth_of_cpu(checkpoints: dict[str, dict[str, Any]]) -> tuple[str, str, float] | None:
    """(first turn, last turn, CPU per turn at the last against the first)."""
    if len(checkpoints) < 2:
        return None
    turns = sorted(checkpoints, key=int)
    first, final = checkpoints[turns[0]]["cpu_ms"], checkpoints[turns[-1]]["cpu_ms"]
    return turns[0], turns[-1], round(final / first, 2) if first else float("nan")


def print_scale(result: dict[str, Any]) -> None:
    """The figures as a table, each beside its reference."""
    per_turn = result.get("per_turn", {})
    if per_turn:
        print(
            "Per turn (median over the window ending at each turn; CPU: the server's; an earlier"
            " turn measured beside the last, in a session of its own)"
        )
        print(
            f"{'store/form':<16} {'turn':>6} {'CPU ms':>8} {'wall ms':>8} {'ref ms':>7} "
            f"{'CPU/ref':>8} {'RSS MB':>7} {'msgs MB':>8} {'cached Mchars':>14}"
        )
        for key, figures in per_turn.items():
            if "unsupported" in figures:
                print(f"{key:<16} not supported by this server: {figures['unsupported']}")
                continue
            for turn, f in figures["checkpoints"].items():
                print(
                    f"{key:<16} {turn:>6} {f['cpu_ms']:>8} {f['wall_ms']:>8} "
                    f"{f['reference_ms']:>7} {f['ratio']:>8} {f['rss_mb']:>7} "
                    f"{f['messages_mb']:>8} {_fmt(f.get('cached_mchars')):>14}"
                )
                if f.get("caches_mb"):
                    print(f"{'':<16} {'':>6} caches MB: {f['caches_mb']}")
            growth = _growth_of_cpu(figures["checkpoints"])
            if growth is not None and key.endswith("/append"):
                first, final, ratio = growth
                print(f"{'':<16} CPU per turn, turn {final} against turn {first}: {ratio}x")
            for name in ("memory", "memory_late"):
                memory = figures.get(name)
                if not memory:
                    continue
                first, final = memory.get("turns", ["?", "?"])
                print(
                    f"{'':<16} memory, turns {first}-{final}: "
                    f"+{memory.get('rss_growth_mb_per_100_turns')} MB per 100 turns"
                    f" against {memory.get('messages_mb_per_100_turns')} MB of messages"
                    f" ({memory.get('ratio')}x)"
                )
                if memory.get("caches_growth_mb_per_100_turns") is not None:
                    print(
                        f"{'':<16}   of which the caches +"
                        f"{memory['caches_growth_mb_per_100_turns']} MB, the rest +"
                        f"{memory['residue_mb_per_100_turns']} MB per 100 turns"
                    )
            disk = figures.get("disk")
            if disk:
                print(
                    f"{'':<16} on disk: {disk['bytes_per_turn']:,} bytes per turn against "
                    f"{disk['messages_bytes_per_turn']:,} of messages ({disk['ratio']}x)"
                )
    memory = result.get("memory")
    if memory:
        _print_memory(memory)
    commits = result.get("commits")
    if commits:
        print("\nOne-document commits (ms) and when the other node reads them")
        for name, f in commits.items():
            print(f"  {name:<24} {f}")
    agents = result.get("agents", {})
    for layout, rows in agents.items():
        print(f"\nAgents, {layout.replace('_', ' ')}")
        if isinstance(rows, str):
            print(f"  {rows}")
            continue
        print(
            f"{'agents':>7} {'turns/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'req/turn':>9} "
            f"{'CPU ms/turn':>12}  turns/s of each round (the row: medians)"
        )
        for f in rows:
            each = ", ".join(_fmt(x) for x in f.get("rounds_turns_per_s", ()))
            print(
                f"{f['agents']:>7} {_fmt(f['turns_per_s']):>8} {_fmt(f['p50_ms']):>8} "
                f"{_fmt(f['p95_ms']):>8} {_fmt(f['requests_per_turn']):>9} "
                f"{_fmt(f['server_cpu_ms_per_turn']):>12}  {each}"
                + (" FAILURES" if "failures" in f else "")
            )
    resume = result.get("resume")
    if resume:
        print(
            f"\nResume of {resume['objects']:,} objects ({resume.get('log_entries')} log entries)"
        )
        opened, cpu = resume.get("resume_s"), resume.get("resume_cpu_s")
        first, first_cpu = resume.get("first_assemble_s"), resume.get("first_assemble_cpu_s")
        node = resume.get("resume_node_cpu_s")
        print(f"  session.open {opened} s (server CPU {cpu} s, node CPU {node} s)")
        print(f"  first assemble {first} s (server CPU {first_cpu} s)")
        print(f"  a turn before the kill: {resume.get('turn_before_kill_s')}")
        print(f"  a turn after the resume: {resume.get('turn_after_s')}")
        print(f"  the same list again: {resume.get('resent_list')}")


def _print_memory(memory: dict[str, Any]) -> None:
    budget = memory["content_budget"]
    print(
        f"\nServer memory on XTDB, append form, content cache (files.content_budget) "
        f"{budget:,} characters"
    )
    print(f"{'outputs':<18} {'turn':>6} {'RSS MB':>7} {'msgs MB':>8} {'cached Mchars':>14}")
    late: dict[str, dict[str, Any]] = {}
    for name in MEMORY_OUTPUTS:
        figures = memory.get(name)
        if not figures:
            continue
        low, high = figures["output_kb"]
        label = f"{name} ({low:g}-{high:g} KB)"
        for turn, f in figures["checkpoints"].items():
            print(
                f"{label:<18} {turn:>6} {f['rss_mb']:>7} {f['messages_mb']:>8} "
                f"{_fmt(f.get('cached_mchars')):>14}"
            )
        growth = figures.get("memory_late") or figures.get("memory")
        if growth:
            late[name] = growth
            first, final = growth["turns"]
            print(
                f"{'':<18} turns {first}-{final}: +{growth['rss_growth_mb_per_100_turns']} MB "
                f"per 100 turns against {growth['messages_mb_per_100_turns']} MB of messages"
            )
    if len(late) == 2:
        small, large = late["small"], late["large"]
        print(
            f"{'':<18} large against small: "
            f"{large['messages_mb_per_100_turns'] / small['messages_mb_per_100_turns']:.1f}x "
            f"the bytes, growth {large['rss_growth_mb_per_100_turns']:+} against "
            f"{small['rss_growth_mb_per_100_turns']:+} MB per 100 turns"
        )


if __name__ == "__main__":  # a quick look while developing
    import sys

    result = run_scale(
        checkpoints=tuple(int(x) for x in sys.argv[1].split(",")) if len(sys.argv) > 1 else (100,),
        stores=sys.argv[2].split(",") if len(sys.argv) > 2 else ("memory",),
        modes=sys.argv[3].split(",") if len(sys.argv) > 3 else ("list",),
        parts=sys.argv[4].split(",") if len(sys.argv) > 4 else ("per_turn",),
        resume_objects=int(sys.argv[5]) if len(sys.argv) > 5 else 10_000,
        server_env={"PYTHONPATH": sys.argv[6]} if len(sys.argv) > 6 and sys.argv[6] else None,
        agent_counts=tuple(int(x) for x in sys.argv[7].split(",")) if len(sys.argv) > 7 else (1, 4),
        cluster=len(sys.argv) > 8 and sys.argv[8] == "cluster",
        progress=lambda m: print("...", m, file=sys.stderr, flush=True),
    )
    print(json.dumps(result, indent=1))
