"""``ContextService.index_files``: many agent reads committed in batches, on every store kind.

Indexing a batch must leave exactly what indexing each file on its own would leave (sets, object
versions, outcomes), with one log entry per batch instead of one per file.
"""

from __future__ import annotations

import pytest

from application.ports.files import SourceMissing
from application.service import ContextService
from application.usecases import files as files_usecase
from domain.errors import InvalidInput
from domain.indexing import Outcome
from domain.objects import FileObject
from domain.session import commands as c
from domain.session.machine import decide
from domain.session.state import SessionState
from tests.conftest import MakeService
from tests.support import FakeFileReader, StoreProbe, WrappedStore, file_id

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


def test_a_path_whose_id_a_tool_call_took_is_refused_by_every_reader(
    service: ContextService, sid: str, files: FakeFileReader, store: WrappedStore, host_id: str
) -> None:
    # A harness may give a tool call any id, a file's among them: the file is then refused,
    # whichever way it is read, naming its path, and nothing is written.
    write_all(files)
    service.record_tool_call(
        sid, file_id(host_id, "/p/a.py"), tool="bash", args={}, output="not a file"
    )
    state, probe = service.state(sid), StoreProbe.of(store)
    for attempt in (
        lambda: service.index_file(sid, "/p/a.py"),
        lambda: service.index_files(sid, PATHS),
        lambda: service.discover(sid, ["/p/b.md", "/p/a.py"]),
    ):
        with pytest.raises(InvalidInput, match=r"'/p/a\.py': its id names a stored toolcall"):
            attempt()
        assert (service.state(sid), StoreProbe.of(store)) == (state, probe)


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
