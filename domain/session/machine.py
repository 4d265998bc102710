"""``decide(state, command) -> events`` and ``evolve(state, event) -> state``.

``decide`` validates a command against the state and returns the events it produces, including
the auto-collapse events the window calls for afterwards; it raises a domain error and returns
nothing when the command is refused, so a refused command changes nothing. ``evolve`` applies one
event and never fails on events ``decide`` produced.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import suppress
from functools import reduce
from typing import Any, Final

import attrs
from pyrsistent import pvector

from selfctx.domain.chat import (
    ChatMessage,
    ContextNote,
    ToolResult,
    Turn,
    UserMessage,
    close_turns,
    with_turn,
)
from selfctx.domain.errors import (
    DuplicateCheckpoint,
    DuplicateObject,
    InvalidInput,
    NotAContentObject,
    UnknownCheckpoint,
    UnknownObject,
)
from selfctx.domain.identifiers import RESERVED_PREFIXES, toolcall_id_problem
from selfctx.domain.indexing import Outcome, decide_deletion, decide_discovery, decide_full_index
from selfctx.domain.session import commands as c
from selfctx.domain.session import events as e
from selfctx.domain.session.columns import IntColumn
from selfctx.domain.session.state import INITIAL, SessionState

__all__ = [
    "INFRASTRUCTURE_PREFIXES",
    "Outcome",
    "SessionNotStarted",
    "decide",
    "decide_and_fold",
    "evolve",
    "fold",
    "window_collapses",
]

INFRASTRUCTURE_PREFIXES = RESERVED_PREFIXES
"""Id prefixes of infrastructure objects and log entries; tool-call ids may not use them."""
MAX_LABEL = 100
"""The longest checkpoint label."""
_AGENT_TRIGGERS = ("agent_read", "agent_write", "agent_view")


class SessionNotStarted(InvalidInput):
    """A command other than StartSession reached a session that has not started."""

    kind = "session_not_started"


def _require_started(state: SessionState) -> None:
    if not state.started:
        raise SessionNotStarted("session", "", "the session has not been started")


def _require_toolcall_id(object_id: str) -> None:
    """A toolcall's id is sent to providers and must never name another document (decision
    0030): its form alone guarantees both."""
    problem = toolcall_id_problem(object_id)
    if problem is not None:
        raise InvalidInput("tool-call id", object_id, problem)


def _require_content_object(state: SessionState, object_id: str) -> None:
    if not isinstance(object_id, str):
        raise InvalidInput("object id", object_id, "must be text")
    if state.in_index(object_id):
        return
    if object_id.startswith(INFRASTRUCTURE_PREFIXES):
        raise NotAContentObject(object_id)
    raise UnknownObject(object_id, state.session_id)


def _admit(state: SessionState, object_id: str, kind: str, *, activate: bool) -> list[e.Event]:
    """Events that put an object in the index and pool, and the active set if asked."""
    out: list[e.Event] = []
    if object_id not in state.pool:  # new, or indexed only (after a rollback)
        out.append(e.ObjectEncountered(object_id, "file" if kind == "file" else "toolcall"))
    if activate and (object_id not in state.active or object_id in state.auto_active):
        out.append(e.ObjectActivated(object_id, auto=False))
    return out


def _index_events(state: SessionState, cmd: c.IndexFile) -> list[e.Event]:
    outcome, version = decide_full_index(cmd.stored, cmd.observed)
    out: list[e.Event] = []
    if version is not None:
        out.append(e.FileIndexed(version.id, outcome, cmd.trigger, version.object_hash, version))
    if cmd.trigger in _AGENT_TRIGGERS:
        out += _admit(state, cmd.observed.id, "file", activate=cmd.trigger != "agent_view")
    return out


def _batch_events(state: SessionState, items: tuple[c.IndexFile, ...]) -> list[e.Event]:
    out: list[e.Event] = []
    seen: set[str] = set()
    for item in items:
        if item.trigger != "agent_read":
            raise ValueError("a batch of reads must use trigger 'agent_read'")
        if item.observed.id not in seen:  # distinct ids never affect each other's events
            seen.add(item.observed.id)
            out += _index_events(state, item)
    return out


def _deletion_events(cmd: c.RecordDeletion) -> list[e.Event]:
    _, version = decide_deletion(cmd.stored)
    if version is None:
        return []
    return [e.FileDeleted(version.id, cmd.trigger, version.object_hash, version)]


def _check_label(label: object) -> str:
    if not isinstance(label, str) or not label.strip():
        raise InvalidInput("checkpoint label", label, "must be non-empty text")
    if len(label) > MAX_LABEL or any(ord(ch) < 32 or ord(ch) == 127 for ch in label):
        raise InvalidInput(
            "checkpoint label", label, f"at most {MAX_LABEL} characters, no control characters"
        )
    return label


def _fresh_label(state: SessionState, base: str) -> str:
    """``base``, or ``base.2``, ``base.3``, ... : the first label the session has not used."""
    taken = set(state.checkpoints)
    label, n = base, 1
    while label in taken:
        n += 1
        label = f"{base}.{n}"
    return label


def _restore_events(state: SessionState, target: c.RollbackTarget) -> list[e.Event]:
    """Events that turn the sets and chat of ``state`` into those of ``target``."""
    for ids in (target.pool, target.active, target.pinned, target.auto_active):
        unknown = [i for i in ids if not state.in_index(i)]
        if unknown:
            raise ValueError(f"a rollback target names objects outside the index: {unknown[:3]}")
    out: list[e.Event] = []
    keep = 0
    limit = min(len(state.turns), len(target.turns))
    while keep < limit and state.turns[keep] == target.turns[keep]:
        keep += 1
    compaction = (target.compacted, target.summary) != (state.compacted, state.summary)
    if keep < len(state.turns) or keep < len(target.turns) or compaction:
        turns = tuple(target.turns[keep:])
        out.append(e.ChatRestored(keep, turns, target.compacted, target.summary))
    leaving = frozenset(state.pool).difference(target.pool)
    out += [e.ObjectDemoted(i) for i in state.ordered(leaving)]
    for object_id in state.ordered(target.pool.difference(state.pool, target.active)):
        kind = state.kinds[object_id]
        out.append(e.ObjectEncountered(object_id, "file" if kind == "file" else "toolcall"))
    out += [
        e.ObjectDeactivated(i, by="rollback")
        for i in state.ordered(frozenset(state.active).difference(target.active, leaving))
    ]
    for object_id in state.ordered(target.active):
        auto = object_id in target.auto_active
        if object_id not in state.active or (object_id in state.auto_active) != auto:
            out.append(e.ObjectActivated(object_id, auto=auto))
    pinned = frozenset(state.pinned)
    out += [e.ObjectUnpinned(i) for i in state.ordered(pinned.difference(target.pinned))]
    out += [e.ObjectPinned(i) for i in state.ordered(target.pinned.difference(pinned))]
    return out


def _rollback_events(state: SessionState, cmd: c.Rollback) -> list[e.Event]:
    if cmd.label not in state.checkpoints:
        raise UnknownCheckpoint(cmd.label, state.session_id, tuple(state.checkpoints))
    out: list[e.Event] = [e.CheckpointCreated(_fresh_label(state, "before-rollback"), auto=True)]
    written: list[str] = []
    for item in cmd.files:
        if item.trigger != "restore":
            raise ValueError("a rollback writes files back with trigger 'restore'")
        found = (
            _index_events(state, item) if isinstance(item, c.IndexFile) else _deletion_events(item)
        )
        out += found
        if found:
            written.append(item.observed.id if isinstance(item, c.IndexFile) else item.stored.id)
    if cmd.target is not None:
        out += _restore_events(state, cmd.target)
    out.append(e.RolledBack(cmd.label, cmd.target is not None, tuple(written)))
    return out


def _decide_primary(state: SessionState, cmd: c.Command) -> list[e.Event]:
    if isinstance(cmd, c.StartSession):
        if state.started:
            raise InvalidInput("session", cmd.session_id, "already started")
        if not cmd.session_id:
            raise InvalidInput("session id", cmd.session_id, "must not be empty")
        prompt = cmd.system_prompt
        return [
            e.SessionStarted(
                cmd.session_id,
                prompt.id,
                cmd.chat_id,
                cmd.window,
                prompt.object_hash,
                prompt,
                policy=cmd.policy,
            )
        ]
    _require_started(state)
    match cmd:
        case c.SetSystemPrompt(system_prompt=prompt):
            return [e.SystemPromptSet(prompt.id, prompt.object_hash, prompt)]
        case c.RecordUserMessage(text=text, images=images):
            every = state.policy.checkpoint_every
            turn = state.current_turn + 1
            if every is not None and (turn - 1) % every == 0:
                label = _fresh_label(state, f"before-turn-{turn}")
                return [e.CheckpointCreated(label, auto=True), e.UserMessageRecorded(text, images)]
            return [e.UserMessageRecorded(text, images)]
        case c.RecordAssistantMessage(message=message):
            for call in message.tool_calls:
                _require_toolcall_id(call.id)
            return [e.AssistantMessageRecorded(message)]
        case c.RecordToolCall(toolcall=toolcall, activate=activate, images=images):
            _require_toolcall_id(toolcall.id)
            if state.in_index(toolcall.id):
                raise DuplicateObject(toolcall.id, "this session already recorded that tool call")
            recorded: list[e.Event] = [
                e.ToolCallRecorded(toolcall.id, toolcall.object_hash, toolcall, images),
                e.ObjectEncountered(toolcall.id, "toolcall"),
            ]
            if activate:
                recorded.append(e.ObjectActivated(toolcall.id, auto=True))
            return recorded
        case c.IndexFile():
            return _index_events(state, cmd)
        case c.IndexFiles(items=items):
            return _batch_events(state, items)
        case c.Discover(found=found):
            out: list[e.Event] = []
            seen: set[str] = set()
            for stub, stored in found:
                if stub.id in seen:
                    continue
                seen.add(stub.id)
                _, version = decide_discovery(stored, stub)
                if version is not None:
                    out.append(e.FileDiscovered(version.id, version.object_hash, version))
                out += _admit(state, stub.id, "file", activate=False)
            return out
        case c.RecordDeletion():
            return _deletion_events(cmd)
        case c.Activate(object_id=object_id, refresh=refresh):
            if refresh is not None:
                if refresh.observed.id != object_id or refresh.trigger != "activation":
                    raise ValueError("an activation refresh must index the activated object")
                out = _index_events(state, refresh)
            else:
                out = []
            _require_content_object(state, object_id)
            if object_id in state.active and object_id not in state.auto_active:
                return out
            return [*out, e.ObjectActivated(object_id, auto=False)]
        case c.Deactivate(object_id=object_id):
            _require_content_object(state, object_id)
            if object_id not in state.active:
                return []
            return [e.ObjectDeactivated(object_id, by="agent")]
        case c.Pin(object_id=object_id):
            _require_content_object(state, object_id)
            return [] if object_id in state.pinned else [e.ObjectPinned(object_id)]
        case c.Unpin(object_id=object_id):
            _require_content_object(state, object_id)
            return [e.ObjectUnpinned(object_id)] if object_id in state.pinned else []
        case c.CollapseToFit(
            object_ids=object_ids, note=note, superseded=superseded, reasons=reasons, kept=kept
        ):
            out = []
            newer = dict(superseded)
            why = dict(reasons)
            excerpts = {i: text for i, text in kept if text}
            for later in newer.values():
                _require_content_object(state, later)
            for object_id in dict.fromkeys(object_ids):
                _require_content_object(state, object_id)
                if object_id in state.pinned:
                    raise InvalidInput("object", object_id, "is pinned; a pin is never collapsed")
                if object_id in state.active:
                    by = newer.get(object_id)
                    out.append(
                        e.ObjectDeactivated(
                            object_id,
                            by="budget",
                            superseded_by=by,
                            reason=why.get(object_id),
                            kept=excerpts.get(object_id),
                        )
                    )
            if out and note:
                out.append(e.ContextNoteRecorded(note))
            return out
        case c.Checkpoint(label=label):
            if label is None:
                return [e.CheckpointCreated(_fresh_label(state, "checkpoint-1"), auto=False)]
            if _check_label(label) in state.checkpoints:
                raise DuplicateCheckpoint(label, state.session_id)
            return [e.CheckpointCreated(label, auto=False)]
        case c.Rollback():
            return _rollback_events(state, cmd)
        case c.CompactChat(summary=summary):
            if summary.id != f"summary:{state.session_id}":
                raise ValueError(f"a summary of session {state.session_id!r} has another id")
            if not state.compacted < summary.upto <= state.current_turn:
                raise InvalidInput(
                    "compaction", summary.upto, f"must be after turn {state.compacted} and "
                    f"no later than the current turn, {state.current_turn}",
                )  # fmt: skip
            return [
                e.ChatCompacted(
                    summary.upto,
                    summary.case,
                    summary.content,
                    summary.id,
                    summary.object_hash,
                    summary,
                )
            ]
        case c.Resume(reconciled=reconciled):
            out = [e.SessionResumed()]
            for item in reconciled:
                if isinstance(item, c.IndexFile):
                    if item.trigger != "resume":
                        raise ValueError("resume reconciliation must use trigger 'resume'")
                    out += _index_events(state, item)
                else:
                    out += _deletion_events(item)
            return out
    raise TypeError(f"not a session command: {cmd!r}")  # pragma: no cover - exhaustive match


def window_collapses(state: SessionState) -> list[str]:
    """Auto-activated tool calls the window says must collapse now, in index order.

    An auto-activated, unpinned tool call collapses once it is no longer among the last
    ``window.per_turn`` tool calls of its turn, or its turn is no longer among the
    ``window.turns`` most recent turns.
    """
    window = state.window
    oldest_kept_turn = state.current_turn - window.turns + 1
    recent_by_turn: dict[int, frozenset[str]] = {}
    out = []
    for object_id in state.auto_active:
        if object_id in state.pinned:
            continue
        turn = state.toolcall_turn[object_id]
        if turn < oldest_kept_turn:
            out.append(object_id)
            continue
        recent = recent_by_turn.get(turn)
        if recent is None:
            recent = frozenset(state.turns[turn].last_toolcall_ids(window.per_turn))
            recent_by_turn[turn] = recent
        if object_id not in recent:
            out.append(object_id)
    return state.ordered(frozenset(out))


def decide(state: SessionState, command: c.Command) -> tuple[e.Event, ...]:
    """The events ``command`` produces in ``state``, including window collapses that follow.

    Raises a :class:`~selfctx.domain.errors.SelfContextError` (and produces nothing) for a refused
    command. An empty result means the command changes nothing.
    """
    return decide_and_fold(state, command)[0]


def decide_and_fold(
    state: SessionState, command: c.Command
) -> tuple[tuple[e.Event, ...], SessionState]:
    """:func:`decide`, and the state its events lead to (``fold(events, state)``), which deciding
    computes on the way."""
    primary = _decide_primary(state, command)
    after = fold(primary, state)
    if not after.policy.uses_window:
        return tuple(primary), after
    collapses = [e.ObjectDeactivated(oid, by="window") for oid in window_collapses(after)]
    return (*primary, *collapses), fold(collapses, after)


def evolve(state: SessionState, event: e.Event) -> SessionState:
    """Apply one event."""
    match event:
        case e.SessionStarted():
            return attrs.evolve(
                state,
                session_id=event.session_id,
                system_prompt_id=event.system_prompt_id,
                chat_id=event.chat_id,
                window=event.window,
                policy=event.policy,
            )
        case e.UserMessageRecorded(text=text, images=images):
            turn = Turn(number=len(state.turns), messages=(UserMessage(text, images),))
            return attrs.evolve(state, turns=with_turn(state.turns, turn))
        case e.AssistantMessageRecorded(message=message):
            return _append_to_current_turn(state, message)
        case e.ToolCallRecorded(object_id=object_id, images=images):
            state = _append_to_current_turn(state, ToolResult(object_id, images))
            placed = state.toolcall_turn.set(
                object_id, state.current_turn, state.positions, state.index
            )
            return attrs.evolve(state, toolcall_turn=placed)
        case e.ObjectEncountered(object_id=object_id, kind=kind):
            if state.in_index(object_id):
                pool = state.pool.add(object_id, state.positions, state.index)
                return attrs.evolve(state, pool=pool)
            index = state.index.append(object_id)
            positions = state.positions.set(object_id, len(state.index))
            return attrs.evolve(
                state,
                index=index,
                positions=positions,
                kinds=state.kinds.set(object_id, kind, positions, index),
                pool=state.pool.add(object_id, positions, index),
                toolcall_turn=state.toolcall_turn.placed(object_id, positions, index),
                last_used=state.last_used.placed(object_id, positions, index),
            )
        case e.ObjectActivated(object_id=object_id, auto=auto):
            auto_active = (
                state.auto_active.add(object_id) if auto else state.auto_active.discard(object_id)
            )
            return attrs.evolve(
                state,
                pool=state.pool.add(object_id, state.positions, state.index),
                active=state.active.add(object_id),
                auto_active=auto_active,
                last_used=state.last_used.set(
                    object_id, state.use_clock + 1, state.positions, state.index
                ),
                use_clock=state.use_clock + 1,
                excerpts=state.excerpts.discard(object_id),
            )
        case e.ObjectDeactivated(object_id=object_id, superseded_by=later, kept=excerpt):
            return attrs.evolve(
                state,
                active=state.active.discard(object_id),
                auto_active=state.auto_active.discard(object_id),
                superseded=state.superseded.set(object_id, later)
                if later is not None
                else state.superseded,
                excerpts=state.excerpts.set(object_id, excerpt)
                if excerpt
                else state.excerpts.discard(object_id),
            )
        case e.ContextNoteRecorded(text=text):
            return _append_to_current_turn(state, ContextNote(text))
        case e.ObjectDemoted(object_id=object_id):
            return attrs.evolve(
                state,
                pool=state.pool.discard(object_id),
                active=state.active.discard(object_id),
                auto_active=state.auto_active.discard(object_id),
            )
        case e.CheckpointCreated(label=label):
            return attrs.evolve(state, checkpoints=state.checkpoints.append(label))
        case e.ChatRestored(keep=keep, turns=turns):
            kept = list(state.turns[:keep])
            kept += [Turn(keep + n, turn.messages) for n, turn in enumerate(turns)]
            return attrs.evolve(
                state,
                turns=pvector(kept),
                toolcall_turn=_toolcall_turns(kept, state),
                compacted=event.compacted,
                summary=event.summary,
            )
        case e.ChatCompacted(upto=upto, summary=summary):
            return attrs.evolve(state, compacted=upto, summary=summary)
        case e.ObjectPinned(object_id=object_id):
            return attrs.evolve(state, pinned=state.pinned.add(object_id))
        case e.ObjectUnpinned(object_id=object_id):
            return attrs.evolve(state, pinned=state.pinned.discard(object_id))
        case (
            e.SystemPromptSet()
            | e.FileIndexed()
            | e.FileDiscovered()
            | e.FileDeleted()
            | e.SessionResumed()
            | e.RolledBack()
        ):
            return state  # object versions change no session set (§5.6 step 4)
    raise TypeError(f"not a session event: {event!r}")  # pragma: no cover


def _toolcall_turns(turns: Iterable[Turn], state: SessionState) -> IntColumn:
    """The turn of every tool call in the chat."""
    found = {ref: turn.number for turn in turns for ref in turn.toolcall_ids}
    return IntColumn.of(found, state.positions, state.index)


def _append_to_current_turn(state: SessionState, message: ChatMessage) -> SessionState:
    last = len(state.turns) - 1
    return attrs.evolve(state, turns=state.turns.set(last, state.turns[last].append(message)))


def fold(events: Iterable[e.Event], state: SessionState = INITIAL) -> SessionState:
    """Apply events in order."""
    return reduce(evolve, events, state)


FOLD_IN_PLACE_FROM: Final = 4
"""Runs of at least this many events are folded by :func:`fold_many` with the state's maps,
sets and vectors changed in place (decision 0087); shorter ones event by event."""

_NO_CHANGE: Final = (
    e.SystemPromptSet,
    e.FileIndexed,
    e.FileDiscovered,
    e.FileDeleted,
    e.SessionResumed,
    e.RolledBack,
)


def fold_many(events: Iterable[e.Event], state: SessionState = INITIAL) -> SessionState:
    """:func:`fold`, for long runs of events (a resumed session's log after its snapshot): the
    same state, built with one evolver per collection instead of a new persistent map, set or
    vector per event. The events that only add, remove or count (objects encountered,
    (de)activated, demoted, pinned; messages recorded) are applied in place; any other
    (a session start, a restored or compacted chat, a checkpoint) through :func:`evolve`."""
    events = list(events)
    if len(events) < FOLD_IN_PLACE_FROM:
        return fold(events, state)
    run = _InPlace(state)
    for event in events:
        if not run.apply(event):
            run = _InPlace(evolve(run.state(), event))
    return run.state()


def _position(positions: Any, object_id: str) -> int | None:
    """An id's position in the index being built (None: not in it yet)."""
    try:
        position: int = positions[object_id]
    except KeyError:
        return None
    return position


class _InPlace:
    """A session state being changed in place by :func:`fold_many` (each event as
    :func:`evolve` applies it)."""

    def __init__(self, state: SessionState) -> None:
        self.base = state
        self.index = state.index.evolver()
        self.positions: Any = state.positions.evolver()
        self.kinds = state.kinds.evolver()
        self.pool = state.pool.evolver()
        self.active = state.active.evolver()
        self.pinned = state.pinned.evolver()
        self.auto_active = state.auto_active.evolver()
        self.turns = state.turns.evolver()
        self.toolcall_turn = state.toolcall_turn.evolver()
        self.last_used = state.last_used.evolver()
        self.use_clock = state.use_clock
        self.superseded = state.superseded.evolver()
        self.excerpts: Any = state.excerpts.evolver()
        self.pending: list[ChatMessage] = []
        """Messages appended to the last turn since it was last written back."""

    @staticmethod
    def _discard(evolver: Any, key: str) -> None:
        with suppress(KeyError):
            evolver.remove(key)

    def _append(self, message: ChatMessage) -> bool:
        if not len(self.turns):
            return False
        self.pending.append(message)
        return True

    def _close_turn(self) -> None:
        if self.pending:
            last = len(self.turns) - 1
            turn = self.turns[last]
            self.turns[last] = attrs.evolve(turn, messages=turn.messages.extend(self.pending))
            self.pending = []

    def apply(self, event: e.Event) -> bool:
        """Apply one event; False (nothing changed) for an event this does not apply in place."""
        discard = self._discard
        match event:
            case e.ObjectEncountered(object_id=object_id, kind=kind):
                if object_id not in self.positions:
                    position = len(self.index)
                    self.positions[object_id] = position
                    self.index.append(object_id)
                    self.kinds.set(object_id, kind, position)
                    self.toolcall_turn.placed(object_id, position)
                    self.last_used.placed(object_id, position)
                self.pool.add(object_id, self.positions[object_id], self.index)
            case e.ObjectActivated(object_id=object_id, auto=auto):
                if auto:
                    self.auto_active.add(object_id)
                else:
                    discard(self.auto_active, object_id)
                self.pool.add(object_id, _position(self.positions, object_id), self.index)
                self.active.add(object_id)
                self.use_clock += 1
                self.last_used.set(object_id, self.use_clock, _position(self.positions, object_id))
                if object_id in self.excerpts:
                    del self.excerpts[object_id]
            case e.ObjectDeactivated(object_id=object_id, superseded_by=later, kept=excerpt):
                discard(self.active, object_id)
                discard(self.auto_active, object_id)
                if later is not None:
                    self.superseded[object_id] = later
                if excerpt:
                    self.excerpts[object_id] = excerpt
                elif object_id in self.excerpts:
                    del self.excerpts[object_id]
            case e.ToolCallRecorded(object_id=object_id, images=images):
                if not self._append(ToolResult(object_id, images)):
                    return False
                turn = len(self.turns) - 1
                self.toolcall_turn.set(object_id, turn, _position(self.positions, object_id))
            case e.AssistantMessageRecorded(message=message):
                return self._append(message)
            case e.ContextNoteRecorded(text=text):
                return self._append(ContextNote(text))
            case e.UserMessageRecorded(text=text, images=images):
                self._close_turn()
                number = len(self.turns)
                self.turns.append(Turn(number=number, messages=(UserMessage(text, images),)))
                close_turns(self.turns)
            case e.ObjectDemoted(object_id=object_id):
                self.pool.discard(object_id, _position(self.positions, object_id))
                discard(self.active, object_id)
                discard(self.auto_active, object_id)
            case e.ObjectPinned(object_id=object_id):
                self.pinned.add(object_id)
            case e.ObjectUnpinned(object_id=object_id):
                discard(self.pinned, object_id)
            case _:
                return isinstance(event, _NO_CHANGE)
        return True

    def state(self) -> SessionState:
        """The state the events applied so far lead to."""
        self._close_turn()
        index, positions = self.index.persistent(), self.positions.persistent()
        return attrs.evolve(
            self.base,
            index=index,
            positions=positions,
            kinds=self.kinds.persistent(positions, index),
            pool=self.pool.persistent(positions, index),
            active=self.active.persistent(),
            pinned=self.pinned.persistent(),
            auto_active=self.auto_active.persistent(),
            turns=self.turns.persistent(),
            toolcall_turn=self.toolcall_turn.persistent(positions, index),
            last_used=self.last_used.persistent(positions, index),
            use_clock=self.use_clock,
            superseded=self.superseded.persistent(),
            excerpts=self.excerpts.persistent(),
        )
