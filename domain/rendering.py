"""Context assembly (docs/specification.md §4): what the model sees, section by section.

The order is the design's: system prompt, metadata pool, chat, active content. In the chat every
tool output is replaced by a ``toolcall_ref`` line; an active tool call's output appears once, in
the active content section (docs/decisions/0002-tool-outputs-only-in-active.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs

from selfctx.domain.chat import (
    AssistantMessage,
    ContextNote,
    ToolCallRequest,
    ToolResult,
    Turn,
    UserMessage,
    thaw_json,
)
from selfctx.domain.compaction import summary_text
from selfctx.domain.objects import ContentObject, FileObject, Source, ToolcallObject
from selfctx.domain.session.state import SessionState

__all__ = [
    "REPORTED_NOTE",
    "ActiveBlock",
    "AssembledContext",
    "RenderCache",
    "RenderedMessage",
    "active_block_text",
    "field",
    "metadata_line",
    "render_context",
    "render_turn",
    "toolcall_images",
    "toolcall_ref",
]

_STATUS_NOTES = {"deleted": "[deleted]", "binary": "[binary]", "too_large": "[too large]"}


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def field(value: str) -> str:
    """A value as it may appear inside one rendered line: control characters (a newline in a
    file name, say) are escaped, so no value can forge a line of the context."""
    if _CONTROL.search(value) is None:
        return value
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", value)


REPORTED_NOTE = "[reported by another agent's tool output; not read from the file]"
"""Shown after a file's line when its content is another session's report (decision 0031)."""


def metadata_line(
    obj: ContentObject, display_path: str | None = None, viewer: str | None = None
) -> str:
    """The one-line summary of a content object in the metadata pool (§4.1), as session
    ``viewer`` sees it (content another session's harness reported is marked as such)."""
    if isinstance(obj, ToolcallObject):
        return f"id={field(obj.id)} type=toolcall tool={field(obj.tool)} status={obj.status}"
    path = field(display_path or obj.source.path)
    head = f"id={obj.id} type=file path={path} file_type={field(obj.file_type)}"
    if obj.content_status is not None:
        return f"{head} {_STATUS_NOTES[obj.content_status]}"
    if obj.file_hash is None:
        return f"{head} [unread]"
    if viewer is not None and obj.reported_elsewhere(viewer):
        return f"{head} char_count={obj.char_count} {REPORTED_NOTE}"
    return f"{head} char_count={obj.char_count}"


def toolcall_ref(obj: ToolcallObject) -> str:
    """What stands in the chat where a tool's output was."""
    return f"toolcall_ref id={field(obj.id)} tool={field(obj.tool)} status={obj.status}"


def active_block_text(object_id: str, content: str | None) -> str:
    """One block of the active content section."""
    body = content if content is not None else "[no content]"
    return f"ACTIVE_CONTENT id={field(object_id)}\n{body}"


@attrs.frozen
class RenderedMessage:
    """One chat message as the model sees it."""

    role: str
    """``user``, ``assistant`` or ``tool``."""
    text: str
    """The text (for ``tool``, the toolcall_ref line)."""
    tool_calls: tuple[ToolCallRequest, ...] = ()
    """For ``assistant``: the tool calls it requested."""
    toolcall_id: str | None = None
    """For ``tool``: the tool call this result answers."""
    is_error: bool = False
    """For ``tool``: the tool call failed (status ``fail``)."""
    reasoning: tuple[Mapping[str, Any], ...] = ()
    """For ``assistant``: the provider's reasoning blocks as recorded (``AssistantMessage``)."""
    images: tuple[Mapping[str, Any], ...] = ()
    """For ``user``, and ``tool`` while its output is shown: the images that came with it."""


@attrs.frozen
class ActiveBlock:
    """One object of the active set with its full content."""

    object_id: str
    content: str | None
    images: tuple[Mapping[str, Any], ...] = ()
    """A tool call's images (kept in the chat with its result), shown with its output."""

    @property
    def text(self) -> str:
        return active_block_text(self.object_id, self.content)


@attrs.frozen
class AssembledContext:
    """The four sections of one turn's context."""

    system_prompt: str
    metadata: tuple[str, ...]
    """Metadata pool lines, in first-encounter order."""
    chat: tuple[RenderedMessage, ...]
    active: tuple[ActiveBlock, ...]
    """Active content blocks, in first-encounter order."""

    def metadata_text(self) -> str:
        return "\n".join(self.metadata)

    def active_text(self) -> str:
        return "\n\n".join(block.text for block in self.active)

    def to_text(self) -> str:
        """A plain-text rendering of all four sections, for people and for size measurements."""
        parts = [f"[system]\n{self.system_prompt}"]
        if self.metadata:
            parts.append(f"[metadata]\n{self.metadata_text()}")
        for message in self.chat:
            body = message.text
            for call in message.tool_calls:
                body += f"\n-> {call_summary(call.name, call.arguments)}  [{call.id}]"
            parts.append(f"[{message.role}]\n{body}")
        if self.active:
            parts.append(f"[active]\n{self.active_text()}")
        return "\n\n".join(parts)


CALL_SUMMARY_CHARS = 100
"""The longest summary :func:`call_summary` writes."""


def call_summary(name: str, arguments: Any) -> str:
    """One line for people saying what a tool call ran: its name, then its command (a
    ``command`` or ``cmd`` argument, or the only argument when it is a string; its first line),
    else its arguments as JSON; at most :data:`CALL_SUMMARY_CHARS` characters, control
    characters escaped."""
    args = thaw_json(arguments) if isinstance(arguments, Mapping) else {}
    command = args.get("command", args.get("cmd"))
    if not isinstance(command, str) and len(args) == 1:
        command = next(iter(args.values()))
    if isinstance(command, str):
        lines = command.strip().splitlines() or [""]
        detail = lines[0] + (" …" if len(lines) > 1 else "")
    else:
        detail = json.dumps(args or arguments, ensure_ascii=False, sort_keys=True, default=str)
    line = field(f"{name} {detail}".strip())
    if len(line) > CALL_SUMMARY_CHARS:
        line = line[: CALL_SUMMARY_CHARS - 1] + "…"
    return line


def render_turn(turn: Turn, objects: Mapping[str, ContentObject]) -> tuple[RenderedMessage, ...]:
    """The messages of one turn as the model sees them."""
    return tuple(_turn_messages(turn, objects))


def _turn_messages(turn: Turn, objects: Mapping[str, ContentObject]) -> Iterator[RenderedMessage]:
    for message in turn.messages:
        if isinstance(message, UserMessage):
            yield RenderedMessage("user", message.text, images=message.images)
        elif isinstance(message, AssistantMessage):
            yield RenderedMessage(
                "assistant", message.text, message.tool_calls, reasoning=message.reasoning
            )
        elif isinstance(message, ToolResult):
            obj = objects[message.toolcall_id]
            assert isinstance(obj, ToolcallObject)
            yield RenderedMessage(
                "tool", toolcall_ref(obj), toolcall_id=obj.id, is_error=obj.status == "fail"
            )
        elif isinstance(message, ContextNote):
            yield RenderedMessage("user", f"[context] {message.text}")


@attrs.define(eq=False)
class RenderCache:
    """Memoised renderings for one session, so each turn's assembly costs little more than what
    changed since the last one. Past turns never change and the metadata pool only grows at the
    end; an object whose version changes must be reported with :meth:`invalidate`."""

    lines: list[str] = attrs.field(factory=list)
    """Metadata lines of ``line_ids``, in index order."""
    line_ids: list[str] = attrs.field(factory=list)
    stale: set[str] = attrs.field(factory=set)
    """Ids whose object changed since their line was rendered."""
    active_ids: object = None
    """The active set ``active_order`` was computed from."""
    active_order: list[str] = attrs.field(factory=list)
    blocks: dict[str, ActiveBlock] = attrs.field(factory=dict)
    chat: list[RenderedMessage] = attrs.field(factory=list)
    chat_turns: int = 0
    """Turns fully or partly rendered into ``chat``."""
    last_turn_length: int = 0
    """Messages of the last rendered turn already in ``chat``."""

    def invalidate(self, object_id: str) -> None:
        if self.line_ids:  # (nothing rendered, nothing stale: a session of another layout)
            self.stale.add(object_id)


def _metadata(
    state: SessionState, cache: RenderCache, line_of: Callable[[str], str]
) -> tuple[str, ...]:
    index = state.index
    if len(state.pool) != len(index):  # some object left the pool: no shortcut
        cache.lines, cache.line_ids, cache.stale = [], [], set()
        return tuple(line_of(i) for i in index if i in state.pool)
    known = len(cache.line_ids)
    if known > len(index) or (known and index[known - 1] != cache.line_ids[-1]):
        cache.lines, cache.line_ids, known = [], [], 0  # a different session state: start over
    if cache.stale:
        for object_id in cache.stale:
            position = state.positions.get(object_id)
            if position is not None and position < known:
                cache.lines[position] = line_of(object_id)
        cache.stale.clear()
    for object_id in index[known:]:
        cache.line_ids.append(object_id)
        cache.lines.append(line_of(object_id))
    return tuple(cache.lines)


def _active(
    state: SessionState, cache: RenderCache, objects: Mapping[str, ContentObject]
) -> tuple[ActiveBlock, ...]:
    if cache.active_ids is not state.active:  # the set is immutable: same object, same order
        cache.active_order = state.ordered(state.active)
        cache.active_ids = state.active
    blocks = cache.blocks
    out = []
    for object_id in cache.active_order:
        content = objects[object_id].content
        block = blocks.get(object_id)
        if block is None or block.content is not content:
            images = toolcall_images(state, object_id)
            block = blocks[object_id] = ActiveBlock(object_id, content, images)
        out.append(block)
    return tuple(out)


def toolcall_images(state: SessionState, object_id: str) -> tuple[Mapping[str, Any], ...]:
    """The images a tool call's result came with (none for other objects): its result is in the
    turn ``toolcall_turn`` names, so only that turn is searched."""
    turn = state.toolcall_turn.get(object_id)
    if turn is None:
        return ()
    for message in state.turns[turn].messages:
        if isinstance(message, ToolResult) and message.toolcall_id == object_id:
            return message.images
    return ()


def _chat(
    state: SessionState, cache: RenderCache, objects: Mapping[str, ContentObject]
) -> tuple[RenderedMessage, ...]:
    turns = state.turns
    if cache.chat_turns > len(turns) or (
        cache.chat_turns and cache.last_turn_length > len(turns[cache.chat_turns - 1].messages)
    ):
        cache.chat, cache.chat_turns, cache.last_turn_length = [], 0, 0
    if state.compacted and not cache.chat_turns:
        # The compacted turns are one message (decision 0043); rendering goes on after them.
        cache.chat = [RenderedMessage("user", summary_text(state.compacted, state.summary))]
        cache.chat_turns = state.compacted
        cache.last_turn_length = len(turns[state.compacted - 1].messages)
    if cache.chat_turns:
        last = turns[cache.chat_turns - 1]
        new = last.messages[cache.last_turn_length :]
        cache.chat.extend(_turn_messages(Turn(last.number, new), objects))
        cache.last_turn_length = len(last.messages)
    for turn in turns[cache.chat_turns :]:
        cache.chat.extend(_turn_messages(turn, objects))
        cache.chat_turns += 1
        cache.last_turn_length = len(turn.messages)
    return tuple(cache.chat)


def render_context(
    state: SessionState,
    objects: Mapping[str, ContentObject],
    system_prompt: str,
    display_path: Callable[[Source], str],
    cache: RenderCache | None = None,
) -> AssembledContext:
    """Assemble the context of ``state`` (§4.1) from the latest known object versions.

    With a ``cache`` (one per session), only what changed since the previous call is rendered.
    """

    def line_of(object_id: str) -> str:
        obj = objects[object_id]
        path = display_path(obj.source) if isinstance(obj, FileObject) else None
        return metadata_line(obj, path, state.session_id)

    cache = cache if cache is not None else RenderCache()
    return AssembledContext(
        system_prompt=system_prompt,
        metadata=_metadata(state, cache, line_of),
        chat=_chat(state, cache, objects),
        active=_active(state, cache, objects),
    )
