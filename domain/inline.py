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

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from domain.chat import AssistantMessage, ContextNote, ToolCallRequest, ToolResult, UserMessage
from domain.objects import ContentObject, FileObject, Source, ToolcallObject
from domain.rendering import AssembledContext, RenderedMessage, field
from domain.session.state import SessionState

__all__ = ["INLINE_GUIDE", "InlineCache", "compact_call", "handle", "render_inline"]

INLINE_GUIDE = (
    "Context handles: every tool output is labelled with a handle like #12. When the "
    "conversation grows, older outputs are collapsed to one line; call activate with a handle "
    '(for example {"id": "#12"}) to see one again, pin to keep one from collapsing, deactivate '
    "to collapse one yourself."
)
MIN_REFERENCE_CHARS = 200
"""Outputs shorter than this are repeated rather than referenced (a reference saves nothing)."""
MAX_LISTED_FILES = 12
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


def compact_call(call: ToolCallRequest, label: str) -> ToolCallRequest:
    """A collapsed call's request with its long string arguments shortened (the full arguments
    stay in the toolcall object)."""
    return ToolCallRequest(call.id, call.name, _shorten(call.arguments, label))


def handle(state: SessionState, object_id: str) -> str:
    """The short handle of an object of the session: ``#`` and its 1-based index position."""
    return f"#{state.positions[object_id] + 1}"


@attrs.define(eq=False)
class InlineCache:
    """Rendered messages of one session, reused while nothing shown earlier changes."""

    messages: list[RenderedMessage] = attrs.field(factory=list)
    counts: list[int] = attrs.field(factory=list)
    """Chat messages rendered per turn."""
    active: object = None
    """The active set the rendering reflects."""
    shown: dict[str, str] = attrs.field(factory=dict)
    """content_hash of each expanded output → the handle showing it."""
    rendered: set[str] = attrs.field(factory=set)
    """Ids of the tool calls rendered so far."""
    dirty: bool = False
    """Set when an object the rendering shows got a new version."""

    def invalidate(self, object_id: str) -> None:
        """An object got a new version: if it is shown, everything must be rendered again."""
        if object_id in self.rendered:
            self.dirty = True


def _collapsed(
    state: SessionState,
    obj: ToolcallObject,
    objects: Mapping[str, ContentObject],
    display_path: Callable[[Source], str],
) -> str:
    size = len(obj.content or "")
    line = f"[{handle(state, obj.id)} collapsed: {field(obj.tool)} {obj.status}, {size} chars"
    files = [
        f for f in (objects.get(ref) for ref in obj.file_refs or ()) if isinstance(f, FileObject)
    ]
    if files:
        shown = ", ".join(
            f"{handle(state, f.id)} {field(display_path(f.source))}"
            for f in files[:MAX_LISTED_FILES]
            if f.id in state.positions
        )
        more = len(files) - MAX_LISTED_FILES
        line += f"; files {shown}" + (f" and {more} more" if more > 0 else "")
    return line + "]"


def _tool_message(
    state: SessionState,
    obj: ToolcallObject,
    objects: Mapping[str, ContentObject],
    display_path: Callable[[Source], str],
    shown: dict[str, str],
) -> RenderedMessage:
    label = handle(state, obj.id)
    if obj.id not in state.active:
        text = _collapsed(state, obj, objects, display_path)
    else:
        output = obj.content or ""
        earlier = shown.get(obj.content_hash or "")
        if earlier is not None and len(output) >= MIN_REFERENCE_CHARS:
            text = f"[{label}: the same {len(output)} chars as {earlier} above]"
        else:
            if obj.content_hash is not None:
                shown.setdefault(obj.content_hash, label)
            text = f"[{label}]\n{output}"
    return RenderedMessage("tool", text, toolcall_id=obj.id, is_error=obj.status == "fail")


def _render_message(
    state: SessionState,
    message: object,
    objects: Mapping[str, ContentObject],
    display_path: Callable[[Source], str],
    shown: dict[str, str],
) -> RenderedMessage:
    if isinstance(message, UserMessage):
        return RenderedMessage("user", message.text)
    if isinstance(message, AssistantMessage):
        calls = tuple(
            compact_call(call, handle(state, call.id))
            if call.id in state.positions and call.id not in state.active
            else call
            for call in message.tool_calls
        )
        return RenderedMessage("assistant", message.text, calls)
    if isinstance(message, ContextNote):
        return RenderedMessage("user", f"[context] {message.text}")
    assert isinstance(message, ToolResult)
    obj = objects[message.toolcall_id]
    assert isinstance(obj, ToolcallObject)
    return _tool_message(state, obj, objects, display_path, shown)


def _unchanged_prefix(state: SessionState, cache: InlineCache) -> bool:
    """Whether everything rendered so far still renders the same: no shown object has a new
    version, and the active set only gained objects that have not been rendered yet."""
    previous = cache.active
    if previous is None or cache.dirty:
        return False
    if previous is state.active:
        return True
    assert isinstance(previous, type(state.active))
    if any(i not in state.active for i in previous):
        return False
    return not any(i in cache.rendered for i in state.active if i not in previous)


def render_inline(
    state: SessionState,
    objects: Mapping[str, ContentObject],
    system_prompt: str,
    display_path: Callable[[Source], str],
    cache: InlineCache | None = None,
) -> AssembledContext:
    """Assemble ``state`` in the inline layout (see the module docstring)."""
    cache = cache if cache is not None else InlineCache()
    if not _unchanged_prefix(state, cache):
        cache.messages, cache.counts, cache.shown = [], [], {}
        cache.rendered, cache.dirty = set(), False
    turns = state.turns
    for number, turn in enumerate(turns):
        done = cache.counts[number] if number < len(cache.counts) else 0
        if number >= len(cache.counts):
            cache.counts.append(0)
        for message in turn.messages[done:]:
            rendered = _render_message(state, message, objects, display_path, cache.shown)
            cache.messages.append(rendered)
            if isinstance(message, ToolResult):
                cache.rendered.add(message.toolcall_id)
        cache.counts[number] = len(turn.messages)
    cache.active = state.active
    prompt = f"{system_prompt}\n\n{INLINE_GUIDE}" if system_prompt else INLINE_GUIDE
    return AssembledContext(
        system_prompt=prompt, metadata=(), chat=tuple(cache.messages), active=()
    )
