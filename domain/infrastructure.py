"""The ``chat`` and ``session`` infrastructure objects (docs/specification.md §1, §2) as snapshots
of a state.

The session's truth is its event log (see docs/decisions/0001-event-sourced-sessions.md): these
objects are *snapshots* written at session start and then whenever the log has grown by as many
bytes as the last snapshot had, so the bytes written per turn stay flat while any past state can
still be rebuilt from a snapshot plus the log entries after it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import attrs
from pyrsistent import pmap, pset, pvector
from pyrsistent.typing import PSet, PVector

from selfctx.domain import hashing
from selfctx.domain.chat import ChatMessage, Turn, message_to_json, turn_from_json
from selfctx.domain.session.columns import IndexedSet, IntColumn, KindColumn
from selfctx.domain.session.state import CollapseWindow, PolicyConfig, SessionState

__all__ = ["ChatObject", "SessionObject", "chat_id_for", "session_id_for", "state_from_snapshot"]


def session_id_for(session_id: str) -> str:
    """Id of the session object of session ``session_id``."""
    return f"session:{session_id}"


_STORED_CHARS = 8_000_000
_stored_turns: dict[int, tuple[ChatMessage, PVector[ChatMessage], str]] = {}
_stored_chars = 0
"""The stable text of the messages of each turn written in a snapshot before, joined with commas
as the chat's text lists them, by the identity of the turn's first message: that message, the
turn's messages when they were written (the entry's check: a later version of the turn holds the
same objects first, as a message appended to it does; a rollback or a compaction does not) and
their text. A chat's snapshot hashes what is new in it, not the chat's length. One string a
turn, not one a message: an entry per message was about 190 bytes beside its text (its tuple,
its key, its string's header and the table's slot; decision 0136). Only the text is kept, not
the stored form (a message's stored form is rebuilt at each snapshot, a few microseconds, where
keeping it cost about as much memory again as the text: decision 0092). Cleared whole when the
texts it holds pass :data:`_STORED_CHARS` characters (a bound on memory, about 30 chats of 1,000
objects), so that it never grows with the sessions a process has served."""


def _turn_messages(messages: PVector[ChatMessage]) -> tuple[list[dict[str, Any]], str]:
    """Each message's stored form, and their stable texts joined with commas (remembered)."""
    global _stored_chars
    data = [message_to_json(message) for message in messages]
    if not messages:
        return data, ""
    first = messages[0]
    hit = _stored_turns.get(id(first))
    written, joined = 0, ""
    if (
        hit is not None
        and hit[0] is first
        and len(hit[1]) <= len(messages)
        and all(a is b for a, b in zip(hit[1], messages, strict=False))  # the same ones first
    ):
        written, joined = len(hit[1]), hit[2]
    if written == len(messages):
        return data, joined
    new = ",".join([hashing.stable_stringify(d) for d in data[written:]])
    joined = f"{joined},{new}" if written else new
    grown = len(joined) - (len(hit[2]) if hit is not None else 0)
    if _stored_chars + grown > _STORED_CHARS:
        _stored_turns.clear()
        _stored_chars, grown = 0, len(joined)
    _stored_turns[id(first)] = (first, messages, joined)
    _stored_chars += grown
    return data, joined


def chat_id_for(session_id: str) -> str:
    """Id of the chat object of session ``session_id``."""
    return f"chat:{session_id}"


@attrs.frozen
class ChatObject:
    """One version of a session's chat: every turn (§2.6)."""

    type: ClassVar[str] = "chat"
    id: str
    identity_hash: str
    session_ref: str
    turns: tuple[dict[str, Any], ...]
    """Turns in their stored JSON form: ``{"number", "messages": [...]}``."""
    turn_count: int
    """The number of turns in ``turns`` (docs/specification.md §2, the chat), turn 0 — whatever came
    before the first user message — included: always ``len(turns)``."""
    toolcall_refs: tuple[str, ...]
    content_hash: None
    metadata_hash: str
    object_hash: str

    @classmethod
    def of(cls, state: SessionState) -> ChatObject:
        """The chat of ``state``, with its hashes."""
        turns: list[dict[str, Any]] = []
        texts: list[str] = []
        for turn in state.turns:  # turn_to_json, each message's form written once
            data, joined = _turn_messages(turn.messages)
            turns.append({"number": turn.number, "messages": data})
            messages = "[" + joined + "]"
            texts.append(
                hashing.object_text(
                    {"number": hashing.stable_stringify(turn.number), "messages": messages}
                )
            )
        refs = tuple(ref for t in state.turns for ref in t.toolcall_ids)
        session_ref = session_id_for(state.session_id)
        # metadata_hash of {"turns", "session_ref", "turn_count", "toolcall_refs"}
        fields = {
            "turns": "[" + ",".join(texts) + "]",
            "session_ref": hashing.stable_stringify(session_ref),
            "turn_count": hashing.stable_stringify(len(turns)),
            "toolcall_refs": hashing.stable_stringify(list(refs)),
        }
        meta = hashing.sha256_hex(hashing.object_text(fields))
        return cls(
            id=state.chat_id,
            identity_hash=hashing.identity_hash("chat", xt_id=state.chat_id),
            session_ref=session_ref,
            turns=tuple(turns),
            turn_count=len(turns),
            toolcall_refs=refs,
            content_hash=None,
            metadata_hash=meta,
            object_hash=hashing.object_hash(hashing.ABSENT, None, meta),
        )

    def parsed_turns(self) -> list[Turn]:
        return [turn_from_json(t) for t in self.turns]


@attrs.frozen
class SessionObject:
    """One version of the session wrapper (§3.1): ids only, sets in first-encounter order.

    Beyond the design's fields it records what a snapshot needs to rebuild the state exactly: the
    log position it reflects (``seq``), the auto-activated tool calls and the window sizes. These
    extra fields are outside ``metadata_hash``, which covers exactly the design's fields.
    """

    type: ClassVar[str] = "session"
    id: str
    identity_hash: str
    session_id: str
    chat_ref: str
    system_prompt_ref: str
    session_index: tuple[str, ...]
    metadata_pool: tuple[str, ...]
    active_set: tuple[str, ...]
    pinned_set: tuple[str, ...]
    content_hash: None
    metadata_hash: str
    object_hash: str
    seq: int
    """Number of session-log entries this snapshot reflects."""
    auto_active: tuple[str, ...]
    window: CollapseWindow
    policy: PolicyConfig = PolicyConfig()
    last_used: tuple[tuple[str, int], ...] = ()
    """(id, tick) for every object ever activated, in index order."""
    use_clock: int = 0
    superseded: tuple[tuple[str, str], ...] = ()
    """(output, later output) for every output collapsed as superseded, in index order."""
    excerpts: tuple[tuple[str, str], ...] = ()
    """(output, excerpt) for every collapsed output whose reference keeps some of its lines,
    in index order (decision 0075)."""
    checkpoints: tuple[str, ...] = ()
    """Checkpoint labels, oldest first."""
    detached: tuple[str, ...] = ()
    """Tool calls of the index whose place in the chat a rollback removed (the chat alone no
    longer says they are tool calls)."""
    compacted: int = 0
    """Turns before this one are compacted (decision 0043) ..."""
    summary: str = ""
    """... and the chat shows this in their place."""

    @classmethod
    def of(cls, state: SessionState, seq: int) -> SessionObject:
        """The session wrapper of ``state`` after log entry ``seq``."""
        fields: dict[str, Any] = {
            "session_id": state.session_id,
            "chat_ref": state.chat_id,
            "system_prompt_ref": state.system_prompt_id,
            "session_index": list(state.index),
            "metadata_pool": state.ordered(state.pool),
            "active_set": state.ordered(state.active),
            "pinned_set": state.ordered(state.pinned),
        }
        meta = hashing.metadata_hash(fields)
        object_id = session_id_for(state.session_id)
        calls = frozenset(i for i, kind in state.kinds.items() if kind == "toolcall")
        detached = calls.difference(state.toolcall_turn.keys())
        return cls(
            id=object_id,
            identity_hash=hashing.identity_hash("session", xt_id=object_id),
            session_id=state.session_id,
            chat_ref=state.chat_id,
            system_prompt_ref=state.system_prompt_id,
            session_index=tuple(fields["session_index"]),
            metadata_pool=tuple(fields["metadata_pool"]),
            active_set=tuple(fields["active_set"]),
            pinned_set=tuple(fields["pinned_set"]),
            content_hash=None,
            metadata_hash=meta,
            object_hash=hashing.object_hash(hashing.ABSENT, None, meta),
            seq=seq,
            auto_active=tuple(state.ordered(state.auto_active)),
            window=state.window,
            policy=state.policy,
            last_used=_in_order(state, state.last_used),
            use_clock=state.use_clock,
            superseded=_in_order(state, state.superseded),
            excerpts=_in_order(state, state.excerpts),
            checkpoints=tuple(state.checkpoints),
            compacted=state.compacted,
            summary=state.summary,
            detached=tuple(filter(detached.__contains__, state.index)),
        )


def _in_order(state: SessionState, pairs: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """The (id, value) pairs of one of a state's maps, in session index order (each map read
    once: a persistent map's lookups run in Python)."""
    held = dict(pairs.items())
    return tuple((i, held[i]) for i in state.ordered(frozenset(held)))


def _set(items: Sequence[str]) -> PSet[str]:
    """A persistent set of ``items`` with room for them: ``pset(items)`` alone gives a set of
    any size 8 hash buckets, so that every lookup scans a long list until the set grows."""
    return pset(items, pre_size=2 * len(items))


def state_from_snapshot(session: SessionObject, chat: ChatObject) -> SessionState:
    """Rebuild the state a snapshot pair describes (the inverse of the two ``of`` methods)."""
    turns = chat.parsed_turns()
    toolcall_turn: dict[str, int] = {}
    for turn in turns:
        for ref in turn.toolcall_ids:
            toolcall_turn[ref] = turn.number
    index = pvector(session.session_index)
    positions = pmap({object_id: n for n, object_id in enumerate(index)})
    toolcalls = set(toolcall_turn) | set(session.detached)
    kinds: Mapping[str, str] = {i: "toolcall" if i in toolcalls else "file" for i in index}
    return SessionState(
        session_id=session.session_id,
        system_prompt_id=session.system_prompt_ref,
        chat_id=session.chat_ref,
        window=session.window,
        policy=session.policy,
        last_used=IntColumn.of(dict(session.last_used), positions, index),
        use_clock=session.use_clock,
        superseded=pmap(dict(session.superseded)),
        excerpts=pmap(dict(session.excerpts)),
        index=index,
        positions=positions,
        kinds=KindColumn.of(kinds, positions, index),
        pool=IndexedSet.of(session.metadata_pool, positions, index),
        active=_set(session.active_set),
        pinned=_set(session.pinned_set),
        auto_active=_set(session.auto_active),
        turns=pvector(turns),
        toolcall_turn=IntColumn.of(toolcall_turn, positions, index),
        checkpoints=pvector(session.checkpoints),
        compacted=session.compacted,
        summary=session.summary,
    )
