"""kill -9 of the client at 20 random points of a replayed session, on a real node.

A client process (``python -m tests.xtdb.clients replay``) carries a recorded trajectory into a
session; the test kills it with SIGKILL at 20 random points spread over the replay — half the
time from outside, as soon as the client reports the acknowledgement of the chosen command, half
the time by the client's own hand around a random HTTP request after it (before sending it, or
once its answer has arrived) — and starts a new one, which resumes the session and carries on.
After every kill:

* every commit the store acknowledged is there, each document exactly as sent;
* no command is half-applied: every object version a log entry names exists, and every version of
  the session's objects is named by a log entry (no tracker runs, so there are no watcher writes);
* the log is the uninterrupted replay's log (the same commands with the same events, in order)
  cut somewhere, apart from the resumes themselves, so the state rebuilt from it is the state
  after a prefix of the replay's commands; every command in it was acknowledged, except at most
  the last commit each killed client wrote (committed, its acknowledgement lost with the client).

At the end the last client replays to the end, and the session — its log, its state and the
context it assembles — equals the uninterrupted replay's.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from selfctx.adapters.harness.trajectories import default_directory, load
from selfctx.adapters.memory import MemoryStore
from selfctx.adapters.xtdb import XtdbNode, XtdbStore, open_store
from selfctx.application.persistence import decode_events, entry_events
from selfctx.application.ports.store import Document, Expect, Receipt
from selfctx.domain.session.machine import fold
from selfctx.domain.session.state import SessionState
from tests.support import WrappedStore
from tests.xtdb.clients import carry_on, doc_digest, replay_service

pytestmark = [pytest.mark.xtdb, pytest.mark.slow]

ROOT = Path(__file__).parents[2]
KILLS = 20


def trajectory_file() -> Path:
    """A real trajectory when the development set is there, else the example session."""
    directory = default_directory()
    real = directory / "mini-swe-agent" / "sqlfluff__sqlfluff-2419.traj.json" if directory else None
    if real is not None and real.is_file():
        return real
    return ROOT / "adapters" / "cli" / "sample_session.json"


class CountingStore(WrappedStore):
    """Counts the HTTP requests the same calls would make to a node (a commit makes three)."""

    requests = 0

    def get(self, object_id: str) -> Document | None:
        self.requests += 1
        return super().get(object_id)

    def get_many(self, object_ids: Iterable[str]) -> dict[str, Document]:
        self.requests += 1
        return super().get_many(object_ids)

    def session_log(self, session_id: str, after_seq: int = 0) -> list[Document]:
        self.requests += 1
        return super().session_log(session_id, after_seq)

    def commit(self, puts: Sequence[Document], expect: Sequence[Expect] = ()) -> Receipt:
        self.requests += 3
        return super().commit(puts, expect)


@pytest.fixture
def store(xtdb_node: XtdbNode) -> Iterator[XtdbStore]:
    store = open_store(xtdb_node.url, timeout=30.0)
    yield store
    store.close()


def entries_of(store: Any, session: str) -> list[tuple[str, list[Any]]]:
    return [(e["command"], entry_events(e)) for e in store.session_log(session)]


def state_of(entries: list[tuple[str, list[Any]]]) -> SessionState:
    return fold(itertools.chain.from_iterable(decode_events(events) for _, events in entries))


class Checker:
    """What the node holds for the session, checked after each kill."""

    def __init__(self, store: XtdbStore, session: str, objects: Sequence[str]) -> None:
        self.store = store
        self.session = session
        self.objects = objects
        """Every object the replay writes (its files, tool calls and system prompt)."""
        self.checked_acks = 0

    def acknowledged(self, acks: Path) -> list[dict[str, Any]]:
        return [json.loads(line) for line in acks.read_text().splitlines()]

    def versions(self, object_id: str) -> set[str]:
        return {doc_digest(v.document) for v in self.store.history(object_id)}

    def object_hashes(self, object_id: str) -> set[str]:
        return {str(v.document.get("object_hash")) for v in self.store.history(object_id)}

    def check(self, acks: Path, reference: list[tuple[str, list[Any]]]) -> int:
        """All checks; returns how many of the reference's commands the log holds."""
        # The killed client may have submitted a transaction the node has not indexed yet.
        self.store.client.sync(wait=25.0, timeout=30.0)
        acked = self.acknowledged(acks)
        # Every acknowledged commit is there, document for document.
        for ack in acked[self.checked_acks :]:
            for object_id, digest in ack["docs"].items():
                assert digest in self.versions(object_id), (object_id, ack["tx"])
        self.checked_acks = len(acked)

        log = self.store.session_log(self.session)
        assert [e["seq"] for e in log] == list(range(1, len(log) + 1))
        named: set[tuple[str, str]] = set()
        for entry in log:
            for event in entry_events(entry):
                # SessionStarted names the system prompt's first version as system_prompt_id.
                object_id = event.get("object_id", event.get("system_prompt_id"))
                if object_id is not None and "object_hash" in event:
                    named.add((object_id, event["object_hash"]))
        # Every version a log entry names exists ...
        for object_id in {i for i, _ in named}:
            wanted = {h for i, h in named if i == object_id}
            assert wanted <= self.object_hashes(object_id), object_id
        # ... and every version of the session's objects is named by a log entry.
        for object_id in self.objects:
            for object_hash in self.object_hashes(object_id):
                assert (object_id, object_hash) in named, (object_id, object_hash)

        # The log is the uninterrupted replay's, cut after the acknowledged commands (or one
        # more: committed, unacknowledged), resumes aside.
        commands = [(c, ev) for c, ev in entries_of(self.store, self.session) if c != "Resume"]
        done = len(commands)
        assert commands == reference[:done]
        resumes = sum(1 for e in log if e["command"] == "Resume")
        acked_seqs = {
            int(entry_id.rsplit(":", 1)[1])
            for ack in acked
            for entry_id in ack["entries"]
            if entry_id.startswith(f"log:{self.session}:")
        }
        # Commands committed without their acknowledgement are the last commit a killed client
        # wrote (one ingest's commands, decision 0077): only unacknowledged ones follow them
        # until the log ends or the next client's resume.
        for n, entry in enumerate(log):
            if entry["seq"] not in acked_seqs:
                later = log[n + 1 :]
                upto = next((k for k, e in enumerate(later) if e["command"] == "Resume"), None)
                assert all(e["seq"] not in acked_seqs for e in later[:upto]), entry["seq"]
        assert state_of(entries_of(self.store, self.session)) == state_of(reference[:done])
        assert done + resumes == len(log)
        return done


def test_kill_9_at_random_points_loses_no_acknowledged_command(
    xtdb_node: XtdbNode, store: XtdbStore, tmp_path: Path
) -> None:
    # A failure names its seed; CRASH_TEST_SEED=<seed> replays the same kill points.
    seed = int(os.environ.get("CRASH_TEST_SEED") or random.randrange(2**32))
    rng = random.Random(seed)
    ns = f"t{uuid.uuid4().hex[:8]}"
    session, filesystem = f"{ns}-crash", f"{ns}:replay"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    path = trajectory_file()
    trajectory = load(path)[0]

    # The uninterrupted replay, with the same ids, on the in-memory store.
    counting = CountingStore(MemoryStore())
    reference_service = replay_service(counting, str(workspace), filesystem)
    carry_on(trajectory, reference_service, session)
    reference = entries_of(counting, session)
    requests, commits = counting.requests, counting.commits

    acks = tmp_path / "acks.jsonl"
    acks.touch()
    objects = [
        *counting.inner.ids_of_type("file"),
        *counting.inner.ids_of_type("toolcall"),
        *counting.inner.ids_of_type("system_prompt"),
    ]
    checker = Checker(store, session, objects)

    def client(*extra: str) -> subprocess.Popen[str]:
        command = [sys.executable, "-m", "tests.xtdb.clients", "replay"]
        command += ["--url", xtdb_node.url, "--trajectory", str(path), "--session", session]
        command += ["--filesystem", filesystem, "--workspace", str(workspace)]
        command += ["--acks", str(acks), *extra]
        with open(tmp_path / "clients.log", "a") as log:
            return subprocess.Popen(
                command, cwd=ROOT, stdout=subprocess.PIPE, stderr=log, text=True
            )

    # Kill points spread over the whole replay: the n-th client dies once the log holds
    # cuts[n] of the replay's commands — at once from outside, or around a random request of the
    # commands that follow (a cut already passed: during the resume itself).
    cuts = sorted(rng.sample(range(1, len(reference) - 1), KILLS))
    per_command = max(1, requests // max(1, commits))
    kills: list[tuple[str, int, int]] = []
    done = 0
    process = None
    try:
        for cut in cuts:
            if len(kills) % 2 == 0:  # by its own hand
                at = rng.randint(1, 2 * per_command)
                when = rng.choice(["before", "after"])
                arm = str(cut - done)
                process = client("--arm-after", arm, "--kill-at", str(at), "--kill-when", when)
                assert process.stdout is not None
                output = process.stdout.read()
                process.wait()
                kills.append((when, cut, process.returncode))
            else:  # from outside, as soon as it acknowledged the cut's command
                process = client()
                assert process.stdout is not None
                seen = done
                for line in process.stdout:
                    seen += line.startswith("ack") and not line.startswith("ack Resume")
                    if seen >= cut:
                        os.kill(process.pid, signal.SIGKILL)
                        break
                output = f"seen {seen}: " + process.stdout.read()
                process.wait()
                kills.append(("outside", cut, process.returncode))
            if kills[-1][0] != "outside" and process.returncode == 0 and output.endswith("done\n"):
                break  # its kill point lay past the replay's last request: the replay is whole
            assert process.returncode == -signal.SIGKILL, (seed, kills, done, output)
            done = checker.check(acks, reference)
        assert sum(k[2] == -signal.SIGKILL for k in kills) >= KILLS // 2, (seed, kills)
        process = client()
        assert process.stdout is not None
        assert process.stdout.read().endswith("done\n")
        assert process.wait() == 0
    finally:
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    assert checker.check(acks, reference) == len(reference), (seed, kills)
    # The session as the uninterrupted replay left it: log, state and context.
    assert [(c, ev) for c, ev in entries_of(store, session) if c != "Resume"] == reference
    resumed = replay_service(store, str(workspace), filesystem)
    resumed.resume_session(session)
    assert resumed.state(session) == reference_service.state(session)
    assert resumed.assemble(session) == reference_service.assemble(session)
