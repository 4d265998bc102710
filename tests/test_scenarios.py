"""One scenario per rule of the sessions and indexing (docs/specification.md), end to end through
``ContextService``.

Every test runs on each store kind of ``store_factory`` (see ``tests/conftest.py``).
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections.abc import Callable

import pytest

from selfctx.application.persistence import entry_events
from selfctx.application.ports.files import SourceMissing, SourceUnreachable
from selfctx.application.ports.store import ConflictError, StoreUnavailable
from selfctx.application.runner import MAX_ATTEMPTS, MAX_CONTENDED_ATTEMPTS, SessionRunner
from selfctx.application.service import ContextService
from selfctx.application.settings import Settings
from selfctx.domain.chat import AssistantMessage, ToolCallRequest, ToolResult, UserMessage
from selfctx.domain.errors import InvalidInput
from selfctx.domain.indexing import Outcome
from selfctx.domain.mounts import MountMapping
from selfctx.domain.objects import FileObject
from selfctx.domain.rendering import REPORTED_NOTE, ActiveBlock, AssembledContext, RenderedMessage
from selfctx.domain.session.state import CollapseWindow, SessionState
from tests.conftest import MakeService
from tests.support import (
    CONTAINER_FS,
    CountingClock,
    CountingIds,
    FakeFileReader,
    StoreProbe,
    WrappedStore,
    file_id,
    json_bytes,
    utf16_len,
)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sets(state: SessionState) -> dict[str, object]:
    """The four sets of a state, the index in order."""
    return {
        "index": list(state.index),
        "pool": set(state.pool),
        "active": set(state.active),
        "pinned": set(state.pinned),
    }


def chat_texts(state: SessionState) -> list[str]:
    """The text of every message in the state's turns, in order; there must be no tool result."""
    texts: list[str] = []
    for turn in state.turns:
        for message in turn.messages:
            assert not isinstance(message, ToolResult), message
            texts.append(message.text)
    return texts


def history_contents(service: ContextService, object_id: str) -> list[str | None]:
    return [v.document["content"] for v in service.history(object_id)]


def tool_call(service: ContextService, sid: str, tcid: str, output: str = "out") -> str:
    """An assistant message requesting one tool call, then the tool call's result."""
    service.record_assistant_message(sid, "", [ToolCallRequest(tcid, "bash", {"n": tcid})])
    return service.record_tool_call(sid, tcid, tool="bash", args={"n": tcid}, output=output)


@pytest.fixture
def sid(ns: str, service: ContextService) -> str:
    """A started session with the system prompt ``You are careful.``."""
    session_id = f"{ns}s1"
    service.start_session(session_id, "You are careful.")
    return session_id


# -- indexing protocol (§5.6) ------------------------------------------------------------------


def test_agent_read_creates_a_file_in_index_pool_and_active_set(
    service: ContextService, sid: str, host_id: str
) -> None:
    result = service.index_file(sid, "/p/src/main.py", "print('hé')\n")

    fid = file_id(host_id, "/p/src/main.py")
    assert (result.object_id, result.outcome, result.path) == (
        fid,
        Outcome.CREATED,
        "/p/src/main.py",
    )
    assert sets(service.state(sid)) == {
        "index": [fid],
        "pool": {fid},
        "active": {fid},
        "pinned": set(),
    }
    [version] = service.history(fid)
    doc = version.document
    assert doc["xt/id"] == doc["identity_hash"] == fid
    assert doc["type"] == "file"
    assert doc["source"] == {
        "type": "filesystem",
        "filesystemId": host_id,
        "path": "/p/src/main.py",
    }
    assert doc["content"] == "print('hé')\n"
    assert doc["file_hash"] == sha("print('hé')\n".encode())
    assert doc["content_hash"] == doc["file_hash"]
    assert (doc["file_type"], doc["char_count"]) == ("py", 12)


def test_agent_read_without_content_reads_the_source(
    service: ContextService, sid: str, files: FakeFileReader, host_id: str
) -> None:
    files.write("/p/notes.md", "# notes\n")
    result = service.index_file(sid, "/p/notes.md")
    assert result.outcome is Outcome.CREATED
    assert files.reads == ["/p/notes.md"]
    assert history_contents(service, file_id(host_id, "/p/notes.md")) == ["# notes\n"]


def test_discovery_stub_followed_by_a_read_is_upgraded(
    service: ContextService, sid: str, host_id: str
) -> None:
    report = service.discover(sid, ["/p/a.ts", "/p/b.ts", "/p/a.ts"])
    a, b = file_id(host_id, "/p/a.ts"), file_id(host_id, "/p/b.ts")
    assert [(r.object_id, r.outcome) for r in report.found] == [
        (a, Outcome.CREATED),
        (b, Outcome.CREATED),
        (a, Outcome.CREATED),
    ]
    assert report.refused == ()
    assert sets(service.state(sid)) == {
        "index": [a, b],
        "pool": {a, b},
        "active": set(),
        "pinned": set(),
    }
    [stub] = service.history(a)
    assert {
        k: stub.document[k] for k in ("content", "file_hash", "content_hash", "char_count")
    } == {
        "content": None,
        "file_hash": None,
        "content_hash": None,
        "char_count": 0,
    }
    assert stub.document["file_type"] == "ts"

    result = service.index_file(sid, "/p/a.ts", "let x = 1;")

    assert result.outcome is Outcome.UPDATED
    assert history_contents(service, a) == [None, "let x = 1;"]
    assert service.history(a)[1].document["file_hash"] == sha(b"let x = 1;")
    assert sets(service.state(sid)) == {
        "index": [a, b],
        "pool": {a, b},
        "active": {a},
        "pinned": set(),
    }


def test_discovery_never_overwrites_an_indexed_file(
    service: ContextService, sid: str, host_id: str, store: WrappedStore
) -> None:
    service.index_file(sid, "/p/a.ts", "let x = 1;")
    before = StoreProbe.of(store)
    report = service.discover(sid, ["/p/a.ts"])
    assert [r.outcome for r in report.found] == [Outcome.UNCHANGED]
    assert StoreProbe.of(store) == before
    assert history_contents(service, file_id(host_id, "/p/a.ts")) == ["let x = 1;"]


def test_rereading_an_unchanged_file_is_unchanged_and_writes_nothing(
    service: ContextService, sid: str, store: WrappedStore, host_id: str
) -> None:
    service.index_file(sid, "/p/a.ts", "let x = 1;")
    before = StoreProbe.of(store)
    seq = service.log_position(sid)

    result = service.index_file(sid, "/p/a.ts", b"let x = 1;")

    assert result.outcome is Outcome.UNCHANGED
    assert StoreProbe.of(store) == before
    assert before.commits == 2 and before.bytes_committed > 0
    assert service.log_position(sid) == seq
    assert len(service.history(file_id(host_id, "/p/a.ts"))) == 1


def test_rereading_a_changed_file_writes_a_new_version(
    service: ContextService, sid: str, host_id: str
) -> None:
    service.index_file(sid, "/p/a.ts", "v1")
    service.deactivate(sid, file_id(host_id, "/p/a.ts"))
    result = service.index_file(sid, "/p/a.ts", "v2")
    fid = file_id(host_id, "/p/a.ts")
    assert result.outcome is Outcome.UPDATED
    assert history_contents(service, fid) == ["v1", "v2"]
    assert fid in service.state(sid).active  # an agent read activates again


def test_rereading_a_deactivated_unchanged_file_activates_it_without_a_new_version(
    service: ContextService, sid: str, host_id: str
) -> None:
    fid = service.index_file(sid, "/p/a.ts", "v1").object_id
    service.deactivate(sid, fid)
    assert service.index_file(sid, "/p/a.ts", "v1").outcome is Outcome.UNCHANGED
    assert fid in service.state(sid).active
    assert len(service.history(fid)) == 1


def test_same_file_in_two_sessions_is_one_object(
    service: ContextService, sid: str, ns: str, host_id: str
) -> None:
    other = f"{ns}s2"
    service.start_session(other)
    first = service.index_file(sid, "/p/shared.txt", "same")
    second = service.index_file(other, "/p/shared.txt", "same")
    assert first.object_id == second.object_id == file_id(host_id, "/p/shared.txt")
    assert (first.outcome, second.outcome) == (Outcome.CREATED, Outcome.UNCHANGED)
    assert list(service.state(other).index) == [first.object_id]
    assert service.assemble(other).active == (ActiveBlock(first.object_id, "same"),)


def test_rereading_a_file_another_session_changed_shows_the_new_content(
    service: ContextService, sid: str, ns: str
) -> None:
    other = f"{ns}s2"
    service.start_session(other)
    fid = service.index_file(sid, "/p/shared.txt", "old").object_id
    service.index_file(other, "/p/shared.txt", "new")

    # The agent of s1 reads the file again and sees "new" in its tool output; the store already
    # holds that version, so nothing is written, but s1's context must show what was read. The
    # file cannot be read here: the stored version is s2's report, and says so (decision 0031).
    assert service.index_file(sid, "/p/shared.txt", "new").outcome is Outcome.UNCHANGED
    ctx = service.assemble(sid)
    assert ctx.active == (ActiveBlock(fid, "new"),)
    line = f"id={fid} type=file path=/p/shared.txt file_type=txt char_count=3 {REPORTED_NOTE}"
    assert ctx.metadata == (line,)


# -- activation (§3.3) --------------------------------------------------------------------------


def test_activating_a_stub_runs_full_indexing(
    service: ContextService, sid: str, files: FakeFileReader, host_id: str
) -> None:
    service.discover(sid, ["/p/lib.rs"])
    fid = file_id(host_id, "/p/lib.rs")
    files.write("/p/lib.rs", "fn main() {}\n")

    result = service.activate(sid, fid)

    assert result.ok is True
    assert result.message == "file /p/lib.rs is active (13 characters)"
    assert history_contents(service, fid) == [None, "fn main() {}\n"]
    assert service.history(fid)[1].document["file_hash"] == sha(b"fn main() {}\n")
    assert fid in service.state(sid).active
    ctx = service.assemble(sid)
    assert ctx.active == (ActiveBlock(fid, "fn main() {}\n"),)
    assert ctx.metadata == (f"id={fid} type=file path=/p/lib.rs file_type=rs char_count=13",)


def test_activating_a_stub_another_session_has_read_shows_its_content(
    service: ContextService, sid: str, ns: str, files: FakeFileReader, host_id: str
) -> None:
    other = f"{ns}s2"
    service.start_session(other)
    files.write("/p/lib.rs", "fn main() {}\n")
    service.discover(sid, ["/p/lib.rs"])
    fid = service.index_file(other, "/p/lib.rs").object_id

    service.activate(sid, fid)

    assert history_contents(service, fid) == [None, "fn main() {}\n"]
    assert service.assemble(sid).active == (ActiveBlock(fid, "fn main() {}\n"),)


@pytest.mark.parametrize(
    ("setup", "error"),
    [("missing", SourceMissing), ("unreachable", SourceUnreachable)],
)
def test_activating_a_stub_whose_source_cannot_be_read_fails_and_changes_nothing(
    service: ContextService,
    sid: str,
    files: FakeFileReader,
    store: WrappedStore,
    host_id: str,
    setup: str,
    error: type[Exception],
) -> None:
    service.discover(sid, ["/p/gone.txt"])
    fid = file_id(host_id, "/p/gone.txt")
    if setup == "unreachable":
        files.write("/p/gone.txt", "secret")
        files.make_unreachable("/p/gone.txt")
    state, probe = service.state(sid), StoreProbe.of(store)

    with pytest.raises(error) as raised:
        service.activate(sid, fid)

    assert "/p/gone.txt" in str(raised.value)
    assert service.state(sid) == state
    assert StoreProbe.of(store) == probe
    assert history_contents(service, fid) == [None]


def test_activating_a_stub_on_another_filesystem_fails_with_source_unreachable(
    make_service: MakeService, files: FakeFileReader, ns: str
) -> None:
    service = make_service(default_filesystem_id=CONTAINER_FS)
    sid = f"{ns}s1"
    service.start_session(sid)
    [found] = service.discover(sid, ["/tmp/scratch.txt"]).found
    with pytest.raises(SourceUnreachable, match=r"/tmp/scratch\.txt"):
        service.activate(sid, found.object_id)
    assert set(service.state(sid).active) == set()


def test_deactivate_keeps_the_metadata_line(
    service: ContextService, sid: str, host_id: str
) -> None:
    fid = service.index_file(sid, "/p/a.md", "hello").object_id
    line = f"id={fid} type=file path=/p/a.md file_type=md char_count=5"
    assert service.assemble(sid).metadata == (line,)

    result = service.deactivate(sid, fid)

    assert (result.ok, result.message) == (True, "file /p/a.md is not active")
    ctx = service.assemble(sid)
    assert ctx.metadata == (line,)
    assert ctx.active == ()
    assert sets(service.state(sid)) == {
        "index": [fid],
        "pool": {fid},
        "active": set(),
        "pinned": set(),
    }
    assert service.deactivate(sid, fid).message == "file /p/a.md is not active"  # a retry


def test_activate_pin_unpin_state_the_result_and_answer_a_retry_the_same(
    service: ContextService, sid: str
) -> None:
    tc = tool_call(service, sid, "tc-1")
    for _ in range(2):  # the second call is a retry: the same answer
        assert service.activate(sid, tc).message == "tool call tc-1 (bash) is active (3 characters)"
    for _ in range(2):
        assert service.pin(sid, tc).message == "tool call tc-1 (bash) is pinned"
    for _ in range(2):
        assert service.unpin(sid, tc).message == "tool call tc-1 (bash) is not pinned"


def test_noop_context_tools_write_nothing(
    service: ContextService, sid: str, store: WrappedStore
) -> None:
    tc = tool_call(service, sid, "tc-1")
    service.activate(sid, tc)
    service.pin(sid, tc)
    probe, seq = StoreProbe.of(store), service.log_position(sid)
    service.activate(sid, tc)
    service.pin(sid, tc)
    service.deactivate(sid, tc)
    service.deactivate(sid, tc)
    service.unpin(sid, tc)
    service.unpin(sid, tc)
    assert service.log_position(sid) == seq + 2
    assert StoreProbe.of(store).commits == probe.commits + 2


# -- deletion and resume (§3.6, §5.9) -----------------------------------------------------------


def test_a_deleted_file_keeps_its_history(
    service: ContextService, sid: str, files: FakeFileReader, host_id: str
) -> None:
    files.write("/p/old.py", "x = 1\n")
    fid = service.index_file(sid, "/p/old.py").object_id
    files.delete("/p/old.py")

    report = service.resume_session(sid)

    assert (report.deleted, report.updated, report.orphaned, report.unchanged) == (
        (fid,),
        (),
        (),
        0,
    )
    history = service.history(fid)
    assert [v.document["content"] for v in history] == ["x = 1\n", None]
    deleted = history[1].document
    assert (deleted["file_hash"], deleted["content_hash"], deleted["char_count"]) == (None, None, 0)
    assert deleted["content_status"] == "deleted"
    assert deleted["xt/id"] == fid and deleted["source"] == history[0].document["source"]
    ctx = service.assemble(sid)
    assert ctx.metadata == (f"id={fid} type=file path=/p/old.py file_type=py [deleted]",)
    assert ctx.active == (ActiveBlock(fid, None),)  # sets unchanged by reconciliation
    assert ctx.active[0].text == f"ACTIVE_CONTENT id={fid}\n[no content]"

    # Resuming again records nothing new; the file coming back is a new version.
    assert service.resume_session(sid).unchanged == 1
    assert len(service.history(fid)) == 2
    files.write("/p/old.py", "x = 2\n")
    assert service.resume_session(sid).updated == (fid,)
    assert history_contents(service, fid) == ["x = 1\n", None, "x = 2\n"]


def test_resume_updates_changed_files_without_touching_the_sets(
    service: ContextService, sid: str, files: FakeFileReader, host_id: str
) -> None:
    files.write("/p/a.py", "a1")
    files.write("/p/b.py", "b1")
    a = service.index_file(sid, "/p/a.py").object_id
    b = service.index_file(sid, "/p/b.py").object_id
    service.deactivate(sid, b)
    files.write("/p/a.py", "a2")
    files.write("/p/b.py", "b2")
    before = sets(service.state(sid))

    report = service.resume_session(sid)

    assert (report.updated, report.deleted, report.orphaned, report.unchanged) == (
        (a, b),
        (),
        (),
        0,
    )
    assert sets(service.state(sid)) == before  # b stays deactivated: no force-activation
    assert history_contents(service, b) == ["b1", "b2"]
    assert service.assemble(sid).active == (ActiveBlock(a, "a2"),)
    triggers = [
        ev["trigger"]
        for entry in service.store.session_log(sid)
        for ev in entry_events(entry)
        if ev["event"] == "FileIndexed"
    ]
    assert triggers == ["agent_read", "agent_read", "resume", "resume"]


def test_resume_leaves_unreachable_and_stub_files_alone(
    service: ContextService, sid: str, files: FakeFileReader, host_id: str
) -> None:
    files.write("/p/a.py", "a1")
    a = service.index_file(sid, "/p/a.py").object_id
    service.discover(sid, ["/p/never-read.py"])
    files.make_unreachable("/p/a.py")
    files.delete("/p/a.py")
    report = service.resume_session(sid)
    assert (report.orphaned, report.deleted, report.updated, report.unchanged) == ((a,), (), (), 0)
    assert history_contents(service, a) == ["a1"]
    assert history_contents(service, file_id(host_id, "/p/never-read.py")) == [None]


def test_resume_restores_every_set_and_the_chat(
    make_service: MakeService, service: ContextService, sid: str, files: FakeFileReader
) -> None:
    files.write("/p/a.py", "a")
    a = service.index_file(sid, "/p/a.py").object_id
    service.discover(sid, ["/p/b.py"])
    service.record_user_message(sid, "do it")
    tcs = [tool_call(service, sid, f"tc-{n}") for n in range(7)]
    service.deactivate(sid, a)
    service.pin(sid, tcs[0])
    service.activate(sid, tcs[1])
    expected = service.state(sid)
    assert set(expected.auto_active) == set(tcs[2:])  # tc-0 pinned after collapse; tc-1 explicit

    fresh = make_service()
    report = fresh.resume_session(sid)

    state = fresh.state(sid)
    assert (report.updated, report.deleted, report.orphaned, report.unchanged) == ((), (), (), 1)
    assert state == expected
    assert fresh.assemble(sid) == service.assemble(sid)


def test_pins_survive_resume(make_service: MakeService, service: ContextService, sid: str) -> None:
    service.record_user_message(sid, "go")
    pinned = tool_call(service, sid, "tc-pinned")
    service.pin(sid, pinned)

    fresh = make_service()
    fresh.resume_session(sid)
    assert set(fresh.state(sid).pinned) == {pinned}
    for n in range(6):
        tool_call(fresh, sid, f"tc-{n}")
    assert set(fresh.state(sid).active) == {pinned, "tc-1", "tc-2", "tc-3", "tc-4", "tc-5"}
    for _ in range(3):
        fresh.record_user_message(sid, "next")
    assert set(fresh.state(sid).active) == {pinned}
    fresh.unpin(sid, pinned)
    assert set(fresh.state(sid).active) == set()


def test_open_session_starts_then_resumes(
    make_service: MakeService, service: ContextService, ns: str
) -> None:
    sid = f"{ns}opened"
    assert service.open_session(sid, "prompt") is None
    service.record_user_message(sid, "hi")
    report = make_service().open_session(sid, "ignored")
    assert report is not None and report.session_id == sid
    assert sid in service.sessions()


# -- auto-collapse window (§4.3) ---------------------------------------------------------------


def test_window_keeps_the_last_five_tool_calls_of_a_turn(service: ContextService, sid: str) -> None:
    service.record_user_message(sid, "go")
    tcs = [tool_call(service, sid, f"tc-{n}") for n in range(7)]
    state = service.state(sid)
    assert set(state.active) == set(tcs[2:])
    assert set(state.pool) == set(tcs)
    collapsed = [
        ev["object_id"]
        for entry in service.store.session_log(sid)
        for ev in entry_events(entry)
        if ev["event"] == "ObjectDeactivated"
    ]
    assert collapsed == ["tc-0", "tc-1"]
    bys = {
        ev["by"]
        for entry in service.store.session_log(sid)
        for ev in entry_events(entry)
        if ev["event"] == "ObjectDeactivated"
    }
    assert bys == {"window"}


def test_window_keeps_tool_calls_of_the_three_most_recent_turns(
    service: ContextService, sid: str
) -> None:
    service.record_user_message(sid, "turn 1")
    first = tool_call(service, sid, "tc-1")
    service.record_user_message(sid, "turn 2")
    second = tool_call(service, sid, "tc-2")
    service.record_user_message(sid, "turn 3")
    assert set(service.state(sid).active) == {first, second}
    service.record_user_message(sid, "turn 4")
    assert set(service.state(sid).active) == {second}
    service.record_user_message(sid, "turn 5")
    assert set(service.state(sid).active) == set()


def test_tool_calls_before_the_first_user_message_are_turn_zero(
    service: ContextService, sid: str
) -> None:
    early = tool_call(service, sid, "tc-0")
    service.record_user_message(sid, "1")
    service.record_user_message(sid, "2")
    assert set(service.state(sid).active) == {early}
    service.record_user_message(sid, "3")
    assert set(service.state(sid).active) == set()


def test_window_sizes_are_configurable(make_service: MakeService, ns: str) -> None:
    service = make_service(
        settings=Settings(policy="ssot", window=CollapseWindow(per_turn=2, turns=1))
    )
    sid = f"{ns}small"
    service.start_session(sid)
    service.record_user_message(sid, "a")
    tcs = [tool_call(service, sid, f"tc-{n}") for n in range(3)]
    assert set(service.state(sid).active) == set(tcs[1:])
    service.record_user_message(sid, "b")
    assert set(service.state(sid).active) == set()

    # A per-session window overrides the service default.
    other = f"{ns}wide"
    service.start_session(other, window=CollapseWindow(per_turn=10, turns=2))
    assert service.state(other).window == CollapseWindow(per_turn=10, turns=2)


def test_pinned_tool_calls_are_exempt_from_the_window(service: ContextService, sid: str) -> None:
    service.record_user_message(sid, "go")
    first = tool_call(service, sid, "tc-first")
    service.pin(sid, first)
    later = [tool_call(service, sid, f"tc-{n}") for n in range(5)]
    assert set(service.state(sid).active) == {first, *later}
    for n in range(3):
        service.record_user_message(sid, f"more {n}")
    assert set(service.state(sid).active) == {first}
    service.unpin(sid, first)  # the window applies again, at once
    assert set(service.state(sid).active) == set()


def test_an_explicit_deactivate_is_never_undone(service: ContextService, sid: str) -> None:
    service.record_user_message(sid, "go")
    tc = tool_call(service, sid, "tc-x")
    service.deactivate(sid, tc)
    tool_call(service, sid, "tc-y")
    service.record_user_message(sid, "again")
    assert tc not in service.state(sid).active
    service.pin(sid, tc)
    service.unpin(sid, tc)
    assert tc not in service.state(sid).active


def test_an_explicit_activate_of_an_old_tool_call_stays(service: ContextService, sid: str) -> None:
    service.record_user_message(sid, "go")
    old = tool_call(service, sid, "tc-old")
    for n in range(5):
        tool_call(service, sid, f"tc-{n}")
    assert old not in service.state(sid).active

    service.activate(sid, old)
    for n in range(5, 10):
        tool_call(service, sid, f"tc-{n}")
    for n in range(4):
        service.record_user_message(sid, f"turn {n}")
    assert set(service.state(sid).active) == {old}
    service.deactivate(sid, old)
    assert set(service.state(sid).active) == set()


def test_an_explicit_activate_of_a_recent_tool_call_stays_past_the_window(
    service: ContextService, sid: str
) -> None:
    service.record_user_message(sid, "go")
    recent = tool_call(service, sid, "tc-recent")
    service.activate(sid, recent)  # already active, but now by the agent's choice
    assert recent not in service.state(sid).auto_active
    for n in range(5):
        tool_call(service, sid, f"tc-{n}")
    assert recent in service.state(sid).active


def test_files_are_never_auto_collapsed(service: ContextService, sid: str) -> None:
    fid = service.index_file(sid, "/p/keep.py", "k").object_id
    service.record_user_message(sid, "go")
    for n in range(8):
        tool_call(service, sid, f"tc-{n}")
    for n in range(4):
        service.record_user_message(sid, f"turn {n}")
    assert set(service.state(sid).active) == {fid}


# -- rendering (§4.1) --------------------------------------------------------------------------


def test_rendering_formats_and_section_order(
    service: ContextService, sid: str, files: FakeFileReader, host_id: str
) -> None:
    read = service.index_file(sid, "/p/src/app.ts", "const a = '𝄞';\n").object_id
    empty = service.index_file(sid, "/p/empty.txt", "").object_id
    stub = service.discover(sid, ["/p/README"]).found[0].object_id
    service.record_user_message(sid, "list files")
    service.record_assistant_message(
        sid, "Listing.", [ToolCallRequest("call-1", "ls", {"d": "/p"})]
    )
    service.record_tool_call(sid, "call-1", tool="ls", args={"d": "/p"}, output="src\nREADME\n")
    service.record_assistant_message(sid, "", [ToolCallRequest("call-2", "grep", {"q": "x"})])
    service.record_tool_call(
        sid, "call-2", tool="grep", args={"q": "x"}, output="no match", status="fail"
    )
    service.deactivate(sid, "call-1")
    service.deactivate(sid, empty)
    service.record_assistant_message(sid, "Done.")

    ctx = service.assemble(sid)

    assert ctx == AssembledContext(
        system_prompt="You are careful.",
        metadata=(
            f"id={read} type=file path=/p/src/app.ts file_type=ts char_count=16",
            f"id={empty} type=file path=/p/empty.txt file_type=txt char_count=0",
            f"id={stub} type=file path=/p/README file_type= [unread]",
            "id=call-1 type=toolcall tool=ls status=ok",
            "id=call-2 type=toolcall tool=grep status=fail",
        ),
        chat=(
            RenderedMessage("user", "list files"),
            RenderedMessage(
                "assistant", "Listing.", (ToolCallRequest("call-1", "ls", {"d": "/p"}),)
            ),
            RenderedMessage(
                "tool", "toolcall_ref id=call-1 tool=ls status=ok", toolcall_id="call-1"
            ),
            RenderedMessage("assistant", "", (ToolCallRequest("call-2", "grep", {"q": "x"}),)),
            RenderedMessage(
                "tool",
                "toolcall_ref id=call-2 tool=grep status=fail",
                toolcall_id="call-2",
                is_error=True,
            ),
            RenderedMessage("assistant", "Done."),
        ),
        active=(ActiveBlock(read, "const a = '𝄞';\n"), ActiveBlock("call-2", "no match")),
    )
    assert utf16_len("const a = '𝄞';\n") == 16  # the clef is two UTF-16 code units
    assert ctx.to_text() == "\n\n".join(
        [
            "[system]\nYou are careful.",
            "[metadata]\n" + "\n".join(ctx.metadata),
            "[user]\nlist files",
            "[assistant]\nListing.\n-> ls /p  [call-1]",
            "[tool]\ntoolcall_ref id=call-1 tool=ls status=ok",
            "[assistant]\n\n-> grep x  [call-2]",
            "[tool]\ntoolcall_ref id=call-2 tool=grep status=fail",
            "[assistant]\nDone.",
            f"[active]\nACTIVE_CONTENT id={read}\nconst a = '𝄞';\n\n\n"
            "ACTIVE_CONTENT id=call-2\nno match",
        ]
    )


def test_binary_and_oversized_files_render_their_reason(
    make_service: MakeService, files: FakeFileReader, ns: str, host_id: str
) -> None:
    service = make_service(settings=Settings(policy="ssot", max_file_bytes=10))
    sid = f"{ns}s1"
    service.start_session(sid)
    files.write("/p/img.png", b"\x89PNG\x00\x00")
    files.write("/p/big.log", "0123456789A")
    files.write("/p/latin1.txt", b"caf\xe9")
    png = service.index_file(sid, "/p/img.png").object_id
    big = service.index_file(sid, "/p/big.log").object_id
    latin = service.index_file(sid, "/p/latin1.txt").object_id
    assert service.assemble(sid).metadata == (
        f"id={png} type=file path=/p/img.png file_type=png [binary]",
        f"id={big} type=file path=/p/big.log file_type=log [too large]",
        f"id={latin} type=file path=/p/latin1.txt file_type=txt [binary]",
    )
    doc = service.history(big)[0].document
    assert (doc["content"], doc["file_hash"], doc["content_status"]) == (
        None,
        sha(b"0123456789A"),
        "too_large",
    )


# -- mount mappings (§5.3) ---------------------------------------------------------------------


def test_display_paths_go_through_mount_mappings(
    make_service: MakeService, files: FakeFileReader, ns: str, host_id: str
) -> None:
    mounts = (
        MountMapping("/workspace", "/home/u/project", host_id),
        MountMapping("/workspace/vendor", "/mnt/vendor", host_id),
    )
    service = make_service(mounts=mounts, default_filesystem_id=CONTAINER_FS)
    sid = f"{ns}sandboxed"
    service.start_session(sid)
    files.write("/home/u/project/src/a.py", "a")
    files.write("/mnt/vendor/lib.py", "lib")

    a = service.index_file(sid, "/workspace/src/./a.py")
    lib = service.index_file(sid, "/workspace/vendor/lib.py")
    tmp = service.index_file(sid, "/tmp/scratch.txt", "scratch")

    assert a.object_id == file_id(host_id, "/home/u/project/src/a.py")
    assert lib.object_id == file_id(host_id, "/mnt/vendor/lib.py")  # longest prefix wins
    assert tmp.object_id == file_id(CONTAINER_FS, "/tmp/scratch.txt")
    assert service.assemble(sid).metadata == (
        f"id={a.object_id} type=file path=/workspace/src/a.py file_type=py char_count=1",
        f"id={lib.object_id} type=file path=/workspace/vendor/lib.py file_type=py char_count=3",
        f"id={tmp.object_id} type=file path=/tmp/scratch.txt file_type=txt char_count=7",
    )

    # An unsandboxed agent reading the host path gets the same object, shown canonically.
    host = make_service()
    other = f"{ns}host-agent"
    host.start_session(other)
    same = host.index_file(other, "/home/u/project/src/a.py")
    assert (same.object_id, same.outcome) == (a.object_id, Outcome.UNCHANGED)
    assert host.assemble(other).metadata == (
        f"id={a.object_id} type=file path=/home/u/project/src/a.py file_type=py char_count=1",
    )


def test_display_path_falls_back_to_the_canonical_path(
    make_service: MakeService, ns: str, host_id: str
) -> None:
    service = make_service(mounts=(MountMapping("/workspace", "/home/u/project", host_id),))
    sid = f"{ns}s1"
    service.start_session(sid)
    outside = service.index_file(sid, "/etc/hosts", "127.0.0.1 localhost").object_id
    inside = service.index_file(sid, "/home/u/project/x.md", "x").object_id
    assert service.assemble(sid).metadata == (
        f"id={outside} type=file path=/etc/hosts file_type= char_count=19",
        f"id={inside} type=file path=/workspace/x.md file_type=md char_count=1",
    )


# -- concurrency and failures ------------------------------------------------------------------


def test_two_services_on_one_session_retry_conflicts_and_lose_nothing(
    make_service: MakeService, service: ContextService, sid: str, store: WrappedStore
) -> None:
    second = make_service()
    second.resume_session(sid)
    service.record_user_message(sid, "from A")  # A is behind: conflict on the log entry, retry

    # Interleave deterministically: B commits while A's commit is on its way.
    store.on_commit = lambda: second.record_user_message(sid, "from B")
    service.record_user_message(sid, "from A again")
    second.record_user_message(sid, "B last")

    entries = store.session_log(sid)
    assert [e["seq"] for e in entries] == list(range(1, 7))
    assert [e["command"] for e in entries] == [
        "StartSession",
        "Resume",
        "RecordUserMessage",
        "RecordUserMessage",
        "RecordUserMessage",
        "RecordUserMessage",
    ]
    assert len({e["command_id"] for e in entries}) == 6
    users = chat_texts(second.state(sid))
    assert users == ["from A", "from B", "from A again", "B last"]
    service.record_assistant_message(sid, "A catches up")
    assert list(service.state(sid).turns[-1].messages) == [
        UserMessage("B last"),
        AssistantMessage("A catches up"),
    ]
    runner = SessionRunner(store, CountingClock(), CountingIds())
    assert runner.load(sid).state == service.state(sid)


def test_catching_up_refreshes_what_the_context_shows(
    make_service: MakeService, service: ContextService, sid: str, files: FakeFileReader
) -> None:
    files.write("/p/f.txt", "old")
    fid = service.index_file(sid, "/p/f.txt").object_id
    line = f"id={fid} type=file path=/p/f.txt file_type=txt"
    assert service.assemble(sid).metadata == (f"{line} char_count=3",)
    second = make_service()
    second.resume_session(sid)
    files.write("/p/f.txt", "newer")
    second.index_file(sid, "/p/f.txt")
    second.record_user_message(sid, "from B")

    service.record_user_message(sid, "from A")  # conflict: catch up, then retry

    ctx = service.assemble(sid)
    assert ctx.metadata == (f"{line} char_count=5",)
    assert ctx.active == (ActiveBlock(fid, "newer"),)
    assert [m.text for m in ctx.chat] == ["from B", "from A"]
    fresh = make_service()
    fresh.resume_session(sid)
    assert fresh.assemble(sid) == ctx


def test_threads_writing_one_session_through_two_services_lose_nothing(
    make_service: MakeService, service: ContextService, sid: str, store: WrappedStore
) -> None:
    second = make_service()
    second.resume_session(sid)
    errors: list[BaseException] = []

    def retrying(call: Callable[[], object]) -> None:
        # A ConflictError after the bounded retries guarantees nothing was written: a harness
        # may simply try again.
        while True:
            try:
                call()
                return
            except ConflictError:
                continue

    def worker(action: Callable[[int], object]) -> None:
        try:
            for n in range(30):
                retrying(functools.partial(action, n))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    actions: list[Callable[[int], object]] = [
        lambda n: service.record_user_message(sid, f"user {n}"),
        lambda n: service.record_assistant_message(sid, f"assistant {n}"),
        lambda n: second.record_tool_call(sid, f"tc-{n}", tool="t", args={}, output=str(n)),
    ]
    threads = [threading.Thread(target=worker, args=(action,)) for action in actions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []

    entries = store.session_log(sid)
    assert [e["seq"] for e in entries] == list(range(1, 93))
    assert len({e["command_id"] for e in entries}) == 92
    state = SessionRunner(store, CountingClock(), CountingIds()).load(sid).state
    messages = [m for turn in state.turns for m in turn.messages]
    for prefix, kind in (("user", UserMessage), ("assistant", AssistantMessage)):
        texts = [m.text for m in messages if isinstance(m, kind)]
        assert texts == [f"{prefix} {n}" for n in range(30)]
    assert [m.toolcall_id for m in messages if isinstance(m, ToolResult)] == [
        f"tc-{n}" for n in range(30)
    ]
    assert list(state.index) == [f"tc-{n}" for n in range(30)]
    service.record_user_message(sid, "last")  # each service catches up on its next write
    second.record_user_message(sid, "very last")
    assert second.state(sid) == SessionRunner(store, CountingClock(), CountingIds()).load(sid).state


def test_concurrent_writers_of_one_file_both_succeed_as_versions(
    service: ContextService, sid: str, ns: str, store: WrappedStore, host_id: str
) -> None:
    other = f"{ns}s2"
    service.start_session(other)
    store.on_commit = lambda: service.index_file(other, "/p/f.txt", "from s2")
    result = service.index_file(sid, "/p/f.txt", "from s1")
    fid = file_id(host_id, "/p/f.txt")
    assert result.outcome is Outcome.UPDATED  # decided again on top of s2's version
    assert history_contents(service, fid) == ["from s2", "from s1"]
    assert service.assemble(sid).active == (ActiveBlock(fid, "from s1"),)


def test_endless_conflicts_give_up_after_bounded_retries_and_change_nothing(
    make_service: MakeService, service: ContextService, sid: str, store: WrappedStore
) -> None:
    second = make_service()
    second.resume_session(sid)
    service.record_user_message(sid, "sync")  # catches up with B's resume
    state = service.state(sid)
    attempts = 0

    def interfere() -> None:
        nonlocal attempts
        attempts += 1
        second.record_user_message(sid, f"B {attempts}")
        store.on_commit = interfere

    store.on_commit = interfere
    with pytest.raises(ConflictError) as caught:
        service.record_user_message(sid, "never lands")
    store.on_commit = None
    assert attempts == MAX_ATTEMPTS
    assert any(i.startswith("log:") for i in caught.value.object_ids)  # what did change
    # A caught up with B's commits while retrying; its own command left no trace.
    runner = SessionRunner(store, CountingClock(), CountingIds())
    assert service.state(sid) == runner.load(sid).state != state
    assert service.log_position(sid) == 3 + MAX_ATTEMPTS
    texts = chat_texts(second.state(sid))
    assert "never lands" not in texts
    assert texts[-MAX_ATTEMPTS:] == [f"B {n}" for n in range(1, MAX_ATTEMPTS + 1)]


def test_a_shared_file_other_clients_keep_changing_is_retried_longer_and_named(
    make_service: MakeService, service: ContextService, sid: str, store: WrappedStore, ns: str
) -> None:
    """One writer per session: conflicts on a file other clients write versions of (their
    trackers, their agents) are contention, not a second writer of the session. They are
    retried longer, with random waits, and if they never end the error names the file."""
    other = make_service()
    other.start_session(f"{ns}other")
    changes = 0

    def another_version(limit: int) -> None:
        nonlocal changes
        if changes < limit:
            changes += 1
            other.index_file(f"{ns}other", "/p/shared.py", f"version {changes}")
            store.on_commit = lambda: another_version(limit)

    store.on_commit = lambda: another_version(MAX_ATTEMPTS + 3)
    result = service.index_file(sid, "/p/shared.py", "mine")
    store.on_commit = None
    assert changes == MAX_ATTEMPTS + 3 and result.outcome is Outcome.UPDATED
    assert history_contents(service, result.object_id)[-1] == "mine"

    changes = 0
    store.on_commit = lambda: another_version(10**6)
    with pytest.raises(ConflictError) as caught:
        service.index_file(sid, "/p/shared.py", "mine again")
    store.on_commit = None
    assert caught.value.object_ids == (result.object_id,)
    assert changes == MAX_CONTENDED_ATTEMPTS
    assert "log:" not in str(caught.value)


def test_a_failing_commit_leaves_state_and_store_unchanged(
    service: ContextService, sid: str, store: WrappedStore, files: FakeFileReader
) -> None:
    files.write("/p/a.py", "a")
    service.discover(sid, ["/p/a.py"])
    fid = service.index_file(sid, "/p/a.py").object_id
    service.deactivate(sid, fid)
    context, state, probe = service.assemble(sid), service.state(sid), StoreProbe.of(store)
    seq = service.log_position(sid)

    calls: list[Callable[[], object]] = [
        lambda: service.record_user_message(sid, "hi"),
        lambda: service.index_file(sid, "/p/b.py", "b"),
        lambda: service.activate(sid, fid),
        lambda: service.record_tool_call(sid, "tc-1", tool="t", args={}, output="o"),
        lambda: service.discover(sid, ["/p/c.py"]),
        lambda: service.pin(sid, fid),
        lambda: service.resume_session(sid),
    ]
    for call in calls:
        store.fail_commits = 1
        with pytest.raises(StoreUnavailable):
            call()
        assert service.state(sid) == state
        assert service.log_position(sid) == seq
        assert service.assemble(sid) == context
        assert StoreProbe.of(store) == probe

    service.record_user_message(sid, "works again")
    assert service.log_position(sid) == seq + 1


def test_a_commit_whose_answer_is_lost_is_caught_up_not_duplicated(
    service: ContextService, sid: str, store: WrappedStore
) -> None:
    store.lose_acks = 1
    with pytest.raises(StoreUnavailable):
        service.record_tool_call(sid, "tc-1", tool="t", args={"a": 1}, output="o")
    # The harness retries the same call: it is recognised, not refused or recorded twice.
    assert service.record_tool_call(sid, "tc-1", tool="t", args={"a": 1}, output="o") == "tc-1"
    service.record_user_message(sid, "next")
    commands = [e["command"] for e in store.session_log(sid)]
    assert commands == ["StartSession", "RecordToolCall", "RecordUserMessage"]
    assert list(service.state(sid).index) == ["tc-1"]


# -- the past (event-sourced persistence) ------------------------------------------------------


def test_context_at_rebuilds_every_past_context_exactly(
    service: ContextService, sid: str, files: FakeFileReader, host_id: str
) -> None:
    seen: dict[int, AssembledContext] = {service.log_position(sid): service.assemble(sid)}
    a, b = file_id(host_id, "/p/a.py"), file_id(host_id, "/p/b.py")
    files.write("/p/a.py", "a1")
    steps: list[Callable[[], object]] = [
        lambda: service.index_file(sid, "/p/a.py"),
        lambda: service.discover(sid, ["/p/b.py", "/p/c.py"]),
        lambda: service.record_user_message(sid, "turn 1"),
        lambda: service.record_assistant_message(sid, "", [ToolCallRequest("tc-1", "t", {})]),
        lambda: service.record_tool_call(sid, "tc-1", tool="t", args={}, output="first output"),
        lambda: files.write("/p/a.py", "a2"),
        lambda: service.index_file(sid, "/p/a.py"),
        lambda: service.deactivate(sid, a),
        lambda: files.write("/p/b.py", "b1"),
        lambda: service.activate(sid, b),
        lambda: service.pin(sid, "tc-1"),
        lambda: files.delete("/p/b.py"),
        lambda: service.resume_session(sid),
        lambda: service.record_user_message(sid, "turn 2"),
        *[
            lambda n=n: service.record_tool_call(sid, f"tc-x{n}", tool="t", args={}, output="o")
            for n in range(6)
        ],
        lambda: service.unpin(sid, "tc-1"),
    ]
    for action in steps:
        action()
        seen[service.log_position(sid)] = service.assemble(sid)

    last = service.log_position(sid)
    assert sorted(seen) == list(range(1, last + 1))
    for seq, context in seen.items():
        assert service.context_at(sid, seq) == context, seq
    assert service.context_at(sid, 2).active == (ActiveBlock(a, "a1"),)


def test_state_at_matches_the_state_after_each_command(service: ContextService, sid: str) -> None:
    states = {1: service.state(sid)}
    for n in range(40):
        if n % 5 == 0:
            service.record_user_message(sid, f"turn {n}")
        else:
            tool_call(service, sid, f"tc-{n}", "x" * n)
        states[service.log_position(sid)] = service.state(sid)
    for seq, state in states.items():
        past = service.state_at(sid, seq)
        assert (past.seq, past.state) == (seq, state)


def test_state_at_refuses_positions_outside_the_log(service: ContextService, sid: str) -> None:
    for seq in (0, -1, service.log_position(sid) + 1):
        with pytest.raises(InvalidInput) as raised:
            service.state_at(sid, seq)
        assert raised.value.value == seq
        assert f"log position {seq!r}" in str(raised.value)


def test_bytes_written_per_turn_stay_flat_as_the_session_grows(
    service: ContextService, sid: str, store: WrappedStore
) -> None:
    """Structural: cumulative bytes per turn at 400 turns stay within 1.5x of those at 50, while
    rewriting the chat every turn (the design's scheme) would cost far more than that per turn."""
    marks: dict[int, int] = {}
    start = store.bytes_committed
    for turn in range(1, 401):
        service.record_user_message(sid, f"question {turn:04d}")
        tcid = f"call-{turn:05d}"
        service.record_assistant_message(sid, "Running.", [ToolCallRequest(tcid, "bash", {"c": 1})])
        service.record_tool_call(sid, tcid, tool="bash", args={"c": 1}, output="y" * 200)
        service.record_assistant_message(sid, "Done.")
        if turn in (50, 400):
            marks[turn] = store.bytes_committed - start
    per_turn_50, per_turn_400 = marks[50] / 50, marks[400] / 400
    assert per_turn_400 <= 1.5 * per_turn_50, (per_turn_50, per_turn_400)

    chat_now = service.store.get(f"chat:{sid}")
    assert chat_now is not None
    # Guard: the scheme this replaces would write the whole chat each turn.
    assert json_bytes(chat_now) > 20 * per_turn_400
    # Each command's log entry is the same size whatever the session's length.
    entries = store.session_log(sid)
    sizes: dict[str, set[int]] = {e["command"]: set() for e in entries}
    for e in entries[-400:]:
        sizes[e["command"]].add(json_bytes({k: v for k, v in e.items() if k != "seq"}))
    assert all(len(s) <= 2 for s in sizes.values()), sizes


def test_chat_message_parts_are_kept_exactly(service: ContextService, sid: str) -> None:
    service.record_user_message(sid, "ünïcödé 𝄞\nline")
    call = ToolCallRequest("c-1", "edit", {"path": "/p/x", "n": [1, 2.5, None], "o": {"k": True}})
    service.record_assistant_message(sid, "", [call])
    service.record_tool_call(sid, "c-1", tool="edit", args=call.arguments, output=None)
    turns = service.state_at(sid, service.log_position(sid)).state.turns
    assert list(turns[1].messages) == [
        UserMessage("ünïcödé 𝄞\nline"),
        AssistantMessage("", (call,)),
        ToolResult("c-1"),
    ]


def test_tuples_in_tool_arguments_replay_as_they_were_recorded(
    make_service: MakeService, service: ContextService, sid: str
) -> None:
    call = ToolCallRequest("c-1", "edit", {"lines": (1, 2), "nested": {"pair": ("a", "b")}})
    service.record_assistant_message(sid, "", [call])
    service.record_tool_call(sid, "c-1", tool="edit", args={"span": (3, 4)}, output="ok")
    live = service.state(sid)
    assert service.state_at(sid, service.log_position(sid)).state == live
    fresh = make_service()
    fresh.resume_session(sid)
    assert fresh.state(sid) == live
    assert fresh.object(sid, "c-1") == service.object(sid, "c-1")


def test_activating_a_deleted_file_that_is_back_reads_it_again(
    service: ContextService, sid: str, files: FakeFileReader, host_id: str
) -> None:
    """docs/specification.md §2: a version with neither file_hash nor content is read on activation,
    and a deletion is such a version."""
    files.write("/p/back.py", "x = 1\n")
    fid = service.index_file(sid, "/p/back.py").object_id
    files.delete("/p/back.py")
    service.rehash(sid)
    service.deactivate(sid, fid)
    deleted = service.object(sid, fid)
    assert isinstance(deleted, FileObject) and deleted.content_status == "deleted"

    still_gone = service.activate(sid, fid)  # not back yet: the deletion is what shows

    assert still_gone.message == "file /p/back.py is active; it has no content (deleted)"
    assert history_contents(service, fid) == ["x = 1\n", None]

    service.deactivate(sid, fid)
    files.write("/p/back.py", "x = 2\n")
    result = service.activate(sid, fid)

    assert result.message == "file /p/back.py is active (6 characters)"
    assert history_contents(service, fid) == ["x = 1\n", None, "x = 2\n"]
    assert service.assemble(sid).active[-1] == ActiveBlock(fid, "x = 2\n")


def test_the_inline_activate_tool_reads_a_deleted_file_that_is_back(
    service: ContextService, ns: str, files: FakeFileReader
) -> None:
    from selfctx.adapters.harness.tools import handle_context_tool
    from selfctx.application.policies import policy_by_name

    sid = f"{ns}inline"
    service.start_session(sid, policy=policy_by_name("inline"))
    files.write("/p/back.py", "x = 1\n")
    fid = service.index_file(sid, "/p/back.py").object_id
    files.delete("/p/back.py")
    service.rehash(sid)
    files.write("/p/back.py", "x = 2\n")

    answer = handle_context_tool(service, sid, "activate", {"id": fid})

    assert answer.ok and answer.message.endswith("]\nx = 2\n")
    assert history_contents(service, fid) == ["x = 1\n", None, "x = 2\n"]
