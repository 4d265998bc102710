"""``selfctx bench proxy``: the time the proxy adds to a request, against a pass-through proxy on
the same stack measured in the same run.

Three servers run, each in a process of its own, on 127.0.0.1: the scripted model, a pass-through
proxy (``selfctx.adapters.proxy.passthrough``: Starlette, uvicorn and httpx, forwarding only) and
``selfctx proxy`` (in-memory store, default policy). The benchmark's clients are a fourth process.
The model keeps none of the requests it answers (a real one is on another machine; one that kept
them all would pause for its collector, in either side's time).

* **One client**: a session of N objects (Chat Completions tool calls, outputs of eight lines) is
  built through the proxy; then each measured request appends one call and its output and is
  sent twice in turn, through the pass-through and through the proxy. The added time of a request
  is the difference of the two; the figures are its median and 95th percentile.
* **Concurrent clients**: C clients, each with a session of N objects of its own, send their
  requests at once, first all through the pass-through, then all through the proxy (repeated,
  alternating). Reported: each side's p50 and p95 latency, the added p95 (proxy p95 minus
  pass-through p95), and requests per second.

Before either is measured, ``warmup`` requests of a session of its own go through both sides,
unmeasured: a proxy serves for hours, and what it stands on warms up first (an XTDB node's JVM
compiles its hot paths over its first thousands of commits: a fresh node spent 9-26 ms of CPU a
commit where a warm one spends 3-5, decision 0101). ``--warmup 0`` measures a cold start.

Both sides are served by ``proxy.serving`` on the same HTTP parser and event loop, reported as
``stack`` (``httptools/uvloop`` when installed, decision 0147).

Machines here are shared: the figures that carry are the ratios to the pass-through measured in
the same run. ``--workers`` runs the proxy with that many worker processes (decision 0058); the
proxy's CPU time is its front's and its workers' together, and the front's alone is reported as
``proxy_front``. With ``--store auto`` the local XTDB node's CPU time while the proxy's requests
are served is reported as ``node`` (its JVM's, from ``/proc``; nothing else uses that node while
the benchmark runs, decision 0120), and the part of it its JIT compiler threads used as
``node_jit``, and its RocksDB background threads' (flushes and compactions) as ``node_rocksdb``:
a young node compiles for thousands of requests, and a compaction that lands in the measured
requests is seconds of CPU; either moves the node's figure by more than a request costs it
(decision 0125); ``node_threads`` gives the node's CPU a request by thread group (its HTTP
request pool, its transaction processor, ...; decision 0149), and with one client
``node_windows`` its CPU a request in each window of 40 requests, the first beside the later
ones (a node compiles through its first requests, decision 0165). So each phase, once its sessions
are built (one transaction each), waits until the node's RocksDB threads have been idle for a
second (a minute at most) before it measures, and reports the wait as ``settled_s`` (decision
0131).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx

from selfctx.adapters.bench.stats import percentile

__all__ = ["SIZES", "run_proxy"]

SIZES = (100, 1000)
_OUTPUT = "\n".join(f"line {n}: some output of a command, as an agent sees it" for n in range(8))
_PATH = "/v1/chat/completions"


def _pair(session: str, n: int) -> list[dict[str, Any]]:
    call_id = f"b{abs(hash(session)) % 10**8}_{n}"
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": "bash", "arguments": json.dumps({"command": f"echo step {n}"})},
    }
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": f"step {n}\n{_OUTPUT}"},
    ]


def _body(messages: list[dict[str, Any]]) -> bytes:
    tool = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}
    return json.dumps({"model": "scripted-model", "messages": messages, "tools": [tool]}).encode()


def _ms(values: Sequence[float]) -> dict[str, float]:
    return {
        "p50": round(statistics.median(values) * 1000, 3),
        "p95": round(percentile(values, 95) * 1000, 3),
    }


# -- the servers, each in a process of its own ------------------------------------------------


def proxy_app(upstream: str, workspace: str, *, workers: int = 1, store: str = "memory") -> Any:
    """The proxy's ASGI application on ``store`` (``memory``, or an XTDB node's
    ``xtdb://host:port``) in front of ``upstream`` (both APIs there); with ``workers`` > 1, a
    front (``relay.Relay``, served by :func:`_serve`) and that many worker processes
    (``selfctx proxy`` processes, ending with this one)."""
    if workers <= 1:
        from selfctx.adapters.bootstrap import build_service, open_store
        from selfctx.adapters.config import setting
        from selfctx.adapters.proxy import Proxy, ProxyConfig

        service = build_service(store=open_store(store), workspace=workspace)
        config = ProxyConfig(
            upstream_anthropic=upstream,
            upstream_openai=upstream,
            cwd=workspace,
            roots=(workspace,),
            answer_before_commit=setting("proxy.answer_before_commit"),
            answer_once_logged=setting("proxy.answer_once_logged"),
        )
        return Proxy(service, config).app
    from selfctx.adapters.proxy.spawn import start_workers

    argv = ["--store", store, "--workspace", workspace, "--log-level", "warning"]
    argv += ["--upstream-anthropic", upstream, "--upstream-openai", upstream]
    secret, urls = start_workers(workers, argv)
    from selfctx.adapters.proxy.relay import Relay

    return Relay(urls, secret)


def _serve(kind: str, upstream: str, workers: int, store: str, ports: Any) -> None:
    """Serve ``kind`` (``model``, ``passthrough`` or ``proxy``) on a free port of 127.0.0.1 and
    put the port on ``ports`` (runs in a child process)."""
    import logging

    from selfctx.adapters.proxy.serving import bind, serve, tune_collector

    logging.getLogger("selfctx.proxy").setLevel(logging.WARNING)
    sock = bind("127.0.0.1", 0)
    if kind == "model":
        from selfctx.adapters.proxy.scripted import ScriptedModel, Step

        # It keeps no request: a heap of every request decoded made its collector pause for
        # up to 0.6 s, longer as the run went on, which set either side's p95 (decision 0074).
        app: Any = ScriptedModel([Step("ok")], keep=False).app
    elif kind == "passthrough":
        from selfctx.adapters.proxy.passthrough import PassThrough

        app = PassThrough(upstream).app
    else:
        workspace = tempfile.mkdtemp(prefix="selfctx-bench-")
        app = proxy_app(upstream, workspace, workers=workers, store=store)
    tune_collector()  # each a server, collected as selfctx proxy is
    ports.put(sock.getsockname()[1])
    if hasattr(app, "run"):  # the front of workers
        app.run(sock)
    else:
        serve(app, sock, log_level="error")


@attrs.frozen
class _Running:
    url: str
    pid: int

    def cpu(self) -> float:
        """CPU seconds used so far by the server's process and those it started (Linux; 0.0
        elsewhere)."""
        return sum(_cpu_of(pid) for pid in _family(self.pid))

    def own_cpu(self) -> float:
        """CPU seconds used so far by the server's process alone (with workers: the front)."""
        return _cpu_of(self.pid)


def _family(pid: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = entry.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry.parent.name)] = int(fields[1])
    family, frontier = [pid], [pid]
    while frontier:
        frontier = [child for child, parent in parents.items() if parent in frontier]
        family += frontier
    return family


def _cpu_of(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# The node's threads whose CPU is reported apart (decision 0125), by the names /proc gives them
# (15 characters at most): HotSpot's JIT compiler threads ("C2 CompilerThread0", ...), and
# RocksDB's background threads, which flush memtables and compact tables ("rocksdb:high",
# "rocksdb:low").
_JIT_THREADS = ("C1 CompilerThre", "C2 CompilerThre")
_ROCKSDB_THREADS = ("rocksdb:",)


def _thread_ticks(pid: int, names: tuple[str, ...]) -> dict[int, int]:
    """Clock ticks (user and system) each thread of ``pid`` whose name starts with one of
    ``names`` has used, by thread id (empty when ``pid`` is 0, gone, or has no such thread). By
    thread, so that a thread started or stopped meanwhile counts only what it used while both
    snapshots saw it."""
    ticks: dict[int, int] = {}
    if not pid:
        return ticks
    for entry in Path(f"/proc/{pid}/task").glob("[0-9]*/stat"):
        try:
            text = entry.read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        if name.startswith(names):
            fields = text.rsplit(")", 1)[1].split()
            ticks[int(entry.parent.name)] = int(fields[11]) + int(fields[12])
    return ticks


def _threads_since(before: dict[int, int], pid: int, names: tuple[str, ...]) -> float:
    """CPU seconds the threads of ``pid`` named ``names`` used since ``before`` (of
    :func:`_thread_ticks`)."""
    after = _thread_ticks(pid, names)
    spent = sum(t - before[tid] for tid, t in after.items() if tid in before)
    return spent / os.sysconf("SC_CLK_TCK")


@contextmanager
def _server(
    kind: str, upstream: str = "", workers: int = 1, store: str = "memory"
) -> Iterator[_Running]:
    context = multiprocessing.get_context("spawn")
    ports = context.Queue()
    process = context.Process(
        target=_serve, args=(kind, upstream, workers, store, ports), daemon=True
    )
    process.start()
    try:
        yield _Running(f"http://127.0.0.1:{ports.get(timeout=120)}", process.pid or 0)
    finally:
        process.terminate()
        process.join(timeout=30)


# -- the clients -----------------------------------------------------------------------------


class _Session:
    """One client's conversation: its messages so far, and the request that adds a call."""

    def __init__(self, name: str, size: int) -> None:
        self.name = name
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": f"Benchmark session {name}."},
        ]
        for n in range(size):
            self.messages += _pair(name, n)
        self.next = size
        self.headers = {"x-selfctx-session": name, "authorization": "Bearer bench"}
        self.headers["content-type"] = "application/json"

    def grow(self) -> bytes:
        self.messages += _pair(self.name, self.next)
        self.next += 1
        return _body(self.messages)

    def post(self, client: httpx.Client, base: str, content: bytes) -> float:
        started = time.perf_counter()
        answer = client.post(base + _PATH, content=content, headers=self.headers)
        elapsed = time.perf_counter() - started
        answer.raise_for_status()
        return elapsed


def _one_client(
    size: int, requests: int, proxy: _Running, passthrough: _Running, node: int = 0
) -> dict[str, Any]:
    session = _Session(f"bench-one-{size}", size)
    with httpx.Client(timeout=300) as client:
        session.post(client, proxy.url, _body(session.messages))  # the session is built
        settled = _settle(node)
        direct: list[float] = []
        through: list[float] = []
        content = b""
        cpu = _cpu_sides(node)
        parts = _NodeParts(node)
        node_each: list[float] = []
        for _ in range(requests):
            content = session.grow()
            for side, server, times in (
                ("passthrough", passthrough, direct),
                ("proxy", proxy, through),
            ):
                before, own, node_before = server.cpu(), server.own_cpu(), _cpu_of(node)
                if node and side == "proxy":
                    parts.start()
                times.append(session.post(client, server.url, content))
                if node and side == "proxy":
                    parts.add(cpu)
                cpu[side] += server.cpu() - before
                if side == "proxy":
                    cpu["proxy_front"] += server.own_cpu() - own
                    if node:
                        node_each.append(_cpu_of(node) - node_before)
                        cpu["node"] += node_each[-1]
    added = [p - d for p, d in zip(through, direct, strict=True)]
    return {
        "objects": size,
        "requests": requests,
        "request_bytes": len(content),
        "settled_s": settled,
        "added_ms": _ms(added),
        "passthrough_ms": _ms(direct),
        "proxy_ms": _ms(through),
        "cpu_ms_per_request": {
            side: round(spent / requests * 1000, 2) for side, spent in cpu.items()
        },
    } | (
        {"node_threads": parts.per_request(requests), "node_windows": _windows(node_each)}
        if node
        else {}
    )


_WINDOW = 40


def _windows(spent: Sequence[float], size: int = _WINDOW) -> list[float]:
    """The node's CPU ms a request in each window of ``size`` consecutive requests (the last one
    may be shorter): a young node compiles its hot paths through its first requests, so the
    first window and a later one can differ severalfold; both are reported, the cold one not
    hidden by the average (decision 0165)."""
    return [
        round(sum(spent[at : at + size]) / len(spent[at : at + size]) * 1000, 2)
        for at in range(0, len(spent), size)
    ]


# The CPU figures counted during another side's requests: the front's and the node's during the
# proxy's; ``node_jit`` and ``node_rocksdb`` are the parts of ``node`` its JIT compiler threads
# and its RocksDB background threads used (decision 0125).
_SIDE_OF = {"proxy_front": "proxy", "node": "proxy", "node_jit": "proxy", "node_rocksdb": "proxy"}


def _cpu_sides(node: int) -> dict[str, float]:
    """The CPU seconds counted per request: each side's, the front's, and the node's if known
    (all its threads; its JIT compiler threads and its RocksDB background threads apart)."""
    cpu = {"passthrough": 0.0, "proxy": 0.0, "proxy_front": 0.0}
    if node:
        cpu["node"] = 0.0
        cpu["node_jit"] = 0.0
        cpu["node_rocksdb"] = 0.0
    return cpu


class _NodeParts:
    """The CPU of the node's threads reported apart, counted between :meth:`start` and
    :meth:`add`: inside the window of the node's own count (its snapshots taken after the
    node's first one and before its last), so that each part is at most the whole. Besides the
    JIT's and RocksDB's parts, every thread's CPU is summed by its group (:func:`_group`) in
    ``groups``, in clock ticks (decision 0149)."""

    def __init__(self, node: int) -> None:
        self.node = node
        self.before: dict[str, dict[int, int]] = {}
        self.threads: dict[int, tuple[str, int]] = {}
        self.groups: dict[str, int] = {}

    def start(self) -> None:
        self.before = {
            "node_jit": _thread_ticks(self.node, _JIT_THREADS),
            "node_rocksdb": _thread_ticks(self.node, _ROCKSDB_THREADS),
        }
        self.threads = _named_ticks(self.node)

    def add(self, cpu: dict[str, float]) -> None:
        names = {"node_jit": _JIT_THREADS, "node_rocksdb": _ROCKSDB_THREADS}
        for part, before in self.before.items():
            cpu[part] += _threads_since(before, self.node, names[part])
        for tid, (name, ticks) in _named_ticks(self.node).items():
            if tid in self.threads:
                group = _group(name)
                self.groups[group] = self.groups.get(group, 0) + ticks - self.threads[tid][1]

    def per_request(self, requests: int) -> dict[str, float]:
        """CPU ms a request by thread group, largest first (groups that used none left out)."""
        tick = os.sysconf("SC_CLK_TCK")
        return {
            group: round(ticks / tick / requests * 1000, 2)
            for group, ticks in sorted(self.groups.items(), key=lambda item: -item[1])
            if ticks > 0 and requests > 0
        }


def _named_ticks(pid: int) -> dict[int, tuple[str, int]]:
    """Each thread of ``pid``'s name and clock ticks (user and system), by thread id."""
    threads: dict[int, tuple[str, int]] = {}
    if not pid:
        return threads
    for entry in Path(f"/proc/{pid}/task").glob("[0-9]*/stat"):
        try:
            text = entry.read_text()
        except OSError:
            continue
        fields = text.rsplit(")", 1)[1].split()
        name = text[text.index("(") + 1 : text.rindex(")")]
        threads[int(entry.parent.name)] = (name, int(fields[11]) + int(fields[12]))
    return threads


def _group(name: str) -> str:
    """A thread's group: its name without a trailing number (``pool-1-thread-7`` and
    ``pool-1-thread-12`` are the node's HTTP request pool, ``C2 CompilerThread0`` the JIT's;
    /proc cuts names at 15 characters)."""
    return re.sub(r"[-:# ]?[0-9]+$", "", name) or name


def _settle(
    node: int,
    *,
    quiet: float = 1.0,
    limit: float = 60.0,
    ticks: Callable[[], int] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Wait until the node's RocksDB background threads have used no CPU for ``quiet`` seconds
    (``limit`` at most); returns the seconds waited (0.0 without a node). The sessions a phase
    builds are written as one transaction each (a 1,000-object session is 3.2 MB); the
    compactions they cause follow for seconds and would land in the requests measured next
    (decision 0131)."""
    if not node:
        return 0.0
    if ticks is None:

        def ticks() -> int:
            return sum(_thread_ticks(node, _ROCKSDB_THREADS).values())

    started = clock()
    last, still_since = ticks(), started
    while clock() - still_since < quiet and clock() - started < limit:
        sleep(0.1)
        now = ticks()
        if now != last:
            last, still_since = now, clock()
    return round(clock() - started, 2)


def _warm_up(requests: int, size: int, proxy: _Running, passthrough: _Running) -> int:
    """``requests`` unmeasured requests of a session of ``size`` objects through both sides;
    returns how many each side answered."""
    if requests <= 0:
        return 0
    session = _Session(f"bench-warm-{size}", size)
    with httpx.Client(timeout=300) as client:
        session.post(client, proxy.url, _body(session.messages))
        for _ in range(requests):
            content = session.grow()
            session.post(client, passthrough.url, content)
            session.post(client, proxy.url, content)
    return requests


def _concurrent(
    clients: int, size: int, requests: int, proxy: _Running, passthrough: _Running, node: int = 0
) -> dict[str, Any]:
    sessions = [_Session(f"bench-c{n}-{size}", size) for n in range(clients)]
    with httpx.Client(timeout=300) as client:
        for session in sessions:  # built one after the other, not measured
            session.post(client, proxy.url, _body(session.messages))
    settled = _settle(node)
    times: dict[str, list[float]] = {"passthrough": [], "proxy": []}
    spent: dict[str, float] = {"passthrough": 0.0, "proxy": 0.0}
    cpu = _cpu_sides(node)
    parts = _NodeParts(node)
    bodies = [[s.grow() for _ in range(requests)] for s in sessions]

    def run(side: str, server: _Running, rounds: range) -> None:
        base = server.url
        barrier = threading.Barrier(clients)
        errors: list[BaseException] = []

        def one(index: int) -> None:
            session = sessions[index]
            try:
                with httpx.Client(timeout=300) as client:
                    barrier.wait()
                    for r in rounds:
                        times[side].append(session.post(client, base, bodies[index][r]))
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
        before, own, node_before = server.cpu(), server.own_cpu(), _cpu_of(node)
        if node and side == "proxy":
            parts.start()
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        spent[side] += time.perf_counter() - started
        if node and side == "proxy":
            parts.add(cpu)
        cpu[side] += server.cpu() - before
        if side == "proxy":
            cpu["proxy_front"] += server.own_cpu() - own
            if node:
                cpu["node"] += _cpu_of(node) - node_before
        if errors:
            raise errors[0]

    step = max(1, requests // 4)
    for first in range(0, requests, step):  # alternate sides, so that both see the same noise
        rounds = range(first, min(first + step, requests))
        run("passthrough", passthrough, rounds)
        run("proxy", proxy, rounds)
    out: dict[str, Any] = {
        "clients": clients,
        "objects": size,
        "requests": requests,
        "settled_s": settled,
    }
    for side in ("passthrough", "proxy"):
        out[f"{side}_ms"] = _ms(times[side])
        out[f"{side}_per_s"] = round(len(times[side]) / spent[side], 1)
    out["added_p95_ms"] = round(out["proxy_ms"]["p95"] - out["passthrough_ms"]["p95"], 3)
    out["cpu_ms_per_request"] = {
        side: round(spent_cpu / len(times[_SIDE_OF.get(side, side)]) * 1000, 2)
        for side, spent_cpu in cpu.items()
    }
    if node:
        out["node_threads"] = parts.per_request(len(times["proxy"]))
    return out


def run_proxy(
    sizes: Sequence[int] = SIZES,
    requests: int = 50,
    progress: Callable[[str], None] | None = None,
    *,
    clients: int = 8,
    concurrent_size: int = 1000,
    concurrent_requests: int = 20,
    workers: int = 1,
    store: str = "memory",
    warmup: int = 200,
) -> dict[str, Any]:
    """Run the benchmark; the top-level figures are those of the largest session. ``store``:
    ``memory``, ``auto`` (this user's local XTDB node, started if need be; its CPU is reported as
    ``node``) or an XTDB node's ``xtdb://host:port``. ``warmup``: unmeasured requests through
    both sides first."""
    from selfctx.adapters.proxy.serving import stack

    node = 0
    if store == "auto":  # resolved once: the proxy's process (and its workers) use that node
        from selfctx.adapters.xtdb import local_node

        local = local_node()
        store = "xtdb://" + local.url.removeprefix("http://")
        node = local.info.pid
    with (
        _server("model") as model,
        _server("passthrough", model.url) as passthrough,
        _server("proxy", model.url, workers, store) as proxy,
    ):
        if warmup > 0 and progress:
            progress(f"warm-up: {warmup} unmeasured requests through both sides")
        warmed = _warm_up(warmup, max(sizes), proxy, passthrough)
        runs = []
        for size in sizes:
            if progress:
                progress(f"one client, session of {size} objects, {requests} requests")
            runs.append(_one_client(size, requests, proxy, passthrough, node))
        together = None
        if clients > 1:
            if progress:
                progress(
                    f"{clients} clients at once, sessions of {concurrent_size} objects, "
                    f"{concurrent_requests} requests each"
                )
            together = _concurrent(
                clients, concurrent_size, concurrent_requests, proxy, passthrough, node
            )
    largest = runs[-1]
    return {
        "workers": workers,
        "store": "memory" if store == "memory" else "xtdb",
        "stack": stack(),
        "warmup": warmed,
        "added_ms": largest["added_ms"],
        "objects": largest["objects"],
        "runs": runs,
        "concurrent": together,
    }
