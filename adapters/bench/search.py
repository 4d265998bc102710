"""``selfctx bench search``: how fast the search index is built and answers, over a large store.

The corpus is written through the service as harnesses would write it, into the in-memory store:

* the development trajectories, when present, each ingested as its session (its messages, tool
  outputs and the files it read);
* the standard library's Python files, read by simulated agent sessions (one per top-level
  module or package): each file is read whole (a file version), then every function and class in
  it is read again with ``sed -n A,Bp`` (a tool output) after an assistant message saying so,
  until the corpus holds the number of objects asked for.

Then a fresh index is built from the store (``index_per_s``: searchable objects per second,
catch-up included) and timed queries run against it: words and two-word queries drawn from the
corpus itself, each within one session (what the model's tool does) or over the whole store (the
CLI without ``--session``). Only the queries are timed for ``query_ms``.
"""

from __future__ import annotations

import ast
import random
import re
import sysconfig
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from selfctx.adapters.bench.stats import percentile
from selfctx.adapters.harness.session import HarnessSession
from selfctx.adapters.harness.trajectories import Trajectory
from selfctx.adapters.search import SqliteSearchIndex
from selfctx.application.policies import policy_by_name
from selfctx.application.ports.search import SearchQuery
from selfctx.application.service import ContextService
from selfctx.application.usecases.search import SearchHistory
from selfctx.domain.chat import AssistantMessage, ToolCallRequest, ToolResult, UserMessage

__all__ = ["DEFAULT_OBJECTS", "run_search_bench", "stdlib_files"]

DEFAULT_OBJECTS = 100_000
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{3,30}")


def stdlib_files() -> list[Path]:
    """The standard library's ``.py`` files (not site-packages), in a fixed order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts and p.is_file())


def _definitions(text: str) -> list[tuple[str, int, int]]:
    """``(name, first line, last line)`` of every function and class in a module."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.append((node.name, node.lineno, node.end_lineno or node.lineno))
    return sorted(out, key=lambda d: d[1])


def _group(path: Path, root: Path) -> str:
    """The session a stdlib file is read in: its top-level module or package."""
    first = path.relative_to(root).parts[0]
    return re.sub(r"[^A-Za-z0-9._-]", "_", first.removesuffix(".py")) or "root"


class _Corpus:
    """Writes the corpus through a service and counts what it wrote."""

    def __init__(self, service: ContextService, target: int) -> None:
        self.service = service
        self.target = target
        self.objects = 0
        self.sessions: list[str] = []
        self.calls = 0

    @property
    def full(self) -> bool:
        return self.objects >= self.target

    def trajectories(self, trajectories: list[Trajectory]) -> None:
        for n, trajectory in enumerate(trajectories):
            if self.full:
                return
            sid = f"traj-{n}"
            harness = HarnessSession(
                self.service,
                sid,
                "openai",
                cwd=trajectory.cwd,
                roots=[trajectory.workspace],
                policy=policy_by_name("ssot"),
            )
            harness.ingest(list(trajectory.messages))
            self.sessions.append(sid)
            self.objects += _searchable(self.service, sid)

    def stdlib(self, files: list[Path], root: Path) -> None:
        opened: set[str] = set()
        for path in files:
            if self.full:
                return
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            sid = f"stdlib-{_group(path, root)}"
            if sid not in opened:
                self.service.start_session(sid, "You read the standard library.", policy=_POLICY)
                self.service.record_user_message(sid, f"Read through {path.parent.name}.")
                self.objects += 1
                opened.add(sid)
                self.sessions.append(sid)
            self.service.index_file(sid, str(path), text)
            self.objects += 1
            lines = text.splitlines()
            for name, first, last in _definitions(text):
                if self.full:
                    return
                self.calls += 1
                call_id = f"sed-{self.calls}"
                command = f"sed -n {first},{last}p {path}"
                request = ToolCallRequest(call_id, "bash", {"command": command})
                self.service.record_assistant_message(
                    sid, f"Let me read {name} in {path.name}.", [request]
                )
                self.service.record_tool_call(
                    sid,
                    call_id,
                    tool="bash",
                    args={"command": command},
                    output="\n".join(lines[first - 1 : last]),
                )
                self.objects += 2


_POLICY = policy_by_name("ssot")


def _searchable(service: ContextService, session_id: str) -> int:
    """What a session adds to the index: its user and assistant messages, its tool outputs,
    and the files it read (a stub has nothing to search)."""
    state = service.state(session_id)
    count = 0
    for turn in state.turns:
        for message in turn.messages:
            spoken = isinstance(message, AssistantMessage) and (message.text or message.tool_calls)
            count += bool(spoken or isinstance(message, UserMessage | ToolResult))
    for object_id, kind in state.kinds.items():
        if kind == "file" and service.object(session_id, object_id).content is not None:
            count += 1
    return count


def _queries(index: SqliteSearchIndex, sessions: list[str], count: int) -> Iterator[SearchQuery]:
    """Queries drawn from the corpus: a word, or two, from a random searchable text; within the
    session it came from (three in four) or over the whole store."""
    rng = random.Random(17)
    total = index.count()
    for _ in range(count):
        row_id = rng.randint(1, total)
        body, session = index.sample(row_id)
        words = _WORD.findall(body[:4000]) or ["def"]
        text = " ".join(rng.sample(words, k=min(len(words), rng.choice((1, 1, 2)))))
        scoped = session if session is not None and rng.random() < 0.75 else None
        if scoped is None and rng.random() < 0.75:
            scoped = rng.choice(sessions)
        yield SearchQuery(text, session_id=scoped if rng.random() < 0.9 else None, limit=10)


def run_search_bench(
    make_service: Callable[[], ContextService],
    trajectories: list[Trajectory],
    *,
    objects: int = DEFAULT_OBJECTS,
    queries: int = 300,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Build the corpus, index it from scratch, time the queries; the figures as JSON."""
    service = make_service()
    corpus = _Corpus(service, objects)
    started = time.perf_counter()
    progress(f"writing {len(trajectories)} trajectories")
    corpus.trajectories(trajectories)
    root = Path(sysconfig.get_paths()["stdlib"])
    progress(f"writing the standard library's files until {objects} objects")
    corpus.stdlib(stdlib_files(), root)
    written = time.perf_counter() - started

    progress("building the index from the store")
    index = SqliteSearchIndex()
    history = SearchHistory(service.store, index)
    started = time.perf_counter()
    history.catch_up()
    indexed = time.perf_counter() - started
    searchable = index.count()

    progress(f"{queries} queries")
    timings: list[float] = []
    hits = 0
    for query in _queries(index, corpus.sessions, queries):
        started = time.perf_counter()
        found = history(query)
        timings.append(time.perf_counter() - started)
        hits += len(found)
    index.close()
    return {
        "objects": searchable,
        "index_per_s": round(searchable / indexed),
        "query_ms": {
            "p50": round(percentile(timings, 50) * 1000, 3),
            "p95": round(percentile(timings, 95) * 1000, 3),
            "max": round(max(timings) * 1000, 3),
        },
        "index_seconds": round(indexed, 2),
        "write_seconds": round(written, 2),
        "sessions": len(corpus.sessions),
        "trajectories": len(trajectories),
        "queries": queries,
        "mean_hits": round(hits / max(1, queries), 2),
    }
