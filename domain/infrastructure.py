"""The ``chat`` and ``session`` infrastructure objects (docs/specification.md §1, §2) as snapshots
of a state.

The session's truth is its event log (see docs/decisions/0001-event-sourced-sessions.md): these
objects are *snapshots* written at session start and then whenever the log has grown by as many
bytes as the last snapshot had, so the bytes written per turn stay flat while any past state can
still be rebuilt from a snapshot plus the log entries after it.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol

import attrs
from pyrsistent import pmap, pset, pvector
from pyrsistent.typing import PSet, PVector

from selfctx.domain import hashing
from selfctx.domain.chat import (
    OPEN_TURNS,
    Turn,
    closed,
    closed_from_stored,
    message_to_json,
    packed_stored,
    turn_from_json,
)
from selfctx.domain.identifiers import interned
from selfctx.domain.session.columns import IndexedSet, IntColumn, KindColumn
from selfctx.domain.session.state import CollapseWindow, PolicyConfig, SessionState

__all__ = [
    "ChatObject",
    "MemoryShelf",
    "SessionObject",
    "ShelfLost",
    "TextShelf",
    "WrittenChat",
    "chat_id_for",
    "session_id_for",
    "state_from_snapshot",
]


def session_id_for(session_id: str) -> str:
    """Id of the session object of session ``session_id``."""
    return f"session:{session_id}"


_TURN_HEAD = b'{"messages":['


def _turn_tail(number: int) -> bytes:
    """What follows a turn's messages in its text: ``],"number":N}``."""
    return b'],"number":' + hashing.text_bytes(hashing.stable_stringify(number)) + b"}"


class ShelfLost(Exception):
    """A :class:`TextShelf` could not give back what it held: the chat's text is written again
    from its messages (nothing is lost; the snapshot costs what it cost with nothing kept)."""


class TextShelf(Protocol):
    """Where the text a chat's last snapshot wrote is kept until the next one (a port: the
    adapters keep it in a private file, decision 0143). Bytes: the UTF-8 the hash reads."""

    def keep(self, at: int, data: bytes) -> None:
        """Hold ``data`` from byte ``at`` on (``at`` is at most the size held), and nothing
        after it. May raise :class:`ShelfLost`."""

    def read(self, size: int) -> bytes:
        """The first ``size`` bytes held (at most the size held). Raises :class:`ShelfLost`
        when they cannot be read."""


class MemoryShelf:
    """A :class:`TextShelf` in memory (what the domain's tests and a runner given no other
    use): the text's bytes, one byte a character for ASCII."""

    __slots__ = ("_data",)

    def __init__(self) -> None:
        self._data = bytearray()

    def keep(self, at: int, data: bytes) -> None:
        del self._data[at:]
        self._data += data

    def read(self, size: int) -> bytes:
        return bytes(self._data[:size])


class WrittenChat:
    """What one session's last chat snapshot wrote, for the next to write only what is new
    (decisions 0082, 0136, 0143): the turns it wrote (the state's own vector: identity is the
    check, and a later state shares it but for its end), where each turn's messages end in the
    text (machine integers, a byte offset each) and the text itself in a :class:`TextShelf`.
    Nothing but these integers grows with the chat in memory; the text is on the shelf."""

    __slots__ = ("_new_shelf", "ends", "shelf", "size", "turns")

    def __init__(self, shelf: Callable[[], TextShelf] = MemoryShelf) -> None:
        self._new_shelf = shelf
        self.shelf: TextShelf | None = None
        """Made at the first snapshot (a session that writes none makes no file)."""
        self.turns: PVector[Turn] | None = None
        """The turns written (None: nothing is known to be held)."""
        self.ends: array[int] = array("q")
        """For each turn written, the byte offset in the text where its messages' texts end
        (where its ``],"number":N}`` begins)."""
        self.size = 0
        """Bytes of the text: the turns' texts joined with commas, without brackets."""

    def forget(self) -> None:
        self.turns, self.ends, self.size = None, array("q"), 0

    def reusable(self, turns: PVector[Turn]) -> tuple[int, int, int]:
        """How much of the text held ``turns`` begin with: ``(whole, partly, size)``, the
        first ``whole`` turns as written, then (with ``partly`` > 0) the first ``partly`` - 1
        messages of the next one (``partly`` 1: the turn's number and its opening only), in
        the first ``size`` bytes of the text."""
        old = self.turns
        if old is None:
            return 0, 0, 0
        whole, count = 0, min(len(old), len(turns))
        while whole < count:
            a, b = old[whole], turns[whole]
            if a is not b and b.packed is not None:  # closed since: the same text if packed
                if a.number != b.number or closed(a).packed != b.packed:  # from the same
                    break
            elif a is not b:
                if a.number != b.number or len(a.messages) > len(b.messages):
                    break
                if not all(x is y for x, y in zip(a.messages, b.messages, strict=False)):
                    break
                if len(a.messages) < len(b.messages):  # the same ones first: extended
                    return whole, len(a.messages) + 1, self.ends[whole]
            whole += 1
        if whole == 0:
            return 0, 0, 0
        end = self.ends[whole - 1] + len(_turn_tail(turns[whole - 1].number))
        return whole, 0, end


def _written_texts(
    turns: PVector[Turn], data: list[list[dict[str, Any]]], written: WrittenChat | None
) -> tuple[bytes, bytes]:
    """The chat's turns' texts joined with commas, as bytes: the part read from what
    ``written`` holds and the part written now (``written`` is moved on to hold both)."""
    whole, partly, size = (0, 0, 0) if written is None else written.reusable(turns)
    held = b""
    if written is not None and size:
        try:
            if written.shelf is None:  # never so: a size is known once a shelf took the text
                raise ShelfLost("no shelf")
            held = written.shelf.read(size)
        except ShelfLost:
            whole, partly, size, held = 0, 0, 0, b""
    ends = array("q") if written is None else written.ends[:whole]
    parts: list[bytes] = []
    at = size
    for n in range(whole, len(turns)):
        messages = data[n]
        if n == whole and partly:
            done = partly - 1
            text = ",".join([hashing.stable_stringify(d) for d in messages[done:]])
            piece = hashing.text_bytes(("," + text) if done and text else text)
        else:
            body = ",".join([hashing.stable_stringify(d) for d in messages])
            piece = (b"," if n else b"") + _TURN_HEAD + hashing.text_bytes(body)
        parts.append(piece)
        at += len(piece)
        ends.append(at)
        tail = _turn_tail(turns[n].number)
        parts.append(tail)
        at += len(tail)
    new = b"".join(parts)
    if written is not None:
        try:
            if written.shelf is None:
                written.shelf = written._new_shelf()
            written.shelf.keep(size, new)
            written.turns, written.ends, written.size = turns, ends, size + len(new)
        except ShelfLost:
            written.forget()
    return held, new


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
    def of(cls, state: SessionState, written: WrittenChat | None = None) -> ChatObject:
        """The chat of ``state``, with its hashes; with ``written`` (what the session's last
        snapshot wrote, moved on to this one) only the text of what is new is written for
        the hash, the rest read back from its shelf (decision 0143)."""
        turns: list[dict[str, Any]] = []
        data: list[list[dict[str, Any]]] = []
        refs_of: list[str] = []
        for turn in state.turns:  # turn_to_json, each message's form written once
            packed = turn.packed
            if packed is None:
                messages = [message_to_json(message) for message in turn.messages]
                refs_of.extend(turn.toolcall_ids)
            else:  # a closed turn: its stored forms as packed (decision 0144)
                messages = packed_stored(packed)
                refs_of.extend(
                    [interned(d["toolcall_ref"]) for d in messages if d["role"] == "tool"]
                )
            data.append(messages)
            turns.append({"number": turn.number, "messages": messages})
        held, new = _written_texts(state.turns, data, written)
        refs = tuple(refs_of)
        session_ref = session_id_for(state.session_id)
        # metadata_hash of {"turns", "session_ref", "turn_count", "toolcall_refs"}: "turns"
        # is the last key in their order, so the text is this head, then the turns'
        fields = {
            "session_ref": hashing.stable_stringify(session_ref),
            "turn_count": hashing.stable_stringify(len(turns)),
            "toolcall_refs": hashing.stable_stringify(list(refs)),
            "turns": "",
        }
        head = hashing.text_bytes(hashing.object_text(fields)[:-1])
        digest = hashlib.sha256(head)
        for part in (b"[", held, new, b"]}"):
            digest.update(part)
        meta = digest.hexdigest()
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
    # every turn but the last few closed, packed straight from its stored form (decision 0144)
    last = len(chat.turns) - OPEN_TURNS
    turns = [
        closed_from_stored(t) if n < last else turn_from_json(t) for n, t in enumerate(chat.turns)
    ]
    toolcall_turn: dict[str, int] = {}
    for stored, turn in zip(chat.turns, turns, strict=True):
        for message in stored["messages"]:
            if message["role"] == "tool":
                toolcall_turn[message["toolcall_ref"]] = turn.number
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
