"""Stored documents: every object type survives ``to_document`` -> JSON -> ``from_document``, and
a snapshot pair rebuilds exactly the state it was taken of."""

from __future__ import annotations

import contextlib
import hashlib
import json
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from selfctx.domain import infrastructure
from selfctx.domain.chat import AssistantMessage, ToolCallRequest, turn_to_json
from selfctx.domain.documents import (
    StoredObject,
    from_document,
    to_document,
    toolcall_without_content,
)
from selfctx.domain.errors import InvalidInput, SelfContextError
from selfctx.domain.hashing import metadata_hash
from selfctx.domain.infrastructure import (
    ChatObject,
    SessionObject,
    WrittenChat,
    state_from_snapshot,
)
from selfctx.domain.objects import (
    FileObject,
    FilesystemSource,
    FileView,
    SummaryObject,
    SystemPromptObject,
    ToolcallObject,
)
from selfctx.domain.session import commands as c
from selfctx.domain.session.machine import decide, fold
from selfctx.domain.session.state import (
    INITIAL,
    POLICY_NAMES,
    CollapseWindow,
    PolicyConfig,
    SessionState,
)

TEXT = st.text(max_size=12)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
ARGS = st.dictionaries(TEXT, JSON, max_size=4)
SOURCES = st.builds(
    FilesystemSource,
    filesystem_id=st.text(min_size=1, max_size=8),
    path=st.lists(st.text(min_size=1, max_size=6), max_size=3).map(lambda p: "/" + "/".join(p)),
)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@st.composite
def files(draw: st.DrawFn) -> FileObject:
    source = draw(SOURCES)
    kind = draw(st.sampled_from(["text", "stub", "deleted", "binary", "too_large"]))
    if kind == "stub":
        return FileObject.stub(source)
    content = draw(TEXT)
    version = FileObject.build(source, content=content, file_hash=sha(content))
    if kind == "deleted":
        return version.deleted()
    if kind in ("binary", "too_large"):
        return FileObject.build(
            source,
            content=None,
            file_hash=sha(content),
            content_status=kind,  # type: ignore[arg-type]
        )
    return version


TOOLCALLS = st.builds(
    ToolcallObject.build,
    st.text(min_size=1, max_size=8).filter(lambda i: ":" not in i),
    tool=st.text(min_size=1, max_size=8),
    args=ARGS,
    output=st.none() | TEXT,
    status=st.sampled_from(["ok", "fail"]),
    chat_ref=st.just("chat:s"),
    args_display=st.none() | TEXT,
    file_refs=st.none() | st.lists(st.text(min_size=1, max_size=8), max_size=3),
    file_views=st.none()
    | st.lists(
        st.one_of(
            st.builds(
                FileView, st.text(min_size=1, max_size=8), st.sampled_from(["read", "change"])
            ),
            st.builds(
                FileView,
                st.text(min_size=1, max_size=8),
                st.just("lines"),
                st.lists(
                    st.tuples(st.integers(1, 50), st.integers(50, 99)) | st.just((-5, -1)),
                    min_size=1,
                    max_size=3,
                ).map(tuple),
            ),
        ),
        max_size=3,
    ),
)
PROMPTS = st.builds(SystemPromptObject.build, st.just("system_prompt:s"), TEXT)
SUMMARIES = st.builds(
    SummaryObject.build,
    st.just("s"),
    TEXT,
    case=st.sampled_from(["summarize", "truncate"]),
    upto=st.integers(1, 50),
)

CALL_IDS = st.sampled_from(["t1", "t2", "t3", "t4", "t5"])
COMMANDS = st.one_of(
    TEXT.map(c.RecordUserMessage),
    st.builds(
        lambda text, calls: c.RecordAssistantMessage(AssistantMessage(text, tuple(calls))),
        TEXT,
        st.lists(
            st.builds(ToolCallRequest, CALL_IDS, TEXT, ARGS), max_size=2, unique_by=lambda r: r.id
        ),
    ),
    st.builds(
        lambda call, activate: c.RecordToolCall(call, activate),
        st.builds(
            ToolcallObject.build,
            CALL_IDS,
            tool=st.just("bash"),
            args=ARGS,
            output=TEXT,
            status=st.just("ok"),
            chat_ref=st.just("chat:s"),
        ),
        st.booleans(),
    ),
    st.builds(
        lambda sources: c.Discover(tuple((FileObject.stub(s), None) for s in sources)),
        st.lists(SOURCES, max_size=2),
    ),
    st.builds(c.Activate, CALL_IDS),
    st.builds(c.Deactivate, CALL_IDS),
    st.builds(c.Pin, CALL_IDS),
    st.builds(c.Unpin, CALL_IDS),
    st.builds(  # a collapse that records which later output superseded an output (decision 0021)
        lambda a, b: c.CollapseToFit((a,), "collapsed", ((a, b),)), CALL_IDS, CALL_IDS
    ),
    st.builds(  # a collapse whose reference keeps some of the output's lines (decision 0075)
        lambda a, text: c.CollapseToFit((a,), "", kept=((a, text),)), CALL_IDS, TEXT
    ),
    st.builds(c.Checkpoint, st.none() | TEXT),
    SUMMARIES.map(c.CompactChat),
)
POLICIES = st.builds(
    PolicyConfig,
    name=st.sampled_from(POLICY_NAMES),
    trigger_tokens=st.none() | st.integers(1, 10**6),
    budget_tokens=st.none() | st.integers(1, 10**6),
)


@st.composite
def states(draw: st.DrawFn) -> SessionState:
    prompt = draw(PROMPTS)
    window = CollapseWindow(draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    state = fold(decide(INITIAL, c.StartSession("s", prompt, "chat:s", window, draw(POLICIES))))
    for command in draw(st.lists(COMMANDS, max_size=25)):
        with contextlib.suppress(SelfContextError):  # refused: changes nothing
            state = fold(decide(state, command), state)
    return state


STORED = st.one_of(
    files(),
    TOOLCALLS,
    PROMPTS,
    SUMMARIES,
    states().map(ChatObject.of),
    st.builds(SessionObject.of, states(), st.integers(1, 10**6)),
)


def through_json(doc: dict[str, Any]) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(json.dumps(doc, ensure_ascii=False, allow_nan=False))
    return loaded


@given(TOOLCALLS)
def test_a_tool_call_read_without_its_content_is_the_call_without_it(call: ToolcallObject) -> None:
    # what a resume holds of a tool call read without its content (decision 0104): every field
    # of the call but the content, its length kept when it has an output
    doc = through_json(to_document(call))
    read = {k: v for k, v in doc.items() if k not in ("content", "source")}
    held = toolcall_without_content(read)
    assert held == attrs.evolve(call, content=None, content_length=held.content_length)
    assert held.content_length == (call.content_length if call.content_hash is not None else 0)
    with pytest.raises(InvalidInput):
        toolcall_without_content({**read, "type": "file"})


@given(STORED)
def test_every_object_round_trips_through_its_document(obj: StoredObject) -> None:
    doc = to_document(obj)
    assert all(isinstance(k, str) for k in doc)
    assert doc["xt/id"] == obj.id and doc["type"] == obj.type
    assert from_document(doc) == obj
    assert from_document(through_json(doc)) == obj


@given(states(), st.integers(1, 1000))
def test_a_snapshot_pair_rebuilds_the_state_exactly(state: SessionState, seq: int) -> None:
    session = from_document(through_json(to_document(SessionObject.of(state, seq))))
    chat = from_document(through_json(to_document(ChatObject.of(state))))
    assert isinstance(session, SessionObject) and isinstance(chat, ChatObject)
    assert session.seq == seq
    assert state_from_snapshot(session, chat) == state


def _hashed_whole(state: SessionState) -> tuple[list[dict[str, Any]], str]:
    """A chat's turns and metadata hash written from scratch, without ``ChatObject.of``."""
    turns = [turn_to_json(turn) for turn in state.turns]
    fields = {
        "turns": turns,
        "session_ref": f"session:{state.session_id}",
        "turn_count": len(turns),
        "toolcall_refs": [ref for turn in state.turns for ref in turn.toolcall_ids],
    }
    return turns, metadata_hash(fields)


class _LosingShelf(infrastructure.MemoryShelf):
    """A shelf that loses what it holds at every other read or write."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def keep(self, at: int, data: bytes) -> None:
        self.calls += 1
        if self.calls % 4 == 0:
            raise infrastructure.ShelfLost("lost on write")
        super().keep(at, data)

    def read(self, size: int) -> bytes:
        self.calls += 1
        if self.calls % 3 == 0:
            raise infrastructure.ShelfLost("lost on read")
        return super().read(size)


@given(states(), st.lists(COMMANDS, max_size=5), st.randoms(use_true_random=False))
def test_the_chat_of_a_state_is_its_turns_hashed_whole(
    state: SessionState, more: Any, rng: Any
) -> None:
    """A chat's snapshot reuses what the last one wrote of the turns it shares with it (decision
    0143, the text on a shelf): the same document and hashes as the turns written and hashed from
    scratch, whatever the order the states come in (a rollback, a compaction, an earlier state
    written again) and whether the shelf keeps what it was given or loses it."""
    states = [state]
    for command in more:  # states sharing their messages with the ones before
        with contextlib.suppress(SelfContextError):
            states.append(fold(decide(states[-1], command), states[-1]))
    shuffled = states + rng.sample(states, len(states))
    for written in (WrittenChat(), WrittenChat(_LosingShelf), None):
        for each in shuffled:
            chat = ChatObject.of(each, written)
            turns, meta = _hashed_whole(each)
            assert list(chat.turns) == turns
            assert chat.metadata_hash == meta
            assert ChatObject.of(each) == chat
            if written is not None and written.turns is not None:
                assert written.turns is each.turns and len(written.ends) == len(each.turns)


def test_the_written_chat_keeps_its_text_on_the_shelf_and_machine_integers() -> None:
    """What a session keeps between snapshots of the chat it wrote: the turns (the state's own
    vector), a byte offset a turn and the text on the shelf, which a turn that grows extends."""
    shelf = infrastructure.MemoryShelf()
    written = WrittenChat(lambda: shelf)
    state = _started()
    ChatObject.of(state, written)
    size = written.size
    assert shelf.read(size) == b'{"messages":[],"number":0}'
    grown = fold(decide(state, c.RecordUserMessage("more")), state)
    chat = ChatObject.of(grown, written)
    assert chat.metadata_hash == _hashed_whole(grown)[1]
    assert written.size > size and shelf.read(size) == b'{"messages":[],"number":0}'
    assert list(written.ends) == [13, written.size - len(b'],"number":1}')]
    assert written.turns is grown.turns


def test_optional_fields_are_absent_not_null() -> None:
    call = ToolcallObject.build("t", tool="x", args={}, output="o", status="ok", chat_ref="chat:s")
    doc = to_document(call)
    assert "args_display" not in doc and "file_refs" not in doc
    text = FileObject.build(FilesystemSource("h", "/a"), content="a", file_hash=sha("a"))
    assert "content_status" not in to_document(text)
    assert to_document(text.deleted())["content_status"] == "deleted"


@pytest.mark.parametrize(
    "doc",
    [
        {"xt/id": "x", "type": "folder"},
        {"xt/id": "x", "type": "file"},
        {"xt/id": "x"},
        {
            "xt/id": "x",
            "type": "file",
            "source": {"type": "s3", "bucket": "b", "key": "k"},
            "identity_hash": "x",
            "content": None,
            "file_type": "",
            "char_count": 0,
            "file_hash": None,
            "content_hash": None,
            "metadata_hash": "m",
            "object_hash": "o",
        },
    ],
)
def test_documents_of_unknown_shape_are_refused(doc: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput):
        from_document(doc)


def test_a_snapshot_keeps_which_output_superseded_which() -> None:
    prompt = SystemPromptObject.build("system_prompt:s", "p")
    state = fold(decide(INITIAL, c.StartSession("s", prompt, "chat:s")))
    for call_id in ("t1", "t2"):
        call = ToolcallObject.build(
            call_id, tool="x", args={}, output="o", status="ok", chat_ref="chat:s"
        )
        state = fold(decide(state, c.RecordToolCall(call)), state)
    state = fold(decide(state, c.CollapseToFit(("t1",), "note", (("t1", "t2"),))), state)
    assert dict(state.superseded) == {"t1": "t2"}
    session = from_document(through_json(to_document(SessionObject.of(state, 5))))
    chat = from_document(through_json(to_document(ChatObject.of(state))))
    assert isinstance(session, SessionObject) and isinstance(chat, ChatObject)
    assert session.superseded == (("t1", "t2"),)
    assert state_from_snapshot(session, chat) == state
    # a snapshot written before the field existed reads as "none superseded"
    old = to_document(
        SessionObject.of(fold(decide(INITIAL, c.StartSession("s", prompt, "chat:s"))), 1)
    )
    assert "superseded" not in old
    restored = from_document(old)
    assert isinstance(restored, SessionObject) and restored.superseded == ()


def test_a_snapshot_keeps_the_lines_a_collapsed_output_still_shows() -> None:
    prompt = SystemPromptObject.build("system_prompt:s", "p")
    state = fold(decide(INITIAL, c.StartSession("s", prompt, "chat:s")))
    call = ToolcallObject.build(
        "t1", tool="x", args={}, output="a\nb", status="ok", chat_ref="chat:s"
    )
    state = fold(decide(state, c.RecordToolCall(call)), state)
    state = fold(
        decide(state, c.CollapseToFit(("t1",), "", kept=(("t1", "b\n[... 1 line]"),))), state
    )
    assert dict(state.excerpts) == {"t1": "b\n[... 1 line]"}
    session = from_document(through_json(to_document(SessionObject.of(state, 5))))
    chat = from_document(through_json(to_document(ChatObject.of(state))))
    assert isinstance(session, SessionObject) and isinstance(chat, ChatObject)
    assert state_from_snapshot(session, chat) == state
    # activated again, it shows whole: the excerpt is gone, also after a later collapse
    state = fold(decide(state, c.Activate("t1")), state)
    assert dict(state.excerpts) == {}
    state = fold(decide(state, c.Deactivate("t1")), state)
    assert dict(state.excerpts) == {}
    assert "excerpts" not in to_document(SessionObject.of(state, 6))


def _started(*user_messages: str) -> SessionState:
    prompt = SystemPromptObject.build("system_prompt:s", "")
    state = fold(decide(INITIAL, c.StartSession("s", prompt, "chat:s")))
    for text in user_messages:
        state = fold(decide(state, c.RecordUserMessage(text)), state)
    return state


def test_the_chat_counts_every_turn_of_its_turns() -> None:
    """``turn_count`` is the number of turns, turn 0 (the preamble) included (specification §2)."""
    state = _started("first", "second")
    doc = to_document(ChatObject.of(state))
    assert doc["turn_count"] == len(doc["turns"]) == 3
    assert to_document(ChatObject.of(_started()))["turn_count"] == 1


SESSION_FIELDS = {
    "session_id",
    "chat_ref",
    "system_prompt_ref",
    "session_index",
    "metadata_pool",
    "active_set",
    "pinned_set",
}
ENVELOPE_AND_HASHES = {"xt/id", "type", "source", "identity_hash", "content"}
ENVELOPE_AND_HASHES |= {"content_hash", "metadata_hash", "object_hash"}
SNAPSHOT_FIELDS = {"seq", "auto_active", "window", "policy", "last_used", "use_clock"}
"""The fields decision 0001 lists beyond the design's, which a snapshot needs to rebuild a state."""


ROLLBACK_FIELDS = {"checkpoints", "detached"}
"""The two decision 0001 lists as present only when not empty (decision 0041)."""
COMPACTION_FIELDS = {"compacted", "summary"}
"""The two decision 0001 lists as present only after a compaction (decision 0043)."""


def test_the_session_document_holds_the_ssot_fields_and_the_recorded_snapshot_fields() -> None:
    doc = to_document(SessionObject.of(_started("go"), 1))
    assert set(doc) == ENVELOPE_AND_HASHES | SESSION_FIELDS | SNAPSHOT_FIELDS
    # decision 0001's seventh field, present when an output was collapsed as superseded
    state = _started("go")
    for call_id in ("t1", "t2"):
        call = ToolcallObject.build(
            call_id, tool="x", args={}, output="o", status="ok", chat_ref="chat:s"
        )
        state = fold(decide(state, c.RecordToolCall(call)), state)
    state = fold(decide(state, c.CollapseToFit(("t1",), "", (("t1", "t2"),))), state)
    doc = to_document(SessionObject.of(state, 2))
    assert set(doc) == ENVELOPE_AND_HASHES | SESSION_FIELDS | SNAPSHOT_FIELDS | {"superseded"}


def test_after_a_rollback_the_session_document_holds_its_checkpoints_and_detached_calls() -> None:
    from selfctx.domain.session.machine import decide_and_fold

    state = _started("go")
    state = decide_and_fold(state, c.Checkpoint("cp"))[1]
    target = state
    state = decide_and_fold(state, c.RecordUserMessage("hi"))[1]
    call = ToolCallRequest("tc", "bash", {})
    state = decide_and_fold(state, c.RecordAssistantMessage(AssistantMessage("", (call,))))[1]
    toolcall = ToolcallObject.build(
        "tc", tool="bash", args={}, output="x", status="ok", chat_ref=state.chat_id
    )
    state = decide_and_fold(state, c.RecordToolCall(toolcall))[1]
    rollback = c.Rollback(
        "cp",
        c.RollbackTarget(
            tuple(target.turns),
            frozenset(target.pool),
            frozenset(target.active),
            frozenset(target.pinned),
            frozenset(target.auto_active),
        ),
    )
    state = decide_and_fold(state, rollback)[1]
    snapshot = SessionObject.of(state, 9)
    doc = to_document(snapshot)
    fields = ENVELOPE_AND_HASHES | SESSION_FIELDS | SNAPSHOT_FIELDS | ROLLBACK_FIELDS
    assert set(doc) == fields
    assert (doc["checkpoints"], doc["detached"]) == (["cp", "before-rollback"], ["tc"])
    assert from_document(doc) == snapshot
    summary = SummaryObject.build(state.session_id, "what happened", case="summarize", upto=1)
    state = decide_and_fold(state, c.CompactChat(summary))[1]
    doc = to_document(SessionObject.of(state, 10))
    assert set(doc) == fields | COMPACTION_FIELDS
    assert (doc["compacted"], doc["summary"]) == (1, "what happened")
