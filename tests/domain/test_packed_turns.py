"""A chat's closed turns packed (decision 0142): every turn before the last few holds its
messages as one compressed text; it is equal to the turn it was, reads back the same messages
and writes the same stored form and snapshot, byte for byte, whatever is held read back."""

from __future__ import annotations

import contextlib
import json
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from selfctx.domain import chat
from selfctx.domain.chat import (
    AssistantMessage,
    ContextNote,
    ToolCallRequest,
    ToolResult,
    Turn,
    UserMessage,
    closed,
    closed_from_stored,
    thaw_json,
    turn_from_json,
    turn_to_json,
)
from selfctx.domain.documents import from_document, to_document
from selfctx.domain.errors import SelfContextError
from selfctx.domain.infrastructure import (
    ChatObject,
    SessionObject,
    WrittenChat,
    state_from_snapshot,
)
from selfctx.domain.objects import SystemPromptObject
from selfctx.domain.session import commands as c
from selfctx.domain.session.machine import decide, fold
from selfctx.domain.session.state import INITIAL, CollapseWindow, PolicyConfig, SessionState
from tests.domain.test_documents import ARGS, COMMANDS, JSON, TEXT, through_json

ANY_TEXT = st.text(st.characters(), max_size=20)  # lone surrogates too
BLOCKS = st.lists(st.dictionaries(TEXT, JSON, min_size=1, max_size=10), max_size=2)
MESSAGES = st.one_of(
    st.builds(UserMessage, ANY_TEXT, BLOCKS),
    st.builds(
        AssistantMessage,
        ANY_TEXT,
        st.lists(st.builds(ToolCallRequest, TEXT, TEXT, ARGS, st.none() | TEXT), max_size=2).map(
            tuple
        ),
        BLOCKS,
    ),
    st.builds(ToolResult, TEXT, BLOCKS),
    st.builds(ContextNote, ANY_TEXT),
)


def _written(turn: Turn) -> str:
    return json.dumps(turn_to_json(turn), ensure_ascii=False)


def _args(turn: Turn) -> list[str]:
    """Each call's arguments as a request writes them (the client's order)."""
    return [
        json.dumps(thaw_json(call.arguments), ensure_ascii=False)
        for m in turn.messages
        for call in getattr(m, "tool_calls", ())
    ]


@given(st.integers(0, 50), st.lists(MESSAGES, max_size=8))
def test_a_packed_turn_is_the_turn_it_was_read_back_or_held(number: int, messages: Any) -> None:
    turn = Turn(number=number, messages=messages)
    packed = closed(turn)
    assert packed.packed is not None and turn.packed is None
    assert closed(packed) is packed
    assert packed == turn and turn == packed
    assert list(packed.messages) == list(turn.messages)
    assert _written(packed) == _written(turn) and _args(packed) == _args(turn)
    chat._unpacked.clear()  # read back from the packed text, not the objects it was packed from
    assert list(packed.messages) == list(turn.messages)
    assert _written(packed) == _written(turn) and _args(packed) == _args(turn)
    assert packed.toolcall_ids == turn.toolcall_ids
    assert packed.messages is packed.messages  # held read back: the same objects while held


PROMPT = SystemPromptObject.build("system_prompt:s", "You are a coding agent.")
COMMANDS_OF_TURNS = st.one_of(COMMANDS, ANY_TEXT.map(c.RecordUserMessage))


def _folded(commands: list[Any], policy: PolicyConfig, each: Any = None) -> SessionState:
    window = CollapseWindow(2, 2)
    state = fold(decide(INITIAL, c.StartSession("s", PROMPT, "chat:s", window, policy)))
    for command in commands:
        with contextlib.suppress(SelfContextError):  # refused: changes nothing
            state = fold(decide(state, command), state)
        if each is not None:
            each(state)
    return state


@settings(max_examples=60, deadline=None)
@given(st.lists(COMMANDS_OF_TURNS, min_size=5, max_size=60))
def test_a_chat_packs_the_turns_before_its_last_few_and_writes_the_same_snapshot(
    commands: list[Any],
) -> None:
    policy = PolicyConfig()
    state = _folded(commands, policy)
    with mock.patch.object(chat, "OPEN_TURNS", 10**9):
        plain = _folded(commands, policy)
    assert all(t.packed is None for t in plain.turns)
    closed_before = len(state.turns) - chat.OPEN_TURNS
    assert [t.packed is not None for t in state.turns] == [
        n < closed_before for n in range(len(state.turns))
    ]
    assert state == plain
    written = ChatObject.of(state)
    for cleared in (True, False):  # read back from the packed texts, then as held
        if cleared:
            chat._unpacked.clear()
        assert ChatObject.of(state) == written
    assert ChatObject.of(plain) == written
    # what a session's snapshots keep (0143) across turns being packed: the same as from nothing
    kept = WrittenChat()
    _folded(commands, policy, lambda s: _same(ChatObject.of(s, kept), ChatObject.of(s)))
    assert json.dumps(to_document(written)) == json.dumps(to_document(ChatObject.of(plain)))
    session = from_document(through_json(to_document(SessionObject.of(state, 1))))
    again = from_document(through_json(to_document(written)))
    assert isinstance(session, SessionObject) and isinstance(again, ChatObject)
    resumed = state_from_snapshot(session, again)
    assert resumed == state
    assert [t.packed is not None for t in resumed.turns] == [
        t.packed is not None for t in state.turns
    ]
    assert [_written(t) for t in resumed.turns] == [_written(t) for t in plain.turns]


def _same(a: ChatObject, b: ChatObject) -> None:
    assert a == b


@given(st.integers(0, 50), st.lists(MESSAGES, max_size=8))
def test_a_turn_packed_from_its_stored_form_is_the_turn_packed_from_its_messages(
    number: int, messages: Any
) -> None:
    """Decision 0144: a resume packs a closed turn straight from the stored form it reads; as
    written by this version, the same packed bytes as from the messages."""
    turn = Turn(number=number, messages=messages)
    stored = through_json(turn_to_json(turn))
    packed = closed_from_stored(stored)
    assert packed.packed == closed(turn).packed
    assert packed == turn and _written(packed) == _written(turn)
    assert packed.toolcall_ids == turn.toolcall_ids


def _unlike_written(stored: dict[str, Any], how: int) -> dict[str, Any]:
    """``stored`` as an earlier version may have written it (what ``message_to_json`` would
    not write): keys in another order, an empty list it leaves out, a small object as text."""
    out = {"number": stored["number"], "messages": []}
    for m in stored["messages"]:
        m = dict(m)
        if how == 0:
            m = dict(reversed(list(m.items())))
        elif how == 1 and m["role"] in ("user", "tool"):
            m.setdefault("images", [])
        elif how == 2 and m["role"] == "assistant":
            m["tool_calls"] = [
                {**call, "arguments": json.dumps(call["arguments"])}
                if isinstance(call["arguments"], dict)
                else call
                for call in m["tool_calls"]
            ]
            m["reasoning"] = m.get("reasoning", [])
        out["messages"].append(m)
    return out


@given(st.integers(0, 50), st.lists(MESSAGES, min_size=1, max_size=8), st.integers(0, 2))
def test_a_turn_stored_otherwise_is_packed_as_its_messages_write_it(
    number: int, messages: Any, how: int
) -> None:
    """Stored forms ``message_to_json`` would not write are read as messages first: the packed
    text, and so the chat's hash after a resume, is what main's resume writes."""
    turn = Turn(number=number, messages=messages)
    stored = _unlike_written(through_json(turn_to_json(turn)), how)
    from_messages = closed(turn_from_json(stored))
    packed = closed_from_stored(stored)
    assert packed.packed == from_messages.packed
    assert _written(packed) == _written(from_messages)
