"""The ``inline`` layout: an append-only prompt that provider caches can reuse.

Every object is shown where it entered the conversation. A tool message holds its tool's output
while the tool call is active and a one-line reference once it is collapsed; there is no metadata
section above the chat and no active section below it, so between two collapses the prompt only
grows at its end and every call re-reads the previous prompt from the cache. Objects are named by
short handles, ``#n`` for the n-th object of the session index (stable for the session's life).
A tool output identical to one still shown earlier is rendered as a reference to it.
docs/decisions/0008-cache-aware-layout.md explains the choices and the measurements behind them.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from selfctx.domain.chat import (
    AssistantMessage,
    ContextNote,
    FlatMap,
    ToolCallRequest,
    ToolResult,
    Turn,
    UserMessage,
)
from selfctx.domain.compaction import summary_text
from selfctx.domain.objects import ContentObject, FileObject, Source, ToolcallObject
from selfctx.domain.relevance import superseded_by
from selfctx.domain.rendering import ActiveBlock, AssembledContext, RenderedMessage, field
from selfctx.domain.session.state import SessionState, members

__all__ = [
    "INLINE_GUIDE",
    "InlineCache",
    "Origins",
    "compact_call",
    "handle",
    "inline_guide",
    "render_inline",
]


def inline_guide(prefix: str = "") -> str:
    """The note the inline layouts add to the system prompt. It names the context tools with
    their handle the way a harness offers them either way, as tools or as shell commands (a
    mini-swe-agent model runs ``activate #12`` in its shell), so it never contradicts the
    harness's own instructions; ``prefix`` is the tools' prefix (``context_``)."""
    return (
        "Context handles: every tool output is labelled with a handle like #12. When the "
        "conversation grows, older outputs are collapsed to one line: "
        f"`{prefix}activate #12` shows one again, `{prefix}pin #12` keeps it from collapsing, "
        f"`{prefix}deactivate #12` collapses it."
    )


INLINE_GUIDE = inline_guide()
MIN_REFERENCE_CHARS = 200
"""Outputs shorter than this are repeated rather than referenced (a reference saves nothing)."""
MAX_LISTED_FILES = 6
MAX_COLLAPSED_ARGUMENT = 120
"""A collapsed tool call's string arguments longer than this are shortened in its request."""


def _shorten(value: Any, label: str) -> Any:
    if isinstance(value, str) and len(value) > MAX_COLLAPSED_ARGUMENT:
        return f"{value[:60]}… [{len(value)} chars, collapsed with {label}]"
    if isinstance(value, Mapping):
        return {k: _shorten(v, label) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [_shorten(v, label) for v in value]
    return value


def _long(value: Any) -> bool:
    """Whether ``_shorten`` would change ``value``."""
    kind = type(value)
    if kind is str:
        return len(value) > MAX_COLLAPSED_ARGUMENT
    if kind is FlatMap:  # a call's arguments, frozen: read its pairs, not the slower values view
        return any(_long(v) for _, v in value.pairs())
    if isinstance(value, str):
        return len(value) > MAX_COLLAPSED_ARGUMENT
    if isinstance(value, Mapping):
        return any(_long(v) for v in value.values())
    if isinstance(value, Sequence):
        return any(_long(v) for v in value)
    return False


def compact_call(call: ToolCallRequest, label: str) -> ToolCallRequest:
    """A collapsed call's request with its long string arguments shortened (the full arguments
    stay in the toolcall object); the call itself when none is long."""
    if not _long(call.arguments):
        return call
    return ToolCallRequest(call.id, call.name, _shorten(call.arguments, label))


def handle(state: SessionState, object_id: str) -> str:
    """The short handle of an object of the session: ``#`` and its 1-based index position."""
    return f"#{state.positions[object_id] + 1}"


class Origins:
    """(turn number, index in the turn) of each rendered message, as two arrays of machine
    integers: 4 bytes each (a turn's number and a message's index in it are below 2**31), where
    a tuple of Python integers per message was about 72 bytes (decisions 0105, 0141)."""

    def __init__(self) -> None:
        self._turns = array("i")
        self._indexes = array("i")

    def __len__(self) -> int:
        return len(self._turns)

    def __getitem__(self, position: int) -> tuple[int, int]:
        return self._turns[position], self._indexes[position]

    def append(self, origin: tuple[int, int]) -> None:
        self._turns.append(origin[0])
        self._indexes.append(origin[1])

    def truncate(self, position: int) -> None:
        """Forget the origins from ``position`` on."""
        del self._turns[position:]
        del self._indexes[position:]


@attrs.define(eq=False)
class InlineCache:
    """Rendered messages of one session. Appending renders only the new messages; a collapse (or
    a new version of something shown) re-renders only from the first message it changes."""

    messages: list[RenderedMessage] = attrs.field(factory=list)
    origin: Origins = attrs.field(factory=Origins)
    """(turn number, index in the turn) of each rendered message."""
    counts: list[int] = attrs.field(factory=list)
    """Chat messages rendered per turn."""
    active: object = None
    """The active set the rendering reflects."""
    shown: dict[str, tuple[str, int]] = attrs.field(factory=dict)
    """content_hash of each expanded output → (the handle showing it, its message position)."""
    positions: dict[str, int] = attrs.field(factory=dict)
    """Tool-call id → position of the first message that shows it (its request or result)."""
    stale_from: int | None = None
    """The first position whose rendering may have changed (None: none)."""
    compacted: dict[str, ToolCallRequest] = attrs.field(factory=dict)
    """Shortened requests of collapsed calls, by call id: only of the calls with a long
    argument (a call shown as it is was an entry here too, 12 bytes a message; decision
    0141)."""
    viewed: set[str] = attrs.field(factory=set)
    """Files some tool call of the session read, viewed, changed or named: its output or its
    arguments are where they show."""
    scanned: int = 0
    """How much of the session index ``viewed`` has looked at."""

    def show(self, content_hash: str, label: str) -> None:
        """The next message shows this content in full under ``label``."""
        if content_hash not in self.shown:
            self.shown[content_hash] = (label, len(self.messages))

    def place(self, call_id: str, position: int) -> None:
        """The first message that shows ``call_id`` (its request or result) is ``position``
        (the message being rendered: positions come in the order of the messages)."""
        if call_id not in self.positions:
            self.positions[call_id] = position

    def invalidate(self, object_id: str) -> None:
        """An object got a new version: render again from its first message."""
        position = self.positions.get(object_id)
        if position is not None:
            self.stale_from = (
                position if self.stale_from is None else min(self.stale_from, position)
            )

    def truncate(self, position: int) -> None:
        """Forget everything rendered from ``position`` on."""
        if position < len(self.origin):
            first_turn, first_index = self.origin[position]
            self.counts[first_turn] = first_index
            for turn in range(first_turn + 1, len(self.counts)):
                self.counts[turn] = 0
        # ``shown`` and ``positions`` gain their keys as the messages are rendered, in order:
        # the ones of the messages removed are their last, taken off in the time of what goes,
        # not of the session's size, and without a table of its own for each message (decision
        # 0117; a list of keys per position was about 100 bytes a message)
        shown, positions = self.shown, self.positions
        while shown and next(reversed(shown.values()))[1] >= position:
            shown.popitem()
        while positions and next(reversed(positions.values())) >= position:
            positions.popitem()
        del self.messages[position:]
        self.origin.truncate(position)
        self.stale_from = None


def _collapsed(
    state: SessionState,
    obj: ToolcallObject,
    objects: Mapping[str, ContentObject],
    display_path: Callable[[Source], str],
) -> str:
    size = obj.content_length  # the same as len(obj.content), also when it is not in memory
    line = f"[{handle(state, obj.id)} collapsed: {field(obj.tool)} {obj.status}, {size} chars"
    kinds = state.kinds
    refs = [ref for ref in obj.file_refs or () if kinds.get(ref) == "file"]
    if refs:  # the files of the session's index it names; the first few by their paths
        listed = (objects.get(ref) for ref in refs[:MAX_LISTED_FILES])
        shown = ", ".join(
            f"{handle(state, f.id)} {field(display_path(f.source))}"
            for f in listed
            if isinstance(f, FileObject)
        )
        more = len(refs) - MAX_LISTED_FILES
        line += f"; files {shown}" + (f" and {more} more" if more > 0 else "")
    later = state.superseded.get(obj.id)
    if later is not None and later in state.positions:
        other = objects.get(later)
        if isinstance(other, ToolcallObject) and superseded_by(obj, [other]) is None:
            line += f"; stale: {handle(state, later)} changed its file since"
        else:
            newer = _changed_between(state, obj, later, objects)
            shows = "shows its lines in a newer version" if newer else "shows its lines again"
            line += f"; superseded: {handle(state, later)} {shows}"
    kept = state.excerpts.get(obj.id)
    if kept:  # part of the view stays (decision 0075)
        return f"{line}; part kept below, activate {handle(state, obj.id)} for all]\n{kept}"
    return line + "]"


def _changed_between(
    state: SessionState, obj: ToolcallObject, later: str, objects: Mapping[str, ContentObject]
) -> bool:
    """Whether a tool call between ``obj`` and ``later`` changed a file ``obj`` showed."""
    files = {v.file for v in obj.file_views or () if v.kind != "change"}
    for object_id in state.index[state.positions[obj.id] + 1 : state.positions[later] + 1]:
        other = objects.get(object_id)
        if isinstance(other, ToolcallObject) and any(
            v.kind == "change" and v.file in files for v in other.file_views or ()
        ):
            return True
    return False


def _tool_message(
    state: SessionState,
    obj: ToolcallObject,
    objects: Mapping[str, ContentObject],
    display_path: Callable[[Source], str],
    cache: InlineCache,
) -> RenderedMessage:
    label = handle(state, obj.id)
    if obj.id not in state.active:
        text = _collapsed(state, obj, objects, display_path)
    else:
        output = obj.content or ""
        earlier = cache.shown.get(obj.content_hash or "")
        if earlier is not None and len(output) >= MIN_REFERENCE_CHARS:
            text = f"[{label}: the same {len(output)} chars as {earlier[0]} above]"
        else:
            if obj.content_hash is not None:
                cache.show(obj.content_hash, label)
            text = f"[{label}]\n{output}"
    return RenderedMessage("tool", text, toolcall_id=obj.id, is_error=obj.status == "fail")


def _render_message(
    state: SessionState,
    message: object,
    objects: Mapping[str, ContentObject],
    display_path: Callable[[Source], str],
    cache: InlineCache,
    lines: Mapping[str, RenderedMessage],
) -> RenderedMessage:
    position = len(cache.messages)
    if isinstance(message, UserMessage):
        return RenderedMessage("user", message.text, images=message.images)
    if isinstance(message, AssistantMessage):
        calls = []
        shortened = False
        for call in message.tool_calls:
            cache.place(call.id, position)
            if call.id in state.positions and call.id not in state.active:
                compacted = cache.compacted.get(call.id)
                if compacted is None:
                    compacted = call
                    if _long(call.arguments):
                        compacted = compact_call(call, handle(state, call.id))
                        cache.compacted[call.id] = compacted
                calls.append(compacted)
                shortened = shortened or compacted is not call
            else:
                calls.append(call)
        # the chat's own tuple when no call is shortened (most are not): not a copy of it per
        # rendered message (decision 0121)
        shown = tuple(calls) if shortened else message.tool_calls
        return RenderedMessage("assistant", message.text, shown, reasoning=message.reasoning)
    if isinstance(message, ContextNote):
        return RenderedMessage("user", f"[context] {message.text}")
    assert isinstance(message, ToolResult)
    cache.place(message.toolcall_id, position)
    if message.toolcall_id not in state.active:
        recorded = lines.get(message.toolcall_id)
        if recorded is not None:
            return recorded
    obj = objects[message.toolcall_id]
    assert isinstance(obj, ToolcallObject)
    rendered = _tool_message(state, obj, objects, display_path, cache)
    if message.images and obj.id in state.active:  # shown with the output, collapsed with it
        return attrs.evolve(rendered, images=message.images)
    return rendered


def _first_changed(state: SessionState, cache: InlineCache) -> int | None:
    """The first rendered position that may render differently now (None: none): a version
    changed, or an object shown earlier was collapsed or activated again."""
    previous = cache.active
    if previous is None:
        return 0
    first = cache.stale_from
    if previous is not state.active:
        assert isinstance(previous, type(state.active))
        for object_id in members(previous) ^ members(state.active):
            position = cache.positions.get(object_id)
            if position is not None and (first is None or position < first):
                first = position
    return first


def _prefetch(
    objects: Mapping[str, ContentObject],
    turns: Sequence[Turn],
    start: int,
    counts: list[int],
) -> None:
    """Let a mapping that reads what it does not hold (the session's objects, whose older tool
    calls' metadata is in the store: decision 0111) read the calls about to be rendered in one
    batch, not one at a time."""
    prefetch = getattr(objects, "prefetch", None)
    if prefetch is None:
        return
    ids: list[str] = []
    for number in range(start, len(turns)):
        for message in turns[number].messages[counts[number] :]:
            if isinstance(message, ToolResult):
                ids.append(message.toolcall_id)
            elif isinstance(message, AssistantMessage):
                ids.extend(call.id for call in message.tool_calls)
    if len(ids) > 1:
        prefetch(ids)


def render_inline(
    state: SessionState,
    objects: Mapping[str, ContentObject],
    system_prompt: str,
    display_path: Callable[[Source], str],
    cache: InlineCache | None = None,
    lines: Mapping[str, RenderedMessage] | None = None,
) -> AssembledContext:
    """Assemble ``state`` in the inline layout (see the module docstring). ``lines``: collapsed
    outputs' messages as a request recorded them, by tool call id, used instead of rendering
    them again (neither the output nor the files its line names need be held then)."""
    lines = lines if lines is not None else {}
    cache = cache if cache is not None else InlineCache()
    first = _first_changed(state, cache)
    if first is not None:
        cache.truncate(first)
    turns = state.turns
    while len(cache.counts) < len(turns):
        cache.counts.append(0)
    if state.compacted and not cache.messages:
        # The compacted turns are one message (decision 0043); rendering goes on after them.
        last = state.compacted - 1
        cache.messages.append(RenderedMessage("user", summary_text(state.compacted, state.summary)))
        cache.origin.append((last, len(turns[last].messages) - 1))
        cache.counts[last] = len(turns[last].messages)
    start = cache.origin[-1][0] if cache.origin else 0
    _prefetch(objects, turns, start, cache.counts)
    for number in range(start, len(turns)):
        turn = turns[number]
        for index in range(cache.counts[number], len(turn.messages)):
            message = turn.messages[index]
            rendered = _render_message(state, message, objects, display_path, cache, lines)
            cache.messages.append(rendered)
            cache.origin.append((number, index))
        cache.counts[number] = len(turn.messages)
    cache.active = state.active
    prompt = f"{system_prompt}\n\n{INLINE_GUIDE}" if system_prompt else INLINE_GUIDE
    return AssembledContext(
        system_prompt=prompt,
        metadata=(),
        chat=tuple(cache.messages),
        active=_files_shown_by_no_output(state, objects, cache),
    )


def _files_shown_by_no_output(
    state: SessionState, objects: Mapping[str, ContentObject], cache: InlineCache
) -> tuple[ActiveBlock, ...]:
    """Active files that no tool call of the session read, viewed, changed or named (a harness or
    an application read or activated them through the service): after the chat, as the ssot
    layout shows active content. A file a tool call read shows in its output, collapsed or not;
    one it wrote, in its arguments or nowhere, as the agent saw it."""
    index = state.index
    for object_id in index[cache.scanned :]:
        obj = objects.get(object_id)
        if isinstance(obj, ToolcallObject):
            cache.viewed.update(v.file for v in obj.file_views or ())
            cache.viewed.update(obj.file_refs or ())
    cache.scanned = len(index)
    kinds = state.kinds
    files = [i for i in members(state.active) - cache.viewed if kinds.get(i) == "file"]
    return tuple(
        ActiveBlock(i, obj.content)
        for i in sorted(files, key=state.positions.__getitem__)
        if isinstance(obj := objects.get(i), FileObject)
    )
