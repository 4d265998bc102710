"""Four agents, four OS processes, one node: each a ``ContextService`` with a session of its own,
indexing and re-indexing the same 100 real files (read from disk) while the test changes some of
them between passes.

Afterwards: exactly 100 file objects exist for those files; each holds exactly the history of its
real changes (one version per change, none from four agents writing the same content at once);
every change was reported as written by exactly one agent; and no session sees another's sets,
nor may use another's tool calls.
"""

from __future__ import annotations

import multiprocessing
import queue
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.xtdb import XtdbNode, XtdbStore, open_store
from selfctx.application.settings import Settings
from tests.support import file_id
from tests.xtdb import clients

pytestmark = [pytest.mark.xtdb, pytest.mark.slow]

AGENTS = 4
FILES = 100
ROOT = Path(__file__).parents[2]


def contents_by_pass() -> list[dict[int, str]]:
    """What file ``i`` holds during each pass."""
    first = {i: f"# file {i}\nvalue = {i}\n" for i in range(FILES)}
    second = dict(first)
    for i in range(0, 30):
        second[i] = f"# file {i}, second edition\nvalue = {i * 2}\n"
    third = dict(second)
    for i in range(20, 40):
        third[i] = f"# file {i}, third edition\nvalue = {i * 3}\n"
    for i in range(40, 45):
        third[i] = second[i]  # rewritten with the same bytes: not a change
    for i in range(45, 50):
        second[i] = f"# file {i}, briefly changed\n"
        third[i] = first[i]  # changed, then changed back: two real changes
    return [first, second, third]


def expected_history(i: int, passes: list[dict[int, str]]) -> list[str]:
    history: list[str] = []
    for contents in passes:
        if not history or history[-1] != contents[i]:
            history.append(contents[i])
    return history


@pytest.fixture
def store(xtdb_node: XtdbNode) -> Iterator[XtdbStore]:
    store = open_store(xtdb_node.url, timeout=60.0)
    yield store
    store.close()


def test_four_agents_share_files_and_keep_their_sessions_apart(
    xtdb_node: XtdbNode,
    store: XtdbStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ns = f"t{uuid.uuid4().hex[:8]}"
    host_id = f"{ns}-host"
    workspace = tmp_path / "ws"
    passes = contents_by_pass()
    paths = [workspace / f"pkg{i % 10}" / f"module_{i}.py" for i in range(FILES)]
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)

    def write(n: int) -> None:
        for i, path in enumerate(paths):
            path.write_text(passes[n][i])

    write(0)
    sessions = [f"{ns}-agent-{k}" for k in range(AGENTS)]
    calls = {s: [f"{s}-call-{n}" for n in range(clients.PASSES)] for s in sessions}
    monkeypatch.syspath_prepend(str(ROOT))  # the spawned children import tests.xtdb.clients
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(AGENTS + 1)
    results = context.Queue()
    processes = [
        context.Process(
            target=clients.agent,
            args=(
                xtdb_node.url,
                host_id,
                str(workspace),
                session,
                [str(p) for p in paths],
                calls,
                barrier,
                results,
            ),
            name=session,
        )
        for session in sessions
    ]
    reports: dict[str, dict[str, Any]] = {}
    try:
        for process in processes:
            process.start()
        for n in range(1, clients.PASSES + 1):
            barrier.wait(timeout=300)  # every agent has finished pass n - 1
            if n < clients.PASSES:
                write(n)
            barrier.wait(timeout=300)
        for _ in sessions:
            session, report = results.get(timeout=300)
            reports[session] = report
        for process in processes:
            process.join(timeout=60)
    except BaseException:
        while True:  # say why, if a child did
            try:
                session, report = results.get_nowait()
            except queue.Empty:
                break
            reports[session] = report
        raise AssertionError(f"agents failed: {reports}") from None
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
            process.join()
        results.close()
    assert [p.exitcode for p in processes] == [0] * AGENTS, reports

    file_ids = [file_id(host_id, str(p)) for p in paths]
    # Exactly 100 file objects on this filesystem, whatever else the shared node holds.
    ours = [
        doc["xt/id"]
        for doc in store.get_many(store.ids_of_type("file")).values()
        if isinstance(source := doc.get("source"), dict)  # others' docs may lack one
        and source.get("filesystemId") == host_id
    ]
    assert sorted(ours) == sorted(file_ids)
    # Each file's history is its real changes: no version from identical concurrent writes.
    for i, object_id in enumerate(file_ids):
        history = [v.document["content"] for v in store.history(object_id)]
        assert history == expected_history(i, passes), paths[i]

    # Every change was written by exactly one agent; the others found it done (unchanged).
    for n in range(clients.PASSES):
        for i, path in enumerate(paths):
            seen = sorted(reports[s]["outcomes"][n][str(path)] for s in sessions)
            changed = n == 0 or passes[n][i] != passes[n - 1][i]
            writer = ["created" if n == 0 else "updated"] if changed else []
            assert seen == sorted(writer + ["unchanged"] * (AGENTS - len(writer))), (n, path)

    own_calls = {s: set(calls[s]) for s in sessions}
    for session in sessions:
        report = reports[session]
        assert set(report["index"]) == set(file_ids) | own_calls[session]
        assert len(report["index"]) == FILES + clients.PASSES
        assert set(report["pool"]) == set(report["index"])
        assert set(report["active"]) <= set(report["index"])
        assert set(report["refused"].values()) == {"UnknownObject"}, report["refused"]
        assert len(report["refused"]) == 2 * (AGENTS - 1) * clients.PASSES

    # What the store holds agrees: each session resumed by a fresh client has only its own sets.
    reader = build_service(
        store=store,
        workspace=str(workspace),
        host_id=f"{ns}-elsewhere",
        settings=Settings(policy="ssot"),
    )
    for session in sessions:
        reader.resume_session(session)
        state = reader.state(session)
        assert list(state.index) == reports[session]["index"]
        assert reader.log_position(session) == reports[session]["log"] + 1  # the resume
