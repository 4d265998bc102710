"""``selfctx bench ui``: how long the inspector's pages take to load for a long session.

One session of ``requests`` model requests and about ``objects`` objects is written through the
harness adapter, as the proxy writes one: each request is an assistant message calling a tool and
its output, followed by assembly and the request's record. Tool calls list directories (each
listing discovers new files: stubs), read files (versions with content; a file is changed on
disk and read again now and then, so files have several versions) or run tests (a few hundred
lines of output). A user message begins a new turn every 25 requests.

Then each page is loaded over HTTP (uvicorn on 127.0.0.1, as ``selfctx ui`` serves it) with
its token cookie, as a browser would, its whole body read. A *cold* load is a page's first load in
an inspector of its own over a fresh ``ContextService`` (nothing of the session read yet, no
state, object or record kept, no session held open, a new web app and server): every cache the
project keeps belongs to a service or an inspector, so none survives; what does are the
interpreter's own (imported modules, interned strings, its allocator), the store itself and, on
XTDB, the node's caches and compiled code. Each page is loaded cold ``cold`` times, in rounds
(every page once per round, so two cold loads of one page have the other pages' loads between
them); the figures are the median of those loads, their lowest and highest, the first round's
load (the node's caches as the writer left them) and the median CPU time of this process
(server and client) and, on XTDB, of the node. ``warm`` is the median of ``repeat`` more loads in
the inspector of the last round. The search index is a file, as ``selfctx ui`` keeps one per
store: it is built from scratch once (its time is printed) and every fresh service takes in only
what is new, as a second start of ``selfctx ui`` does. Figures are milliseconds and the page's
size. The same runs on the in-memory store and on an XTDB node the bench starts.
"""

from __future__ import annotations

import gc
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from selfctx.adapters.bench.stats import percentile
from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.harness.messages import Message
from selfctx.adapters.harness.session import HarnessSession
from selfctx.adapters.memory import MemoryStore
from selfctx.adapters.proxy.serving import serve_in_thread
from selfctx.adapters.ui import Inspector
from selfctx.application.persistence import document_size
from selfctx.application.ports.store import ObjectStore
from selfctx.application.requests import RequestFacts, requests_id
from selfctx.application.service import ContextService
from selfctx.domain.chat import ToolCallRequest

__all__ = ["build_session", "run_ui_bench"]

SESSION = "bench-ui"


def _test_output(n: int) -> str:
    lines = [f"tests/test_module_{n % 37}.py::test_case_{k} PASSED [{k}%]" for k in range(60)]
    return "\n".join(lines) + f"\n{60} passed in 0.{n % 10}s\n"


def build_session(
    service: ContextService,
    root: Path,
    requests: int,
    objects: int,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    """Write the bench's session into ``service``'s store (see the module docstring)."""
    listing_requests = requests - requests // 10  # every tenth request reads a file
    per_listing = max(1, -(-(objects - requests) // max(1, listing_requests)))
    listings = max(0, -(-(objects - requests) // per_listing))
    harness = HarnessSession(service, SESSION, "openai", cwd=str(root), roots=[str(root)])
    messages = [Message("system", "You are a coding agent."), Message("user", "Fix the tests.")]
    listed = 0
    read: list[Path] = []
    recording: list[float] = []
    started = time.perf_counter()
    for n in range(1, requests + 1):
        if n % 25 == 0:
            messages.append(Message("user", f"Now look at part {n // 25}."))
        if listed < listings and n % 10 != 0:
            folder = root / f"pkg{listed}"
            folder.mkdir()
            for k in range(per_listing):
                (folder / f"module_{k}.py").write_text(
                    f"# module {listed}.{k}\n"
                    + "".join(f"def f{i}():\n    return {i}\n" for i in range(40))
                )
            command = f"ls pkg{listed}"
            output = "\n".join(f"module_{k}.py" for k in range(per_listing)) + "\n"
            read.append(folder / "module_0.py")
            listed += 1
        elif n % 10 == 0 and read:
            path = read[(n // 10) % len(read)]
            if n % 50 == 0:  # changed on disk since it was last read: a new version
                path.write_text(path.read_text() + f"# changed at request {n}\n")
            command = f"cat {path.relative_to(root)}"
            output = path.read_text()
        else:
            command = "python -m pytest -q"
            output = _test_output(n)
        call = ToolCallRequest(f"call_{n}", "bash", {"command": command})
        messages.append(Message("assistant", f"Step {n}.", (call,)))
        messages.append(Message("tool", output, tool_call_id=call.id))
        harness.ingestor.ingest(messages)
        context = service.assemble(SESSION)
        before = time.perf_counter()
        service.record_request(
            SESSION, context, RequestFacts(api="openai", model="bench", client="bench")
        )
        recording.append((time.perf_counter() - before) * 1000)
        if n % 100 == 0:
            progress(f"{n} requests written ({time.perf_counter() - started:.0f} s)")
    state = service.state(SESSION)
    record_doc = service.store.get(requests_id(SESSION)) or {}
    return {
        "requests": requests,
        "objects": len(state.index),
        "log_position": service.log_position(SESSION),
        "build_seconds": round(time.perf_counter() - started, 1),
        "record_ms": {
            "median": round(statistics.median(recording), 3),
            "p95": round(percentile(recording, 95), 3),
            "last_100_median": round(statistics.median(recording[-100:]), 3),
            "first_100_median": round(statistics.median(recording[:100]), 3),
        },
        "record_bytes": document_size(record_doc),
    }


def _pages(service: ContextService, requests: int) -> dict[str, str]:
    state = service.state(SESSION)
    versions = {
        object_id: len(service.history(object_id))
        for object_id in state.index[:60]
        if state.kinds[object_id] == "file"
    }
    changed = max(versions, key=lambda i: versions[i]) if versions else state.index[0]
    toolcall = next(i for i in state.index if state.kinds[i] == "toolcall")
    middle = service.log_position(SESSION) // 2
    return {
        "sessions": "/",
        "timeline": f"/s/{SESSION}",
        "request (latest)": f"/s/{SESSION}/r/{requests}",
        "request (middle)": f"/s/{SESSION}/r/{requests // 2}",
        "request (next)": f"/s/{SESSION}/r/{requests // 2 + 1}",
        "request (first)": f"/s/{SESSION}/r/1",
        "log position (middle)": f"/s/{SESSION}/at/{middle}",
        "tool output": f"/o/{toolcall}",
        "file and a diff": f"/o/{changed}?a=1&b={max(2, versions.get(changed, 2))}",
        "search": f"/s/{SESSION}/search?q=module_3",
        "sessions that met a file": f"/o/{changed}/met?part=1",
        "timeline update": f"/api/s/{SESSION}/requests?after={requests - 1}",
    }


def _fetch(client: httpx.Client, url: str) -> tuple[float, int]:
    """One page: milliseconds until its whole body has arrived, and its size."""
    start = time.perf_counter()
    answer = client.get(url)
    body = answer.content  # read whole: the figure is the full response, not its headers
    elapsed = (time.perf_counter() - start) * 1000
    answer.raise_for_status()
    return elapsed, len(body)


def _cpu_ms(pid: int | None) -> float | None:
    """CPU time (user + system) of process ``pid`` so far, in milliseconds (Linux's /proc;
    None where it cannot be read)."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") * 1000
    except (OSError, ValueError, IndexError):
        return None


def _cold(
    fresh: Callable[[], ContextService],
    path: str,
    repeat: int,
    node_pid: int | None,
) -> tuple[dict[str, float | None], list[float], int]:
    """One cold load of ``path`` in a fresh service and inspector, then ``repeat`` warm ones
    there: the cold load's wall and CPU figures, the warm loads' walls, the page's size."""
    service = fresh()
    try:
        inspector = Inspector(service)
        inspector.wait_for_search()
        with serve_in_thread(inspector.app) as base, httpx.Client(timeout=120) as client:
            client.get(inspector.url(base), follow_redirects=True).raise_for_status()
            gc.collect()  # the previous load's garbage is not this one's cost
            node = _cpu_ms(node_pid)
            cpu = time.process_time()
            elapsed, size = _fetch(client, base + path)
            cpu = (time.process_time() - cpu) * 1000
            node_after = _cpu_ms(node_pid)
            warm = [_fetch(client, base + path)[0] for _ in range(repeat)]
    finally:
        service.close()
    node_cpu = node_after - node if node is not None and node_after is not None else None
    return {"wall": elapsed, "cpu": cpu, "node": node_cpu}, warm, size


def _measure(
    fresh: Callable[[], ContextService],
    pages: dict[str, str],
    repeat: int,
    cold: int = 5,
    node_pid: int | None = None,
) -> dict[str, Any]:
    """Each page loaded cold ``cold`` times, in rounds (every page once per round), and
    ``repeat`` times warm after the last round's cold load."""
    loads: dict[str, list[dict[str, float | None]]] = {name: [] for name in pages}
    warm: dict[str, list[float]] = {}
    sizes: dict[str, int] = {}
    for round_ in range(max(1, cold)):
        last = round_ == max(1, cold) - 1
        for name, path in pages.items():
            figures, warm_times, sizes[name] = _cold(fresh, path, repeat if last else 0, node_pid)
            loads[name].append(figures)
            if last:
                warm[name] = warm_times
    out: dict[str, Any] = {}
    for name in pages:
        walls = [f["wall"] for f in loads[name] if f["wall"] is not None]
        cpus = [f["cpu"] for f in loads[name] if f["cpu"] is not None]
        nodes = [f["node"] for f in loads[name] if f["node"] is not None]
        out[name] = {
            "cold_ms": round(statistics.median(walls), 1),
            "cold_min_ms": round(min(walls), 1),
            "cold_max_ms": round(max(walls), 1),
            "cold_first_ms": round(walls[0], 1),
            "cold_runs_ms": [round(w, 1) for w in walls],
            "cold_cpu_ms": round(statistics.median(cpus), 1),
            "node_cpu_ms": round(statistics.median(nodes), 1) if nodes else None,
            "warm_ms": round(statistics.median(warm[name]), 1) if warm[name] else None,
            "kb": round(sizes[name] / 1024, 1),
        }
    return out


@contextmanager
def _xtdb(root: Path) -> Iterator[tuple[ObjectStore, int | None]]:
    from selfctx.adapters.xtdb import XtdbNode, open_store  # imported here: it starts a JVM

    node = XtdbNode("rocksdb", root / "xtdb", run_dir=root / "xtdb" / "run")
    with node:
        store = open_store(node.url, timeout=60)
        try:
            yield store, node.pid
        finally:
            store.close()


def run_ui_bench(
    *,
    requests: int = 1000,
    objects: int = 10_000,
    repeat: int = 5,
    cold: int = 5,
    stores: tuple[str, ...] = ("memory", "xtdb"),
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "requests": requests,
        "objects": objects,
        "repeat": repeat,
        "cold": cold,
    }
    for kind in stores:
        with tempfile.TemporaryDirectory(prefix="selfctx-bench-ui-") as tmp:
            root = Path(tmp)
            work = root / "work"
            work.mkdir()
            index = str(root / "search.sqlite")
            with _xtdb(root) if kind == "xtdb" else _memory() as (store, node_pid):

                def fresh(
                    store: ObjectStore = store, work: Path = work, index: str = index
                ) -> ContextService:
                    return build_service(
                        store=store, workspace=str(work), host_id="bench-host", search_path=index
                    )

                service = build_service(
                    store=store, workspace=str(work), host_id="bench-host", search_path=None
                )
                try:
                    progress(f"{kind}: writing the session")
                    built = build_session(service, work, requests, objects, progress)
                    pages = _pages(service, requests)
                finally:
                    service.close()
                progress(f"{kind}: building the search index from scratch")
                service = fresh()
                try:
                    start = time.perf_counter()
                    service.catch_up_search()
                    built["search_index_build_s"] = round(time.perf_counter() - start, 1)
                finally:
                    service.close()
                progress(f"{kind}: loading pages")
                result[kind] = {
                    "session": built,
                    "pages": _measure(fresh, pages, repeat, cold, node_pid),
                }
    return result


@contextmanager
def _memory() -> Iterator[tuple[ObjectStore, int | None]]:
    yield MemoryStore(), None
