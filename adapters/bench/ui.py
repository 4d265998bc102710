"""``selfctx bench ui``: how long the inspector's pages take to load for a long session.

One session of ``requests`` model requests and about ``objects`` objects is written through the
harness adapter, as the proxy writes one: each request is an assistant message calling a tool and
its output, followed by assembly and the request's record. Tool calls list directories (each
listing discovers new files: stubs), read files (versions with content; a file is changed on
disk and read again now and then, so files have several versions) or run tests (a few hundred
lines of output). A user message begins a new turn every 25 requests.

Then each page is loaded over HTTP (uvicorn on 127.0.0.1, as ``selfctx ui`` serves it) with
its token cookie, as a browser would, its whole body read. ``cold`` is the page's first load in
an inspector of its own over a fresh ``ContextService`` (caches cleared: nothing of the session
read yet, no state, object or record kept, no session held open; the store itself, and an XTDB
node's own caches, are as the writer left them); ``warm`` the median of ``repeat`` more loads in
that inspector. The search index is a file, as ``selfctx ui`` keeps one per store: it is built
from scratch once (its time is printed) and every fresh service takes in only what is new, as a
second start of ``selfctx ui`` does. Figures are wall-clock milliseconds and the page's size. The
same runs on the in-memory store and on an XTDB node the bench starts.
"""

from __future__ import annotations

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


def _measure(
    fresh: Callable[[], ContextService], pages: dict[str, str], repeat: int
) -> dict[str, Any]:
    """Each page first in an inspector of its own over a fresh service (``cold``: nothing of
    the session read yet, no state or object kept, no session held open), then ``repeat``
    more times in that inspector (``warm``)."""
    out: dict[str, Any] = {}
    for name, path in pages.items():
        service = fresh()
        try:
            inspector = Inspector(service)
            inspector.wait_for_search()
            with serve_in_thread(inspector.app) as base, httpx.Client(timeout=120) as client:
                client.get(inspector.url(base), follow_redirects=True).raise_for_status()
                times, size = [], 0
                for _ in range(repeat + 1):
                    elapsed, size = _fetch(client, base + path)
                    times.append(elapsed)
        finally:
            service.close()
        out[name] = {
            "cold_ms": round(times[0], 1),
            "warm_ms": round(statistics.median(times[1:]), 1),
            "kb": round(size / 1024, 1),
        }
    return out


@contextmanager
def _xtdb(root: Path) -> Iterator[ObjectStore]:
    from selfctx.adapters.xtdb import XtdbNode, open_store  # imported here: it starts a JVM

    node = XtdbNode("rocksdb", root / "xtdb", run_dir=root / "xtdb" / "run")
    with node:
        store = open_store(node.url, timeout=60)
        try:
            yield store
        finally:
            store.close()


def run_ui_bench(
    *,
    requests: int = 1000,
    objects: int = 10_000,
    repeat: int = 5,
    stores: tuple[str, ...] = ("memory", "xtdb"),
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    result: dict[str, Any] = {"requests": requests, "objects": objects, "repeat": repeat}
    for kind in stores:
        with tempfile.TemporaryDirectory(prefix="selfctx-bench-ui-") as tmp:
            root = Path(tmp)
            work = root / "work"
            work.mkdir()
            index = str(root / "search.sqlite")
            with _xtdb(root) if kind == "xtdb" else _memory() as store:

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
                result[kind] = {"session": built, "pages": _measure(fresh, pages, repeat)}
    return result


@contextmanager
def _memory() -> Iterator[ObjectStore]:
    yield MemoryStore()
