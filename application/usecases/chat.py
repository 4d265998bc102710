"""RecordTurn (user and assistant messages) and RecordToolCall (docs/specification.md §2)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from selfctx.application.runner import OpenSession, Reads
from selfctx.application.usecases.base import Deps
from selfctx.domain.chat import AssistantMessage, ToolCallRequest, freeze_json
from selfctx.domain.errors import DuplicateObject, InvalidContent, InvalidInput
from selfctx.domain.identifiers import toolcall_id_problem
from selfctx.domain.objects import FileView, ToolcallObject, ToolStatus
from selfctx.domain.session import commands as c
from selfctx.domain.session.state import SessionState

__all__ = ["RecordToolCall", "RecordTurn"]


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidInput(what, value, f"must be text, got {type(value).__name__}")
    return value


def _name(value: object, what: str) -> str:
    text = _text(value, what)
    if not text:
        raise InvalidInput(what, value, "must not be empty")
    return text


def _check_json(value: object, what: str, whole: object) -> None:
    """Refuse what a JSON document cannot carry exactly, naming the whole value (``whole``)."""
    if value is None or isinstance(value, bool | int | str):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInput(what, whole, f"{value!r} is not a JSON number")
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidInput(what, whole, f"object key {key!r} is not a string")
            _check_json(item, what, whole)
        return
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        for item in value:
            _check_json(item, what, whole)
        return
    raise InvalidInput(what, whole, f"a {type(value).__name__} is not a JSON value")


def _toolcall_id(value: object) -> str:
    """Refused before the store is read: the answer must not depend on what exists."""
    problem = toolcall_id_problem(value)
    if problem is not None:
        raise InvalidInput("tool-call id", value, problem)
    return str(value)


def _tool_call_request(call: object) -> ToolCallRequest:
    if not isinstance(call, ToolCallRequest):
        raise InvalidInput("tool call", call, "must be a ToolCallRequest")
    _toolcall_id(call.id)
    _name(call.name, "tool name")
    _check_json(call.arguments, "tool arguments", call.arguments)
    return call


MAX_IMAGE_CHARS = 32 * 1024 * 1024
"""Characters of the images one message may carry (their base64 text, mostly)."""


def _images(images: Sequence[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    """Images as the chat keeps them: JSON objects of type ``image``, bounded in size."""
    if isinstance(images, str | bytes) or not isinstance(images, Sequence):
        raise InvalidInput("images", images, "must be a list of image objects")
    size = 0
    for image in images:
        if not isinstance(image, Mapping) or image.get("type") != "image":
            raise InvalidInput("image", image, "must be a JSON object of type 'image'")
        _check_json(image, "image", image)
        size += sum(len(v) for v in image.values() if isinstance(v, str))
    if size > MAX_IMAGE_CHARS:
        raise InvalidInput("images", f"{size} characters", f"over the limit of {MAX_IMAGE_CHARS}")
    return tuple(freeze_json(image) for image in images)


class RecordTurn:
    """Append user and assistant messages to the chat; a user message begins a turn."""

    def __init__(self, deps: Deps) -> None:
        self._deps = deps

    def user(
        self, session: OpenSession, text: str, images: Sequence[Mapping[str, Any]] = ()
    ) -> None:
        command = c.RecordUserMessage(_text(text, "user message"), _images(images))
        self._deps.runner.execute(session, lambda reads, state: command)

    def assistant(
        self,
        session: OpenSession,
        text: str,
        tool_calls: Sequence[ToolCallRequest] = (),
        *,
        reasoning: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        if isinstance(tool_calls, str | bytes) or not isinstance(tool_calls, Sequence):
            raise InvalidInput("tool calls", tool_calls, "must be a sequence of ToolCallRequest")
        tool_calls = [_tool_call_request(call) for call in tool_calls]
        ids = [call.id for call in tool_calls]
        if len(set(ids)) != len(ids):
            raise InvalidInput("tool calls", ids, "tool-call ids must be unique in a message")
        if isinstance(reasoning, str | bytes) or not all(
            isinstance(block, Mapping) and isinstance(block.get("type"), str) for block in reasoning
        ):
            raise InvalidInput("reasoning", reasoning, "must be a sequence of typed JSON objects")
        command = c.RecordAssistantMessage(
            AssistantMessage(_text(text, "assistant message"), tuple(tool_calls), reasoning)
        )
        self._deps.runner.execute(session, lambda reads, state: command)


class RecordToolCall:
    """A tool finished: its output becomes a toolcall object, auto-activated."""

    def __init__(self, deps: Deps) -> None:
        self._deps = deps

    def __call__(
        self,
        session: OpenSession,
        toolcall_id: str,
        *,
        tool: str,
        args: Mapping[str, Any],
        output: str | None,
        status: ToolStatus = "ok",
        args_display: str | None = None,
        file_refs: Sequence[str] | None = None,
        activate: bool = True,
        images: Sequence[Mapping[str, Any]] = (),
        file_views: Sequence[FileView] | None = None,
    ) -> ToolcallObject:
        kept = _images(images)
        if output is not None and not isinstance(output, str):
            raise InvalidContent(
                toolcall_id, f"tool output must be text, got {type(output).__name__}"
            )
        limit = self._deps.settings.max_output_bytes
        if (
            output is not None
            and len(output) > limit // 4
            and len(output.encode("utf-8", "surrogatepass")) > limit
        ):
            raise InvalidContent(toolcall_id, f"tool output is over the limit of {limit} bytes")
        if isinstance(args, Mapping):
            _check_json(args, "tool args", args)
        if args_display is not None:
            _text(args_display, "args_display")
        if file_refs is not None and (
            isinstance(file_refs, str | bytes)
            or not isinstance(file_refs, Sequence)
            or not all(isinstance(ref, str) for ref in file_refs)
        ):
            raise InvalidInput("file_refs", file_refs, "must be a list of object ids")
        _toolcall_id(toolcall_id)
        if file_views is not None and (
            not isinstance(file_views, Sequence)
            or not all(isinstance(view, FileView) for view in file_views)
        ):
            raise InvalidInput("file_views", file_views, "must be a list of FileView values")
        toolcall = ToolcallObject.build(
            toolcall_id,
            tool=_text(tool, "tool name"),
            args=args,
            output=output,
            status=status,
            chat_ref=session.state.chat_id,
            args_display=args_display,
            file_refs=file_refs,
            file_views=file_views,
        )
        if session.stale:
            # A commit's answer was lost: it may hold this very call, so learn its fate first.
            self._deps.runner.catch_up(session)
        known = session.objects.get(toolcall.id)
        if known is not None and known.object_hash == toolcall.object_hash:
            return toolcall  # the same call recorded again (a retry): nothing to do

        attempts = 0

        def build(reads: Reads, state: SessionState) -> c.Command:
            nonlocal attempts
            attempts += 1
            # No read on the first attempt: the commit's precondition (the id must not exist yet)
            # refuses an id some other object holds, and the retry after that conflict reads it
            # and names it. A read per call would be one more round trip on every turn.
            if attempts > 1:
                stored = reads.stored(toolcall.id)
                if stored is not None and not state.in_index(toolcall.id):
                    raise DuplicateObject(toolcall.id, "another session's object has this id")
            return c.RecordToolCall(toolcall, activate, kept)

        self._deps.runner.execute(session, build)
        return toolcall
