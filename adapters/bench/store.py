"""``selfctx bench store``: the in-memory store against a real XTDB node, in one run.

* **Per turn** (``per_turn_ms``, ``bytes_per_turn``): ``selfctx bench core``'s session and turn
  (``selfctx.adapters.bench.core``) at each size. A session is filled once, on the in-memory store,
  then copied into a fresh XTDB node of its own (the latest version of every document, in large
  transactions: filling 10,000 objects one command at a time over HTTP would take longer than
  everything measured), and resumed there. The same turns then run on both stores. Both services
  use the ``ssot`` layout policy, so that the figures compare stores, not layout policies.
* **Resume** (``resume_s``) of the largest session on XTDB, by a fresh client: ``batch`` is
  ``ContextService.resume_session`` as it is (one query loads every object of the index), the
  median of three after a first one on the fresh node (reported on stderr, not counted);
  ``one_by_one`` is the same resume through a store whose ``get_many`` asks for one object at a
  time, as a client without the batch query would.
* **Index** (``index``): every ``.py`` file of this interpreter's standard library, read from disk
  and indexed into XTDB through ``ContextService.index_files`` (on the largest size's node, after
  its turns: a node that has been running), against the rate of reading the same files and taking
  their SHA-256 (warm page cache for both). The tree is indexed :data:`INDEX_PASSES` times, each
  time as the files of another filesystem, so every pass writes every file as a new object:
  ``files_per_s`` is the first pass, ``passes_files_per_s`` every pass (the node's JIT compiler
  is still at work on the first ones).

The nodes run the production configuration (``rocksdb``: tx-log and documents fsynced on every
commit) unless told otherwise, each in a temporary directory removed at the end.
"""

from __future__ import annotations

import hashlib
import os
import statistics
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from selfctx.adapters.bench.core import (
    SESSION,
    SIZES,
    fill_session,
    measure_turns,
    turns_for_two_snapshots,
)
from selfctx.adapters.bench.stats import summary_ms
from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.memory import MemoryStore
from selfctx.adapters.xtdb import XtdbNode, open_store
from selfctx.adapters.xtdb.node import ConfigName
from selfctx.application.ports.store import Document, ObjectStore
from selfctx.application.service import ContextService
from selfctx.application.settings import Settings

__all__ = ["copy_latest", "run_store_bench", "stdlib_sources"]

_TYPES = ("system_prompt", "session", "chat", "session_log", "file", "toolcall")
_COPY_BYTES = 4 * 1024 * 1024
_HOST = "bench-host"
"""The filesystem the bench session's files live on (core's fill indexes them there)."""
_ELSEWHERE = "bench-elsewhere"
"""The resuming clients' host: the session's sources are unreachable from it, so a resume
reconciles nothing (it would otherwise record the made-up files as deleted)."""

Progress = Callable[[str], None]


def copy_latest(source: ObjectStore, target: ObjectStore, types: Iterable[str] = _TYPES) -> int:
    """Commit the latest version of every document of ``types`` from ``source`` into ``target``,
    in transactions of about 4 MB; returns how many documents were copied."""
    copied = 0
    batch: list[Document] = []
    size = 0
    for doc_type in types:
        ids = source.ids_of_type(doc_type)
        for start in range(0, len(ids), 1000):
            for doc in source.get_many(ids[start : start + 1000]).values():
                batch.append(doc)
                size += len(str(doc))
                if size >= _COPY_BYTES:
                    target.commit(batch)
                    copied += len(batch)
                    batch, size = [], 0
    if batch:
        target.commit(batch)
        copied += len(batch)
    return copied


class _OneByOne(ObjectStore):
    """A store whose ``get_many`` is one ``get`` per id (what resume costs without the batch)."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner

    def get(self, object_id: str) -> Document | None:
        return self.inner.get(object_id)

    def get_many(self, object_ids: Iterable[str]) -> dict[str, Document]:
        found = {i: self.inner.get(i) for i in object_ids}
        return {i: doc for i, doc in found.items() if doc is not None}

    def commit(self, puts: Any, expect: Any = ()) -> Any:
        return self.inner.commit(puts, expect)

    def history(self, object_id: str) -> Any:
        return self.inner.history(object_id)

    def get_as_of(self, object_id: str, tx_id: int) -> Any:
        return self.inner.get_as_of(object_id, tx_id)

    def get_many_as_of(self, object_ids: Iterable[str], tx_id: int) -> Any:
        return self.inner.get_many_as_of(object_ids, tx_id)

    def session_log(self, session_id: str, after_seq: int = 0) -> Any:
        return self.inner.session_log(session_id, after_seq)

    def ids_of_type(self, doc_type: str) -> Any:
        return self.inner.ids_of_type(doc_type)

    def latest_tx(self) -> Any:
        return self.inner.latest_tx()

    def changes(self, after_tx_id: int | None = None, limit: int = 500) -> Any:
        return self.inner.changes(after_tx_id, limit)


@contextmanager
def _node(config: ConfigName, root: Path, name: str) -> Iterator[XtdbNode]:
    data = root / name
    node = XtdbNode(config, data if config != "memory" else None, run_dir=data / "run")
    with node:
        yield node


def _service(store: ObjectStore, host: str, workspace: str = "/") -> ContextService:
    return build_service(store=store, workspace=workspace, host_id=host, settings=Settings())


def _resume_seconds(url: str, one_by_one: bool) -> float:
    store = open_store(url, timeout=300.0)
    try:
        service = _service(_OneByOne(store) if one_by_one else store, _ELSEWHERE)
        began = time.perf_counter()
        service.resume_session(SESSION)
        seconds = time.perf_counter() - began
        assert len(service.state(SESSION).index) > 0
        return seconds
    finally:
        store.close()


def _size(
    size: int,
    config: ConfigName,
    root: Path,
    last: bool,
    files: Sequence[Path],
    progress: Progress,
) -> dict[str, Any]:
    memory = MemoryStore()
    in_memory = _service(memory, _HOST)
    progress(f"filling a session with {size} objects")
    fill_session(in_memory, size)
    turns = turns_for_two_snapshots(memory)
    out: dict[str, Any] = {}
    with _node(config, root, f"node-{size}") as node:
        store = open_store(node.url, timeout=300.0)
        try:
            progress(f"copying it into a {config} XTDB node")
            copy_latest(memory, store)
            if last:
                cold = _resume_seconds(node.url, False)
                progress(f"resumed {size} objects once, {cold:.3f} s on a fresh node;")
                progress("resuming 3 more times (batch), then once one by one")
                out["resume_s"] = {
                    "batch": round(
                        statistics.median(_resume_seconds(node.url, False) for _ in range(3)), 3
                    ),
                    "one_by_one": round(_resume_seconds(node.url, True), 3),
                }
            progress(f"measuring {turns} turns at {size} objects, in memory")
            durations, _ = measure_turns(in_memory, lambda: memory.bytes_received, turns)
            out["memory"] = summary_ms(durations)
            on_node = _service(store, _ELSEWHERE)
            on_node.resume_session(SESSION)
            progress(f"measuring {turns} turns at {size} objects, on XTDB")
            durations, per_turn = measure_turns(on_node, lambda: store.bytes_sent, turns)
            out["xtdb"] = summary_ms(durations)
            out["bytes"] = round(per_turn, 1)
            if last:  # on this node, warm as a node that has been running for a while is
                out["index"] = _index(files, store, progress)
        finally:
            store.close()
    return out


def stdlib_sources() -> list[Path]:
    """Every ``.py`` file of this interpreter's standard library (installed packages excluded),
    in a stable order."""
    root = Path(sysconfig.get_paths()["stdlib"]).resolve()
    skip = {"site-packages", "dist-packages", "__pycache__"}
    return sorted(p for p in root.rglob("*.py") if p.is_file() and not skip.intersection(p.parts))


def _raw_rate(files: Sequence[Path]) -> float:
    """MB/s of reading each file and taking its SHA-256."""
    began = time.perf_counter()
    total = 0
    for path in files:
        data = path.read_bytes()
        hashlib.sha256(data).digest()
        total += len(data)
    return total / 1e6 / (time.perf_counter() - began)


INDEX_PASSES = 3
"""How many times the tree is indexed, each time as another filesystem's files (new objects)."""


def _index(files: Sequence[Path], store: ObjectStore, progress: Progress) -> dict[str, Any]:
    total = sum(p.stat().st_size for p in files)
    _raw_rate(files)  # warm the page cache for both figures
    raw = _raw_rate(files)
    common = os.path.commonpath([str(p) for p in files]) if files else "/"
    rates = []
    for n in range(INDEX_PASSES):
        # Another filesystem id each pass: the same files are new objects, all written again.
        service = _service(store, f"bench-stdlib-{n}", workspace=common)
        service.start_session(f"bench-index-{n}")
        progress(f"indexing {len(files)} files ({total / 1e6:.1f} MB) into XTDB, pass {n + 1}")
        began = time.perf_counter()
        results = service.index_files(f"bench-index-{n}", [str(p) for p in files])
        seconds = time.perf_counter() - began
        assert len(results) == len(files)
        rates.append(len(files) / seconds)
    return {
        "files": len(files),
        "files_per_s": round(rates[0], 1),
        "mb_per_s": round(total / 1e6 * rates[0] / len(files), 2) if files else 0.0,
        "raw_read_sha256_mb_per_s": round(raw, 1),
        "passes_files_per_s": [round(rate, 1) for rate in rates],
    }


def run_store_bench(
    sizes: Sequence[int] = SIZES,
    *,
    config: ConfigName = "rocksdb",
    index_files: Sequence[Path] | None = None,
    progress: Progress = lambda _: None,
) -> dict[str, Any]:
    """Measure everything; returns the JSON shape of ``selfctx bench store --json``."""
    per_turn: dict[str, dict[str, Any]] = {"memory": {}, "xtdb": {}}
    bytes_per_turn: dict[str, float] = {}
    files = stdlib_sources() if index_files is None else list(index_files)
    last: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="selfctx-bench-store-") as tmp:
        for size in sizes:
            figures = _size(size, config, Path(tmp), size == max(sizes), files, progress)
            per_turn["memory"][str(size)] = figures["memory"]
            per_turn["xtdb"][str(size)] = figures["xtdb"]
            bytes_per_turn[str(size)] = figures["bytes"]
            last = figures if size == max(sizes) else last
    resume, index = last["resume_s"], last["index"]
    return {
        "per_turn_ms": per_turn,
        "bytes_per_turn": {"xtdb": bytes_per_turn},
        "resume_s": resume,
        "index": index,
    }
