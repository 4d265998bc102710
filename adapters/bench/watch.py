"""``selfctx bench watch``: how fast an edit reaches the store, and what watching costs when idle.

A workspace of ``files`` files spread over ``dirs`` directories is created in a temporary
directory, and one session reads every file (so every file is watched, one watch per directory).
Then:

* **latency**: ``edits`` times, one file is rewritten with new content, and the time from just
  before the write to the moment the store holds a version with the new ``file_hash`` is taken.
  The store signals each commit, so nothing polls; the figure includes the tracker's coalescing
  delay (50 ms of quiet), the re-read, hashing and the commit.
* **idle CPU**: the process's CPU time (all threads, ``getrusage``) over a fixed window in which
  nothing changes, as a percentage of the window's wall time.
"""

from __future__ import annotations

import hashlib
import os
import resource
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from selfctx.adapters.bench.stats import percentile
from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.filesystem.tracker import WatchdogTracker
from selfctx.adapters.memory import MemoryStore
from selfctx.application.ports.store import Document, Expect, Receipt

__all__ = ["NotifyingStore", "run_watch"]

SESSION = "bench-watch"
HOST = "bench-host"


class NotifyingStore(MemoryStore):
    """The in-memory store, announcing every commit on a condition variable."""

    def __init__(self) -> None:
        super().__init__()
        self.committed = threading.Condition()

    def commit(self, puts: Sequence[Document], expect: Sequence[Expect] = ()) -> Receipt:
        receipt = super().commit(puts, expect)
        with self.committed:
            self.committed.notify_all()
        return receipt

    def wait_for_hash(self, object_id: str, file_hash: str, timeout: float) -> bool:
        """Block until the latest version of ``object_id`` has ``file_hash``."""

        def stored() -> bool:
            doc = self.get(object_id)
            return doc is not None and doc.get("file_hash") == file_hash

        with self.committed:
            return self.committed.wait_for(stored, timeout=timeout)


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _make_workspace(root: str, files: int, dirs: int) -> list[str]:
    paths = []
    for d in range(dirs):
        os.makedirs(os.path.join(root, f"pkg{d:03d}"))
    for n in range(files):
        path = os.path.join(root, f"pkg{n % dirs:03d}", f"module_{n:05d}.py")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(f"# module {n}\n" + "def f(x):\n    return x\n" * 20)
        paths.append(path)
    return paths


def run_watch(
    *,
    files: int = 5_000,
    dirs: int = 50,
    edits: int = 200,
    idle_seconds: float = 10.0,
    progress: Callable[[str], None] = lambda message: None,
) -> dict[str, Any]:
    """Run the benchmark and return its figures (see the module docstring)."""
    if files < 1 or dirs < 1 or edits < 1 or idle_seconds <= 0:
        raise ValueError("files, dirs and edits must be at least 1, idle_seconds above 0")
    with tempfile.TemporaryDirectory(prefix="selfctx-bench-watch-") as tmp:
        root = os.path.realpath(tmp)
        paths = _make_workspace(root, files, dirs)
        store = NotifyingStore()
        tracker = WatchdogTracker(HOST)
        service = build_service(store=store, workspace=root, host_id=HOST, tracker=tracker)
        try:
            service.start_session(SESSION)
            progress(f"reading {files} files in {dirs} directories")
            ids = [service.index_file(SESSION, path).object_id for path in paths]
            watched = len(tracker.watching())
            tracker.idle(timeout=120)  # each newly watched file is looked at once

            progress(f"{edits} edits")
            latencies = []
            for n in range(edits):
                k = (n * 7919) % files  # spread over files and directories
                data = f"# edit {n}\n".encode() * (1 + n % 5)
                expected = hashlib.sha256(data).hexdigest()
                started = time.perf_counter()
                with open(paths[k], "wb") as fh:
                    fh.write(data)
                if not store.wait_for_hash(ids[k], expected, timeout=30):
                    raise RuntimeError(f"edit {n} of {paths[k]} never reached the store")
                latencies.append(time.perf_counter() - started)
            tracker.idle(timeout=120)

            progress(f"idle for {idle_seconds:g} s")
            cpu_before, wall_before = _cpu_seconds(), time.monotonic()
            time.sleep(idle_seconds)
            cpu = _cpu_seconds() - cpu_before
            wall = time.monotonic() - wall_before
            failures = tracker.failures()
            if failures:
                raise RuntimeError(f"the tracker failed: {failures[0].error!r}")
        finally:
            service.close()
    return {
        "latency_ms": {
            "p50": round(percentile(latencies, 50) * 1000, 1),
            "p95": round(percentile(latencies, 95) * 1000, 1),
            "max": round(max(latencies) * 1000, 1),
        },
        "edits": edits,
        "watched_files": watched,
        "idle_cpu_percent": round(cpu / wall * 100, 3),
    }
