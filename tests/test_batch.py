"""``ContextService.batch``: the commands of one request committed as one transaction
(decision 0077), on every store of the contract; what a refused or failed transaction leaves."""

from __future__ import annotations

from typing import Any

import pytest

from selfctx.application import runner
from selfctx.application.persistence import (
    LOG_ENTRIES,
    LOG_TYPE,
    entry_events,
    log_entries,
    log_entry_tx,
    with_snapshot_size,
)
from selfctx.application.ports.store import StoreError, StoreUnavailable
from selfctx.application.service import ContextService
from selfctx.domain.chat import ToolCallRequest
from selfctx.domain.documents import to_document
from selfctx.domain.errors import InvalidInput
from selfctx.domain.infrastructure import ChatObject, SessionObject
from selfctx.domain.session.machine import decide_and_fold
from tests.conftest import MakeService
from tests.support import WrappedStore, file_id


@pytest.fixture
def sid(ns: str, service: ContextService) -> str:
    session_id = f"{ns}s1"
    service.start_session(session_id, "You are careful.")
    return session_id


def a_turn(service: ContextService, sid: str, n: int, content: str = "x = 1\n") -> None:
    """An assistant message with one call, its output, and the file it read."""
    call = f"tc-{n}"
    service.record_assistant_message(sid, f"step {n}", [ToolCallRequest(call, "bash", {"n": n})])
    service.record_tool_call(sid, call, tool="bash", args={"n": n}, output=f"output {n}")
    service.index_file(sid, "/p/a.py", content)


def entries(store: WrappedStore, sid: str) -> list[tuple[int, str]]:
    return [(int(e["seq"]), str(e["command"])) for e in store.session_log(sid)]


def test_a_batch_is_one_transaction_with_a_log_entry_per_command(
    service: ContextService, store: WrappedStore, sid: str, make_service: MakeService
) -> None:
    a_turn(service, sid, 1)  # the ordinary way: one commit per command
    before, logged = store.commits, len(entries(store, sid))
    assert before >= 3

    with service.batch(sid) as progress:
        a_turn(service, sid, 2, "x = 2\n")
        progress.done += 1
        # the session has moved on already: what is read between commands is up to date
        assert "tc-2" in service.state(sid).index

    assert store.commits == before + 1
    assert progress.committed == 1
    assert not progress.redone
    log = entries(store, sid)
    assert [c for _, c in log[logged:]] == ["RecordAssistantMessage", "RecordToolCall", "IndexFile"]
    assert [s for s, _ in log] == list(range(1, len(log) + 1))
    # What another process loads from the store is what this one holds.
    other = make_service()
    other.resume_session(sid)
    assert other.state(sid) == service.state(sid)
    assert other.assemble(sid) == service.assemble(sid)


def test_a_batch_that_takes_several_snapshots_is_one_transaction_with_the_last(
    service: ContextService, store: WrappedStore, sid: str, make_service: MakeService
) -> None:
    # A conversation long enough for the session to take several snapshots (decision 0119): a
    # session built command by command writes one at each; in a batch, only the last is
    # written, and the batch is one transaction.
    def turns(session_id: str, tag: str) -> None:
        for n in range(1, 41):
            call = f"tc-{tag}-{n}"
            request = [ToolCallRequest(call, "bash", {"n": n})]
            service.record_assistant_message(session_id, f"step {n}", request)
            service.record_tool_call(session_id, call, tool="bash", args={"n": n}, output="ok")

    alone = f"{sid}-alone"
    service.start_session(alone, "You are careful.")
    turns(alone, "a")
    assert len(store.history(f"session:{alone}")) >= 4  # the snapshots one at a time took

    before, snapshots = store.commits, len(store.history(f"session:{sid}"))
    with service.batch(sid) as progress:
        turns(sid, "b")
        progress.done += 1
    assert store.commits == before + 1
    assert len(store.history(f"session:{sid}")) == snapshots + 1
    log = entries(store, sid)
    assert [s for s, _ in log] == list(range(1, len(log) + 1))
    assert len(log) == 1 + 80
    # the snapshot written is the batch's last: taken after its first commands
    snapshot = store.get(f"session:{sid}")
    assert snapshot is not None and int(snapshot["seq"]) > 40
    other = make_service()
    other.resume_session(sid)
    assert other.state(sid) == service.state(sid)
    assert other.assemble(sid) == service.assemble(sid)


def test_two_versions_of_one_document_go_in_two_transactions(
    service: ContextService, store: WrappedStore, sid: str, host_id: str
) -> None:
    before = store.commits
    with service.batch(sid):
        service.index_file(sid, "/p/b.py", "one\n")
        service.index_file(sid, "/p/b.py", "two\n")
    assert store.commits == before + 2
    fid = file_id(host_id, "/p/b.py")
    assert [v.document["content"] for v in service.history(fid)] == ["one\n", "two\n"]


def test_a_refused_batch_is_decided_again_command_by_command(
    service: ContextService, store: WrappedStore, sid: str, make_service: MakeService, ns: str,
    host_id: str,
) -> None:  # fmt: skip
    a_turn(service, sid, 1, "v1\n")
    other = make_service()
    other.start_session(f"{ns}s2", "Another session.")
    interleaved: list[int] = []

    def another_writer() -> None:
        # Just before the batch's transaction: another session writes a new version of the
        # file the batch read (once; its own commit passes through here too).
        if not interleaved:
            interleaved.append(store.commits)
            other.index_file(f"{ns}s2", "/p/a.py", "v3\n")

    store.on_commit = another_writer
    with service.batch(sid) as progress:
        a_turn(service, sid, 2, "v2\n")
        assert not progress.redone
    store.on_commit = None
    assert progress.redone  # what the block read may differ from what is stored

    fid = file_id(host_id, "/p/a.py")
    assert [v.document["content"] for v in service.history(fid)] == ["v1\n", "v3\n", "v2\n"]
    # Refused as a whole, then each command on its own: nothing twice, nothing lost.
    log = entries(store, sid)
    assert [c for _, c in log].count("RecordToolCall") == 2
    assert [s for s, _ in log] == list(range(1, len(log) + 1))
    assert service.object(sid, fid).content == "v2\n"
    fresh = make_service()
    fresh.resume_session(sid)
    assert fresh.state(sid) == service.state(sid)


def test_a_refused_batch_is_decided_again_on_what_the_refusal_said(
    service: ContextService, store: WrappedStore, sid: str, make_service: MakeService, ns: str,
    host_id: str, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Decision 0112: the refusal says what is stored of what the batch expected, so its
    commands are decided again without reading the session's log (no other writer appended to
    it), the documents the refusal carried, or those the commands before them wrote."""
    a_turn(service, sid, 1, "v1\n")
    other = make_service()
    other.start_session(f"{ns}s2", "Another session.")
    reads: list[tuple[str, tuple[str, ...]]] = []
    counting: list[bool] = []

    def count(name: str, read: Any) -> Any:
        def counted(arg: Any, *rest: Any, **options: Any) -> Any:
            if not counting:
                return read(arg, *rest, **options)
            ids = (arg,) if isinstance(arg, str) else tuple(arg)
            reads.append((name, ids))
            return read(arg if isinstance(arg, str) else ids, *rest, **options)

        return counted

    for name in ("get", "get_many", "session_log"):
        monkeypatch.setattr(store, name, count(name, getattr(store, name)))

    def another_writer() -> None:
        # once, just before the batch's transaction: a new version of the file the batch read
        if not counting:
            other.index_file(f"{ns}s2", "/p/a.py", "v3\n")
            counting.append(True)  # what follows is the batch's refusal and its redo

    store.on_commit = another_writer
    with service.batch(sid) as progress:
        a_turn(service, sid, 2, "v2\n")
    store.on_commit = None
    assert progress.redone
    fid = file_id(host_id, "/p/a.py")
    assert [v.document["content"] for v in service.history(fid)] == ["v1\n", "v3\n", "v2\n"]
    assert reads == []
    fresh = make_service()
    fresh.resume_session(sid)
    assert fresh.state(sid) == service.state(sid)
    assert service.object(sid, fid).content == "v2\n"


def test_a_refused_batch_is_committed_again_as_one_transaction(
    service: ContextService, store: WrappedStore, sid: str, make_service: MakeService, ns: str,
    host_id: str,
) -> None:  # fmt: skip
    """Decision 0118: the refused batch's commands are decided again together, on what the
    refusal said, and committed in one transaction (not one commit each); refused again while
    another writer keeps writing the file, it is decided again each time, and each command is
    recorded once, in order."""
    a_turn(service, sid, 1, "v1\n")
    other = make_service()
    other.start_session(f"{ns}s2", "Another session.")
    versions = iter(["v3\n", "v4\n", "v5\n"])

    def another_writer() -> None:
        # before each of the batch's first three transactions: a new version of the file it
        # read (a hook runs once: it is set again after the other writer's own commit)
        version = next(versions, None)
        if version is not None:
            other.index_file(f"{ns}s2", "/p/a.py", version)
            store.on_commit = another_writer

    logged = len(entries(store, sid))
    before = store.commits
    store.on_commit = another_writer
    with service.batch(sid) as progress:
        a_turn(service, sid, 2, "v2\n")
        progress.done += 1
    store.on_commit = None
    assert progress.redone
    assert progress.committed == 1
    # the other writer's three, then the batch's: one commit, not one per command
    assert store.commits == before + 4
    fid = file_id(host_id, "/p/a.py")
    contents = [v.document["content"] for v in service.history(fid)]
    assert contents == ["v1\n", "v3\n", "v4\n", "v5\n", "v2\n"]
    log = entries(store, sid)
    assert [c for _, c in log[logged:]] == ["RecordAssistantMessage", "RecordToolCall", "IndexFile"]
    assert [s for s, _ in log] == list(range(1, len(log) + 1))
    landed = {log_entry_tx(store, sid, s) for s, _ in log[logged:]}
    assert len(landed) == 1  # one transaction
    assert service.object(sid, fid).content == "v2\n"
    fresh = make_service()
    fresh.resume_session(sid)
    assert fresh.state(sid) == service.state(sid)


def test_a_store_failure_at_the_end_leaves_the_session_as_the_store_has_it(
    service: ContextService, store: WrappedStore, sid: str, make_service: MakeService
) -> None:
    a_turn(service, sid, 1)
    state, logged = service.state(sid), entries(store, sid)
    store.fail_commits = 1
    with pytest.raises(StoreUnavailable), service.batch(sid) as progress:
        a_turn(service, sid, 2, "x = 2\n")
        progress.done += 1
    assert progress.committed == 0
    assert entries(store, sid) == logged
    assert service.state(sid) == state
    # and the session carries on
    a_turn(service, sid, 2, "x = 2\n")
    fresh = make_service()
    fresh.resume_session(sid)
    assert fresh.state(sid) == service.state(sid)
    assert any(
        event.get("object_id") == "tc-2"
        for entry in store.session_log(sid)
        for event in entry_events(entry)
    )


def test_what_a_batch_decided_before_an_error_is_kept(
    service: ContextService, store: WrappedStore, sid: str
) -> None:
    before = store.commits
    with pytest.raises(RuntimeError), service.batch(sid) as progress:
        service.record_assistant_message(sid, "one", [])
        progress.done += 1
        raise RuntimeError("the caller failed")
    assert store.commits == before + 1
    assert progress.committed == 1
    assert not progress.redone
    assert entries(store, sid)[-1][1] == "RecordAssistantMessage"


def test_a_request_recorded_in_a_batch_is_committed_with_it(
    service: ContextService, store: WrappedStore, sid: str, make_service: MakeService
) -> None:
    """Decision 0089: the record goes with the batch's transaction, written at its end."""
    a_turn(service, sid, 1)
    service.record_request(sid, service.assemble(sid))  # on its own: a commit
    before = store.commits
    with service.batch(sid):
        a_turn(service, sid, 2, "x = 2\n")
        record = service.record_request(sid, service.assemble(sid))
        assert len(service.requests(sid)) == 1  # not before the batch commits
    assert store.commits == before + 1
    assert record.seq == service.log_position(sid)
    assert [r.n for r in service.requests(sid)] == [1, 2]
    records = store.history(f"requests:{sid}")
    assert records[-1].tx_id == log_entry_tx(store, sid, record.seq)
    # the next record follows it (the meter moved on when the batch committed)
    assert service.record_request(sid, service.assemble(sid)).n == 3
    other = make_service()
    assert [r.n for r in other.requests(sid)] == [1, 2, 3]


def test_a_record_refused_with_its_batch_is_not_written(
    service: ContextService, store: WrappedStore, sid: str, make_service: MakeService
) -> None:
    a_turn(service, sid, 1)
    other = make_service()
    other.resume_session(sid)
    fired: list[bool] = []

    def another_record() -> None:  # once, just before the batch's transaction
        if not fired:
            fired.append(True)
            other.record_request(sid, other.assemble(sid))

    store.on_commit = another_record
    with service.batch(sid) as progress:
        a_turn(service, sid, 2, "x = 2\n")
        service.record_request(sid, service.assemble(sid))
    store.on_commit = None
    assert progress.redone
    assert [r.n for r in service.requests(sid)] == [1]  # the other writer's alone
    log = entries(store, sid)
    assert [c for _, c in log].count("RecordToolCall") == 2
    # the caller records again what it then sends; it follows the other writer's
    assert service.record_request(sid, service.assemble(sid)).n == 2


def test_a_command_no_longer_decided_in_a_redo_leaves_the_session_as_stored(
    service: ContextService, store: WrappedStore, sid: str, make_service: MakeService,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Decision 0118: when a command of a refused batch is refused by the domain on its second
    decision (after those before it were decided again), nothing of the batch is recorded, the
    error is raised, and the session is where the store has it (the other writer's entry
    folded in)."""
    a_turn(service, sid, 1)
    other = make_service()
    other.resume_session(sid)
    refused: list[bool] = []

    def deciding(state: Any, command: Any) -> Any:
        if refused and type(command).__name__ == "IndexFile":  # the redo's third: no
            raise InvalidInput("command", type(command).__name__, "no longer applies")
        return decide_and_fold(state, command)

    def another_writer() -> None:  # once, just before the batch's transaction
        other.record_user_message(sid, "from elsewhere")
        refused.append(True)

    monkeypatch.setattr(runner, "decide_and_fold", deciding)  # as the runner calls it
    store.on_commit = another_writer
    with pytest.raises(InvalidInput), service.batch(sid) as progress:
        a_turn(service, sid, 2, "x = 2\n")
        progress.done += 1
    assert progress.redone
    assert progress.committed == 0
    monkeypatch.undo()
    log = [c for _, c in entries(store, sid)]
    assert log.count("RecordToolCall") == 1 and log[-1] == "RecordUserMessage"
    assert service.log_position(sid) == len(log)
    fresh = make_service()
    fresh.resume_session(sid)
    assert fresh.state(sid) == service.state(sid)


def test_a_batchs_log_entries_are_one_document(
    service: ContextService, store: WrappedStore, sid: str, make_service: MakeService
) -> None:
    """Decision 0134: a batch's commands are one log document (the node's work per document),
    up to ``LOG_ENTRIES`` entries each; every entry reads back as built, from any position, and
    every past state as the session was."""
    a_turn(service, sid, 1)
    before = len(store.committed)
    with service.batch(sid):
        a_turn(service, sid, 2, "x = 2\n")
    logs = [d for d in store.committed[-1] if d.get("type") == LOG_TYPE]
    assert len(store.committed) == before + 1
    assert len(logs) == 1  # three commands, one document
    assert log_entries(logs[0]) == store.session_log(sid)[-3:]

    # A long batch: as many documents as LOG_ENTRIES makes its commands.
    start = service.log_position(sid)
    states = {}
    with service.batch(sid):
        for n in range(3, 23):  # a file each: no document written twice (one transaction)
            call = f"tc-{n}"
            service.record_assistant_message(sid, f"step {n}", [ToolCallRequest(call, "bash", {})])
            states[service.log_position(sid)] = service.state(sid)
            service.record_tool_call(sid, call, tool="bash", args={}, output=f"output {n}")
            states[service.log_position(sid)] = service.state(sid)
            service.index_file(sid, f"/p/{n}.py", f"x = {n}\n")
            states[service.log_position(sid)] = service.state(sid)
    commands = service.log_position(sid) - start
    landed = store.latest_tx()
    logs = [d for d in store.committed[-1] if d.get("type") == LOG_TYPE]
    assert len(logs) == -(-commands // LOG_ENTRIES)
    assert [int(e["seq"]) for d in logs for e in log_entries(d)] == list(
        range(start + 1, start + commands + 1)
    )
    fresh = make_service()
    fresh.resume_session(sid)
    assert fresh.state(sid) == service.state(sid)
    for seq, state in states.items():
        assert fresh.state_at(sid, seq).state == state, seq
        tx = fresh.state_at(sid, seq).tx_id
        assert landed is not None and tx == log_entry_tx(store, sid, seq) == landed.tx_id


def test_a_session_written_one_document_an_entry_resumes_and_goes_on(
    service: ContextService,
    store: WrappedStore,
    sid: str,
    make_service: MakeService,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A session stored before decision 0134 (one document an entry, a batch's too: what
    ``LOG_ENTRIES = 1`` writes) resumes, past states and all, and goes on in documents of
    several entries; nothing is lost."""
    monkeypatch.setattr(runner, "LOG_ENTRIES", 1)
    with service.batch(sid):
        a_turn(service, sid, 1)
    with service.batch(sid):
        a_turn(service, sid, 2, "x = 2\n")
    old = [d for d in store.committed[-1] if d.get("type") == LOG_TYPE]
    assert len(old) == 3 and all("entries" not in d for d in old)  # the old shape
    written = service.log_position(sid)
    before = {seq: service.state_at(sid, seq).state for seq in range(1, written + 1)}
    monkeypatch.undo()

    other = make_service()
    other.resume_session(sid)
    assert other.state(sid) == service.state(sid)
    with other.batch(sid):
        a_turn(other, sid, 3, "x = 3\n")
    assert len([d for d in store.committed[-1] if d.get("type") == LOG_TYPE]) == 1
    fresh = make_service()
    fresh.resume_session(sid)
    assert fresh.state(sid) == other.state(sid)
    for seq, state in before.items():
        assert fresh.state_at(sid, seq).state == state
    log = entries(store, sid)
    assert [s for s, _ in log] == list(range(1, fresh.log_position(sid) + 1))


def _turns(service: ContextService, session_id: str, tag: str, count: int = 40) -> None:
    for n in range(1, count + 1):
        call = f"tc-{tag}-{n}"
        request = [ToolCallRequest(call, "bash", {"n": n})]
        service.record_assistant_message(session_id, f"step {n}", request)
        service.record_tool_call(session_id, call, tool="bash", args={"n": n}, output="ok")


def test_a_batchs_snapshot_chat_is_built_at_its_commit_as_it_was_before(
    service: ContextService,
    store: WrappedStore,
    sid: str,
    make_service: MakeService,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The chat document of a batch's snapshot is built when the batch commits (after a
    # proxied request went upstream, decision 0161), once: not as each snapshot falls due.
    real = ChatObject
    built: list[tuple[int, Any]] = []

    class Counting:
        @staticmethod
        def of(state: Any, written: Any = None) -> Any:
            built.append((store.commits, state))
            return real.of(state, written)

    _turns(service, sid, "a", 20)
    # the batch's first command takes a snapshot; the next ones' log stays under the session
    # document's size, which answers that no other is due without the chat's
    service._sessions[sid].log_bytes_since_snapshot = 10**9
    monkeypatch.setattr(runner, "ChatObject", Counting)
    before = store.commits
    with service.batch(sid) as progress:
        _turns(service, sid, "b", 2)
        progress.done += 1
        assert built == []  # none built yet: the send would happen here
    assert store.commits == before + 1
    assert [commits for commits, _ in built] == [before]  # one, for the commit
    monkeypatch.undo()
    # what is stored is what building it at once gives: the same documents
    state = built[0][1]
    snapshot, chat = store.get(f"session:{sid}"), store.get(state.chat_id)
    assert snapshot is not None and chat is not None
    seq = int(snapshot["seq"])
    expected_chat = runner.as_stored(to_document(real.of(state)))
    expected_session = runner.as_stored(to_document(SessionObject.of(state, seq)))
    with_snapshot_size(expected_session, expected_chat)  # its size with it (0164)
    assert chat == expected_chat  # (a node gives the fields back in its own order)
    assert snapshot == expected_session
    other = make_service()
    other.resume_session(sid)
    assert other.state(sid) == service.state(sid)
    assert other.assemble(sid) == service.assemble(sid)


def test_a_snapshot_that_cannot_be_built_at_the_commit_fails_the_commit(
    service: ContextService,
    store: WrappedStore,
    sid: str,
    make_service: MakeService,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Built after the send, a snapshot that fails is the commit's failure, as a store's is
    # (decision 0161): nothing of the batch is written, the session is as the store has it.
    class Broken:
        @staticmethod
        def of(state: Any, written: Any = None) -> Any:
            raise RuntimeError("no chat")

    a_turn(service, sid, 1)
    state, logged = service.state(sid), entries(store, sid)
    monkeypatch.setattr(runner, "ChatObject", Broken)
    prepared = pytest.raises(StoreError, match="could not be prepared")
    with prepared, service.batch(sid) as progress:
        _turns(service, sid, "b")
        progress.done += 1
    monkeypatch.undo()
    assert progress.committed == 0
    assert entries(store, sid) == logged
    assert service.state(sid) == state
    _turns(service, sid, "c", 2)  # and the session carries on
    fresh = make_service()
    fresh.resume_session(sid)
    assert fresh.state(sid) == service.state(sid)
