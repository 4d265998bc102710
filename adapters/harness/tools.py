"""The model's context tools: ready schemas for both formats, and the handler that runs them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from selfctx.application.ports.store import StoreError
from selfctx.application.service import ContextService
from selfctx.domain.errors import InvalidInput, SelfContextError
from selfctx.domain.inline import handle
from selfctx.domain.objects import FileObject, ToolcallObject
from selfctx.domain.rendering import REPORTED_NOTE

__all__ = ["CONTEXT_TOOLS", "ToolAnswer", "handle_context_tool", "is_context_tool", "tool_schemas"]

CONTEXT_TOOLS: Final[Mapping[str, str]] = {
    "activate": "Load the full content of an object (file or tool output) into your context. "
    "Reading a file you have only seen listed ([unread]) reads it.",
    "deactivate": "Collapse an object to its one-line summary. Its content stays retrievable.",
    "pin": "Keep a tool output in context: pinned outputs never collapse automatically.",
    "unpin": "Remove a pin; the output may collapse again once it is old.",
}
_ID = {"type": "string", "description": "The object's id, as shown after id= in its line."}


def is_context_tool(name: str) -> bool:
    return name in CONTEXT_TOOLS


def tool_schemas(fmt: str) -> list[dict[str, Any]]:
    """The four tools as OpenAI ``tools`` entries or Anthropic tool definitions."""
    schema = {"type": "object", "properties": {"id": _ID}, "required": ["id"]}
    if fmt == "openai":
        return [
            {"type": "function", "function": {"name": n, "description": d, "parameters": schema}}
            for n, d in CONTEXT_TOOLS.items()
        ]
    if fmt == "anthropic":
        return [
            {"name": n, "description": d, "input_schema": schema} for n, d in CONTEXT_TOOLS.items()
        ]
    raise InvalidInput("format", fmt, "use 'openai' or 'anthropic'")


@attrs.frozen
class ToolAnswer:
    """The result text for the model, and whether the call did what it asked."""

    ok: bool
    message: str


def handle_context_tool(
    service: ContextService, session_id: str, name: str, arguments: Mapping[str, Any]
) -> ToolAnswer:
    """Run one context tool; every refusal becomes a short answer, never an exception — except
    store failures, which the harness must see.

    Under the ``inline`` policy the prompt is append-only, so ``activate`` answers with the
    object's content (the tool result is where it shows) instead of expanding it in place, and
    ``deactivate`` of a file collapses the tool messages that show it.
    """
    if name not in CONTEXT_TOOLS:
        return ToolAnswer(
            False, f"unknown tool {name!r}; the context tools are {sorted(CONTEXT_TOOLS)}"
        )
    object_id = arguments.get("id") if isinstance(arguments, Mapping) else None
    if not isinstance(object_id, str) or not object_id:
        return ToolAnswer(False, f"{name} needs an 'id' argument: the id shown in an object's line")
    try:
        if service.state(session_id).policy.inline_layout:
            return _inline(service, session_id, name, object_id)
        result = getattr(service, name)(session_id, object_id)
    except StoreError:
        raise
    except SelfContextError as exc:
        return ToolAnswer(False, f"{name} {object_id}: {exc}")
    return ToolAnswer(result.ok, result.message)


def _inline(service: ContextService, session_id: str, name: str, ref: str) -> ToolAnswer:
    obj = service.object(session_id, ref)
    state = service.state(session_id)
    label = handle(state, obj.id)
    if name == "activate":
        if isinstance(obj, FileObject) and obj.needs_read:
            service.activate(session_id, obj.id)  # reads the source, or says why it cannot
            obj = service.object(session_id, obj.id)
        if isinstance(obj, FileObject):
            what = f"file {service.mounts.display_path(obj.source)}"
            if obj.reported_elsewhere(session_id):  # decision 0031: not the file's truth
                what = f"{what} {REPORTED_NOTE}"
        else:
            what = f"output of {obj.tool} ({obj.status})"
        status = obj.content_status if isinstance(obj, FileObject) else None
        body = obj.content if obj.content is not None else f"(no content: {status or 'empty'})"
        return ToolAnswer(True, f"[{label} {what}]\n{body}")
    if isinstance(obj, FileObject) and name == "deactivate":
        showing = [
            t
            for t in state.ordered(state.active)
            if isinstance(o := service.object(session_id, t), ToolcallObject)
            and (
                obj.id in (o.file_refs or ())
                or (o.tool == "activate" and _target(service, session_id, o) == obj.id)
            )
        ]
        for t in showing:
            service.deactivate(session_id, t)
        service.deactivate(session_id, obj.id)
        return ToolAnswer(True, f"{label} is collapsed wherever it was shown")
    result = getattr(service, name)(session_id, obj.id)
    return ToolAnswer(result.ok, result.message.replace(obj.id, label))


def _target(service: ContextService, session_id: str, call: ToolcallObject) -> str | None:
    ref = call.args.get("id")
    if not isinstance(ref, str):
        return None
    try:
        return service.object(session_id, ref).id
    except SelfContextError:
        return None
