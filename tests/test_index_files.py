"""``ContextService.index_files``: many agent reads committed in batches, on every store kind.

Indexing a batch must leave exactly what indexing each file on its own would leave (sets, object
versions, outcomes), with one log entry per batch instead of one per file.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from selfctx.application.ports.files import SourceMissing
from selfctx.application.ports.store import Receipt, StoreUnavailable, Submission
from selfctx.application.runner import SessionRunner
from selfctx.application.service import ContextService
from selfctx.application.usecases import files as files_usecase
from selfctx.domain.errors import InvalidInput
from selfctx.domain.hashing import content_hash
from selfctx.domain.indexing import Outcome
from selfctx.domain.mounts import MountTable
from selfctx.domain.objects import FileObject
from selfctx.domain.session import commands as c
from selfctx.domain.session.machine import decide
from selfctx.domain.session.state import SessionState
from tests.conftest import MakeService, StoreFactory, profile_max_examples
from tests.support import (
    CountingClock,
    CountingIds,
    FakeFileReader,
    StoreProbe,
    WrappedStore,
    compose_service,
    file_id,
)

PATHS = ["/p/a.py", "/p/b.md", "/p/sub/c.txt"]


@pytest.fixture
def sid(ns: str, service: ContextService) -> str:
    session_id = f"{ns}batch"
    service.start_session(session_id, "prompt")
    return session_id


def write_all(files: FakeFileReader) -> None:
    for n, path in enumerate(PATHS):
        files.write(path, f"content {n}\n")


def sets(state: SessionState) -> tuple[object, ...]:
    return (list(state.index), state.pool, state.active, state.pinned, state.auto_active)


def test_a_batch_leaves_what_one_read_per_file_leaves(
    make_service: MakeService, files: FakeFileReader, ns: str, host_id: str
) -> None:
    write_all(files)
    batch, single = make_service(), make_service()
    batch.start_session(f"{ns}batch")
    single.start_session(f"{ns}single")
    start = batch.log_position(f"{ns}batch")

    results = batch.index_files(f"{ns}batch", PATHS)
    for path in PATHS:
        single.index_file(f"{ns}single", path)

    ids = [file_id(host_id, path) for path in PATHS]
    assert [(r.object_id, r.outcome, r.path) for r in results] == [
        (i, Outcome.CREATED, p) for i, p in zip(ids, PATHS, strict=True)
    ]
    assert sets(batch.state(f"{ns}batch")) == sets(single.state(f"{ns}single"))
    assert batch.log_position(f"{ns}batch") == start + 1  # one log entry for the batch
    # The files are shared objects: the second session's reads found them unchanged.
    for object_id in ids:
        assert len(batch.history(object_id)) == 1
        assert batch.object(f"{ns}batch", object_id) == single.object(f"{ns}single", object_id)


def test_only_changed_files_get_versions(
    service: ContextService, sid: str, files: FakeFileReader, host_id: str
) -> None:
    write_all(files)
    service.index_files(sid, PATHS)
    files.write("/p/b.md", "changed\n")

    results = service.index_files(sid, [*PATHS, "/p/b.md"])

    assert [r.outcome for r in results] == [
        Outcome.UNCHANGED,
        Outcome.UPDATED,
        Outcome.UNCHANGED,
        Outcome.UNCHANGED,  # a path named twice is read once
    ]
    contents = [v.document["content"] for v in service.history(file_id(host_id, "/p/b.md"))]
    assert contents == ["content 1\n", "changed\n"]
    assert len(service.history(file_id(host_id, "/p/a.py"))) == 1


def test_an_unchanged_active_batch_writes_nothing(
    service: ContextService, sid: str, files: FakeFileReader, store: WrappedStore
) -> None:
    write_all(files)
    service.index_files(sid, PATHS)
    probe, seq = StoreProbe.of(store), service.log_position(sid)
    assert {r.outcome for r in service.index_files(sid, PATHS)} == {Outcome.UNCHANGED}
    assert (StoreProbe.of(store), service.log_position(sid)) == (probe, seq)


def test_a_deactivated_file_in_a_batch_is_activated_again(
    service: ContextService, sid: str, files: FakeFileReader, host_id: str
) -> None:
    write_all(files)
    service.index_files(sid, PATHS)
    service.deactivate(sid, file_id(host_id, "/p/a.py"))
    service.index_files(sid, PATHS)
    assert file_id(host_id, "/p/a.py") in service.state(sid).active


def test_a_missing_source_refuses_the_batch_and_writes_nothing(
    service: ContextService, sid: str, files: FakeFileReader, store: WrappedStore
) -> None:
    write_all(files)
    state, probe = service.state(sid), StoreProbe.of(store)
    with pytest.raises(SourceMissing):
        service.index_files(sid, [*PATHS, "/p/never-written.py"])
    assert (service.state(sid), StoreProbe.of(store)) == (state, probe)


def test_no_tool_call_can_take_a_files_id_so_every_reader_reads_it(
    service: ContextService, sid: str, files: FakeFileReader, store: WrappedStore, host_id: str
) -> None:
    # A file's id has a form no toolcall id may have (decision 0030): the attempt is refused,
    # nothing is written, and the file is read as ever, whichever way.
    write_all(files)
    state, probe = service.state(sid), StoreProbe.of(store)
    with pytest.raises(InvalidInput, match="longer than 40"):
        service.record_tool_call(
            sid, file_id(host_id, "/p/a.py"), tool="bash", args={}, output="not a file"
        )
    assert (service.state(sid), StoreProbe.of(store)) == (state, probe)
    assert service.index_file(sid, "/p/a.py").object_id == file_id(host_id, "/p/a.py")
    service.index_files(sid, PATHS)
    service.discover(sid, ["/p/b.md", "/p/a.py"])


def test_batches_are_bounded(
    service: ContextService,
    sid: str,
    files: FakeFileReader,
    store: WrappedStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(files_usecase, "BATCH_FILES", 2)
    paths = [f"/p/f{n}.txt" for n in range(5)]
    for path in paths:
        files.write(path, path)
    seq, commits = service.log_position(sid), store.commits
    assert len(service.index_files(sid, paths)) == 5
    assert service.log_position(sid) == seq + 3
    assert store.commits == commits + 3
    assert len(service.state(sid).index) == 5


def test_a_single_path_string_is_refused(service: ContextService, sid: str) -> None:
    with pytest.raises(InvalidInput):
        service.index_files(sid, "/p/a.py")


def test_a_batch_of_reads_takes_agent_reads_only(
    service: ContextService, sid: str, files: FakeFileReader, host_id: str
) -> None:
    files.write("/p/a.py", "x")
    service.index_file(sid, "/p/a.py")
    obj = service.object(sid, file_id(host_id, "/p/a.py"))
    assert isinstance(obj, FileObject)
    with pytest.raises(ValueError):
        decide(service.state(sid), c.IndexFiles((c.IndexFile(obj, None, "watcher"),)))


# -- pipelining: batch n+1 is read and decided while batch n is committed ---------------------


def many(files: FakeFileReader, n: int) -> list[str]:
    paths = [f"/p/f{k}.txt" for k in range(n)]
    for path in paths:
        files.write(path, f"{path}\n")
    return paths


def on_submission(store: WrappedStore, number: int, action: Callable[[], None]) -> None:
    """Run ``action`` just before the ``number``-th submission from now reaches the store."""

    def hook(left: int) -> None:
        if left == 1:
            action()
        else:
            store.on_commit = lambda: hook(left - 1)

    store.on_commit = lambda: hook(number)


def log_seqs(store: WrappedStore, sid: str) -> list[int]:
    return [int(entry["seq"]) for entry in store.session_log(sid)]


class CountInFlight:
    """Wraps ``store.submit``: the most submissions handed out and not yet settled at once."""

    def __init__(self, store: WrappedStore) -> None:
        self.now = self.most = 0
        self._submit = store.submit
        store.submit = self  # type: ignore[method-assign]

    def __call__(self, puts: Any, expect: Any = ()) -> Submission:
        inner = self._submit(puts, expect)
        self.now += 1
        self.most = max(self.most, self.now)
        counter = self

        class Counted(Submission):
            settled = False

            def result(self) -> Receipt:
                if not self.settled:
                    self.settled = True
                    counter.now -= 1
                return inner.result()

        return Counted()


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files_usecase, "BATCH_FILES", 2)


@pytest.mark.usefixtures("small_batches")
def test_two_batches_are_in_flight_at_once_and_the_log_has_one_entry_each(
    service: ContextService, sid: str, files: FakeFileReader, store: WrappedStore
) -> None:
    paths = many(files, 7)
    counter, seq = CountInFlight(store), service.log_position(sid)
    results = service.index_files(sid, paths)
    assert [r.outcome for r in results] == [Outcome.CREATED] * 7
    assert counter.most == 2 and counter.now == 0
    assert service.log_position(sid) == seq + 4
    assert log_seqs(store, sid) == list(range(1, seq + 5))


@pytest.mark.usefixtures("small_batches")
def test_a_writer_that_appends_mid_pipeline_costs_a_retry_not_a_gap(
    make_service: MakeService, ns: str, files: FakeFileReader, store: WrappedStore, host_id: str
) -> None:
    sid = f"{ns}contended"
    service, other = make_service(), make_service()
    service.start_session(sid, "prompt")
    other.resume_session(sid)  # which appends to the log: service catches up on its next write
    service.record_user_message(sid, "index these")
    paths, seq = many(files, 8), service.log_position(sid)
    # Another agent's message lands between the first batch and the second: the second (and
    # the third, which requires the second's log entry) are refused and done again, then the
    # fourth, which was waiting to be sent.
    on_submission(store, 2, lambda: other.record_user_message(sid, "meanwhile"))

    results = service.index_files(sid, paths)

    assert [r.outcome for r in results] == [Outcome.CREATED] * 8
    assert service.log_position(sid) == seq + 5  # four batches and the message
    seqs = log_seqs(store, sid)
    assert seqs == list(range(1, len(seqs) + 1))
    assert set(service.state(sid).index) == {file_id(host_id, p) for p in paths}
    fresh = make_service()
    fresh.resume_session(sid)
    assert sets(fresh.state(sid)) == sets(service.state(sid))
    assert fresh.state(sid) == service.state(sid)  # the message is there too


@pytest.mark.usefixtures("small_batches")
def test_a_store_failure_mid_pipeline_raises_and_keeps_the_batches_that_landed(
    make_service: MakeService, ns: str, files: FakeFileReader, store: WrappedStore, host_id: str
) -> None:
    sid = f"{ns}failing"
    service = make_service()
    service.start_session(sid, "prompt")
    paths = many(files, 6)
    on_submission(store, 1, lambda: setattr(store, "fail_commits", 1))  # the 2nd never arrives

    with pytest.raises(StoreUnavailable):
        service.index_files(sid, paths)

    fresh = make_service()
    fresh.resume_session(sid)
    assert set(fresh.state(sid).index) == {file_id(host_id, p) for p in paths[:2]}
    seqs = log_seqs(store, sid)
    assert seqs == list(range(1, len(seqs) + 1))
    # The session caught up and goes on: the first batch is there, the rest is created now.
    outcomes = [r.outcome for r in service.index_files(sid, paths)]
    assert outcomes == [Outcome.UNCHANGED] * 2 + [Outcome.CREATED] * 4


@pytest.mark.usefixtures("small_batches")
def test_a_missing_source_in_a_later_batch_keeps_the_batches_before_it(
    service: ContextService, sid: str, files: FakeFileReader, host_id: str
) -> None:
    paths = many(files, 5)
    seq = service.log_position(sid)
    with pytest.raises(SourceMissing):
        service.index_files(sid, [*paths[:3], "/p/never-written.py", paths[4]])
    assert set(service.state(sid).index) == {file_id(host_id, p) for p in paths[:2]}
    assert service.log_position(sid) == seq + 1


# -- property: pipelining changes when batches are sent, never what they leave ----------------

POOL = [f"/p/{name}" for name in ("a.py", "b.py", "c.md", "d/e.txt", "d/f.txt")]

rounds_strategy = st.lists(
    st.tuples(
        st.dictionaries(st.sampled_from(POOL), st.sampled_from(["x\n", "y\n", "zz\n", ""])),
        st.lists(st.sampled_from(POOL), min_size=1, max_size=7),
    ),
    min_size=1,
    max_size=4,
)


def one_at_a_time(runner: SessionRunner) -> None:
    """Make ``runner`` commit batches as it did before pipelining: each before the next."""

    def sequential(session: Any, builds: Any, *, depth: int = 2) -> list[Any]:
        return [runner.execute(session, build) for build in builds]

    runner.execute_pipelined = sequential  # type: ignore[method-assign]


def test_pipelined_batches_leave_what_batches_one_at_a_time_leave(
    store_factory: StoreFactory,
) -> None:
    """Random rounds of file writes and batched reads, with another agent writing to the session
    at a random point, on two stores: one pipelined, one committing each batch before the next.
    The outcomes, sets and file versions agree, the logs have no gaps, and a resumed session
    equals the live one."""

    def run(
        pipelined: bool,
        rounds: list[tuple[dict[str, str], list[str]]],
        batch_files: int,
        meanwhile: int | None,
    ) -> tuple[Any, ...]:
        ns = f"t{uuid.uuid4().hex[:8]}-" if store_factory.shared else ""
        store = WrappedStore(store_factory.make(), namespace=ns)
        files = FakeFileReader("host-fs")
        service, other, fresh = (
            compose_service(
                store=store,
                files=files,
                clock=CountingClock(),
                ids=CountingIds(),
                mounts=MountTable("host-fs", ()),
            )
            for _ in range(3)
        )
        if not pipelined:
            one_at_a_time(service._runner)
        service.start_session("s", "prompt")
        other.resume_session("s")
        service.record_user_message("s", "go")  # catches up with the resume's entry
        written: set[str] = set()
        outcomes = []
        with patch.object(files_usecase, "BATCH_FILES", batch_files):
            for n, (writes, paths) in enumerate(rounds):
                for path, content in writes.items():
                    files.write(path, content)
                    written.add(path)
                if n == 0 and meanwhile is not None:
                    on_submission(store, meanwhile, lambda: other.record_user_message("s", "hi"))
                readable = [p for p in paths if p in written]
                results = service.index_files("s", readable) if readable else ()
                outcomes.append([(r.object_id, r.outcome) for r in results])
        store.on_commit = None
        seqs = log_seqs(store, "s")
        assert seqs == list(range(1, len(seqs) + 1))
        fresh.resume_session("s")
        live = service.state("s")
        assert fresh.state("s") == live
        histories = {
            object_id: [v.document["content"] for v in service.history(object_id)]
            for object_id in live.index
        }
        store.close()
        return outcomes, sets(live), histories

    @given(
        rounds=rounds_strategy,
        batch_files=st.integers(1, 3),
        meanwhile=st.none() | st.integers(1, 6),
    )
    def check(
        rounds: list[tuple[dict[str, str], list[str]]], batch_files: int, meanwhile: int | None
    ) -> None:
        assert run(True, rounds, batch_files, meanwhile) == run(
            False, rounds, batch_files, meanwhile
        )

    examples = 10 if store_factory.shared else profile_max_examples()
    settings(max_examples=examples, suppress_health_check=[HealthCheck.too_slow])(check)()


@pytest.mark.parametrize("text", ["a\ud800b", "tail \udfff", "pair \ud83d\ude00 and \ud800 lone"])
def test_handed_over_text_has_one_hash_rule(service: ContextService, ns: str, text: str) -> None:
    """Decision 0029: the file_hash of text a harness handed over is computed as its
    content_hash is (a lone surrogate is U+FFFD), so the two agree."""
    sid = f"{ns}lone"
    service.start_session(sid, "prompt")
    result = service.index_file(sid, "/p/lone.txt", text)
    obj = service.object(sid, result.object_id)
    assert isinstance(obj, FileObject)
    assert obj.file_hash == obj.content_hash == content_hash(text)
