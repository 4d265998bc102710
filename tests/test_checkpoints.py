"""Checkpoints and rollback (decision 0041), on both stores.

Files here live in the fake file reader (an in-memory disk); tests/filesystem/test_rollback.py
rolls back real files, with a watcher running.
"""

from __future__ import annotations

import pytest

from selfctx.application.policies import policy_by_name
from selfctx.application.runner import SessionRunner
from selfctx.application.service import ContextService
from selfctx.domain.chat import ToolCallRequest, UserMessage
from selfctx.domain.errors import DuplicateCheckpoint, InvalidInput, UnknownCheckpoint
from selfctx.domain.session.state import PolicyConfig
from tests.conftest import MakeService
from tests.support import CountingClock, CountingIds, FakeFileReader, WrappedStore


def _bash(service: ContextService, sid: str, call_id: str, output: str) -> None:
    request = ToolCallRequest(call_id, "bash", {"command": call_id})
    service.record_assistant_message(sid, "", [request])
    service.record_tool_call(sid, call_id, tool="bash", args={"command": call_id}, output=output)


def _users(service: ContextService, sid: str) -> list[str]:
    return [
        m.text
        for turn in service.state(sid).turns
        for m in turn.messages
        if isinstance(m, UserMessage)
    ]


def test_rollback_restores_sets_and_chat_and_can_itself_be_rolled_back(
    service: ContextService, files: FakeFileReader, store: WrappedStore
) -> None:
    service.start_session("s", "sys", policy=PolicyConfig("ssot"))
    files.write("/w/a.py", "a = 1\n")
    service.index_file("s", "/w/a.py")
    service.record_user_message("s", "first question")
    _bash(service, "s", "tc-1", "one")
    service.pin("s", "tc-1")
    mark = service.checkpoint("s", "before-experiment")
    assert (mark.label, mark.position, mark.turn) == ("before-experiment", 6, 1)
    before = service.state("s")
    context_before = service.assemble("s")

    service.record_user_message("s", "second question")
    _bash(service, "s", "tc-2", "two")
    files.write("/w/b.py", "b = 2\n")
    service.index_file("s", "/w/b.py")
    service.unpin("s", "tc-1")
    service.deactivate("s", "tc-1")
    after = service.state("s")
    context_after = service.assemble("s")

    report = service.rollback("s", "before-experiment")
    state = service.state("s")
    assert (report.mode, report.turns_before, report.turns_after) == ("conversation", 2, 1)
    assert report.saved_as == "before-rollback"
    assert _users(service, "s") == ["first question"]
    assert (state.pool, state.active, state.pinned, state.auto_active) == (
        before.pool,
        before.active,
        before.pinned,
        before.auto_active,
    )
    assert list(state.index) == list(after.index)  # the index never shrinks
    assert set(report.leaving) == {"tc-2", service.object_id_for("/w/b.py")}
    assert service.assemble("s") == context_before  # what the model sees, exactly
    # Nothing was erased: the rolled-back turn is still in the log, the store and search.
    assert [h.turn for h in service.search("second question", session_id="s")] == [2]

    # The rollback can be rolled back: the checkpoint it saved holds the session before it.
    again = service.rollback("s", report.saved_as)
    state = service.state("s")
    assert _users(service, "s") == ["first question", "second question"]
    assert (state.pool, state.active, state.pinned) == (after.pool, after.active, after.pinned)
    assert service.assemble("s") == context_after
    assert again.saved_as == "before-rollback.2"
    labels = [cp.label for cp in service.checkpoints("s")]
    assert labels == ["before-experiment", "before-rollback", "before-rollback.2"]

    # A fresh client rebuilds the same state from the log, and from the latest snapshot.
    runner = SessionRunner(store, CountingClock(), CountingIds())
    assert runner.load("s").state == state
    position = service.log_position("s")
    assert service.state_at("s", position).state == state
    assert service.context_at("s", position) == service.assemble("s")


def test_the_conversation_goes_on_after_a_rollback(service: ContextService) -> None:
    """New turns after a rollback are numbered from the checkpoint's chat; a tool call of a
    rolled-back turn is indexed only, and can be activated (by id) or found by search."""
    service.start_session("s", "sys", policy=PolicyConfig("ssot"))
    service.record_user_message("s", "one")
    service.checkpoint("s", "cp")
    service.record_user_message("s", "two")
    _bash(service, "s", "tc-old", "rolled back output")
    service.rollback("s", "cp")
    state = service.state("s")
    assert "tc-old" in state.index and "tc-old" not in state.pool
    service.record_user_message("s", "two, again")
    _bash(service, "s", "tc-new", "new output")
    assert [t.number for t in service.state("s").turns] == [0, 1, 2]
    assert _users(service, "s") == ["one", "two, again"]
    assert "tc-old" not in service.assemble("s").metadata_text()
    assert service.activate("s", "tc-old").ok  # back into the pool and the active set
    assert "tc-old" in service.state("s").pool
    assert service.search("rolled back output", session_id="s")[0].object_id == "tc-old"


def test_automatic_checkpoints_every_n_turns(make_service: MakeService) -> None:
    service = make_service()
    policy = policy_by_name("inline", checkpoint_every=2)
    service.start_session("s", "sys", policy=policy)
    for n in range(1, 6):
        service.record_user_message("s", f"turn {n}")
    checkpoints = service.checkpoints("s")
    assert [(cp.label, cp.turn, cp.auto) for cp in checkpoints] == [
        ("before-turn-1", 0, True),
        ("before-turn-3", 2, True),
        ("before-turn-5", 4, True),
    ]
    service.rollback("s", "before-turn-3")
    assert _users(service, "s") == ["turn 1", "turn 2"]
    service.record_user_message("s", "turn 3 again")  # turn 3 again: its label is taken
    assert service.checkpoints("s")[-1].label == "before-turn-3.2"


def test_checkpoint_labels_and_unknown_checkpoints_are_refused_by_name(
    service: ContextService, store: WrappedStore
) -> None:
    service.start_session("s", "sys")
    assert service.checkpoint("s").label == "checkpoint-1"
    assert service.checkpoint("s").label == "checkpoint-1.2"
    service.checkpoint("s", "mine")
    commits = store.commits
    with pytest.raises(DuplicateCheckpoint):
        service.checkpoint("s", "mine")
    for bad in ("", "   ", "x" * 101, "tab\there"):
        with pytest.raises(InvalidInput):
            service.checkpoint("s", bad)
    with pytest.raises(UnknownCheckpoint) as caught:
        service.rollback("s", "nope")
    assert "mine" in str(caught.value)
    with pytest.raises(InvalidInput):
        service.rollback("s", "mine", mode="everything")  # type: ignore[arg-type]
    assert store.commits == commits  # refusals change nothing


def test_files_the_session_wrote_are_restored_and_others_refused(
    service: ContextService, files: FakeFileReader
) -> None:
    service.start_session("s", "sys")
    files.write("/w/edited.py", "v1\n")
    files.write("/w/theirs.py", "t1\n")
    files.write("/w/read.py", "r1\n")
    for path in ("/w/edited.py", "/w/theirs.py", "/w/read.py"):
        service.index_file("s", path)
    service.checkpoint("s", "cp")

    # The session edits two files and creates one; it only reads a fourth that changed.
    files.write("/w/edited.py", "v2\n")
    service.index_file("s", "/w/edited.py", "v2\n", wrote=True)
    files.write("/w/theirs.py", "t2\n")
    service.index_file("s", "/w/theirs.py", "t2\n", wrote=True)
    files.write("/w/new.py", "created\n")
    service.index_file("s", "/w/new.py", "created\n", wrote=True)
    files.write("/w/read.py", "r2 by someone\n")
    service.index_file("s", "/w/read.py")
    # Someone else changes theirs.py afterwards, and another session records it.
    files.write("/w/theirs.py", "t3 by someone else\n")
    service.start_session("other", "sys")
    service.index_file("other", "/w/theirs.py")

    dry = service.rollback("s", "cp", mode="files", dry_run=True)
    plan = {f.path: (f.action, f.reason) for f in dry.files}
    assert plan == {
        "/w/edited.py": ("write", ""),
        "/w/theirs.py": ("refused", "changed by someone else since this session wrote it"),
        "/w/new.py": ("delete", ""),
    }
    assert files.restored == [] and dry.saved_as is None  # a dry run changes nothing
    state = service.state("s")

    report = service.rollback("s", "cp", mode="files")
    assert {f.path: f.action for f in report.files} == {
        "/w/edited.py": "write",
        "/w/theirs.py": "refused",
        "/w/new.py": "delete",
    }
    assert [f.path for f in report.refused] == ["/w/theirs.py"]
    assert files.files[(files.host_id, "/w/edited.py")] == b"v1\n"
    assert (files.host_id, "/w/new.py") not in files.files
    assert files.files[(files.host_id, "/w/theirs.py")] == b"t3 by someone else\n"
    assert files.files[(files.host_id, "/w/read.py")] == b"r2 by someone\n"
    # Files only: the conversation is as it was; the restores are new versions.
    after = service.state("s")
    assert (after.pool, after.active, after.turns) == (state.pool, state.active, state.turns)
    edited = service.history(service.object_id_for("/w/edited.py"))
    assert [v.document["content"] for v in edited] == ["v1\n", "v2\n", "v1\n"]
    new = service.history(service.object_id_for("/w/new.py"))
    assert [v.document.get("content_status") for v in new] == [None, "deleted"]
    assert service.object("s", service.object_id_for("/w/edited.py")).content == "v1\n"

    # Rolling the rollback back writes the session's versions again.
    again = service.rollback("s", report.saved_as or "", mode="files")
    assert {f.path: f.action for f in again.files} == {
        "/w/edited.py": "write",
        "/w/new.py": "write",
    }
    assert files.files[(files.host_id, "/w/new.py")] == b"created\n"


def test_a_file_changed_on_disk_but_not_recorded_is_refused(
    service: ContextService, files: FakeFileReader
) -> None:
    service.start_session("s", "sys")
    files.write("/w/a.py", "v1\n")
    service.index_file("s", "/w/a.py")
    service.checkpoint("s", "cp")
    service.index_file("s", "/w/a.py", "v2\n", wrote=True)
    files.write("/w/a.py", "v2\n")
    files.write("/w/a.py", "edited by hand, nobody watching\n")
    report = service.rollback("s", "cp", mode="both")
    [refused] = report.refused
    assert refused.reason == "changed on disk since this session wrote it"
    assert files.files[(files.host_id, "/w/a.py")] == b"edited by hand, nobody watching\n"


def test_files_whose_content_was_never_stored_or_that_cannot_be_written_are_refused(
    service: ContextService, files: FakeFileReader
) -> None:
    service.start_session("s", "sys")
    files.write("/w/blob.bin", b"\x00\x01binary")
    service.index_file("s", "/w/blob.bin")
    files.write("/w/locked.py", "l1\n")
    service.index_file("s", "/w/locked.py")
    service.checkpoint("s", "cp")
    files.write("/w/blob.bin", "now text\n")
    service.index_file("s", "/w/blob.bin", "now text\n", wrote=True)
    files.write("/w/locked.py", "l2\n")
    service.index_file("s", "/w/locked.py", "l2\n", wrote=True)
    files.make_unreachable("/w/locked.py")
    plan = {f.path: f.reason for f in service.rollback("s", "cp", mode="files").refused}
    assert plan == {
        "/w/blob.bin": "its content at the checkpoint is not stored (binary)",
        "/w/locked.py": "permission denied",
    }
    assert files.restored == []
