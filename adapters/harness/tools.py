"""The model's context tools: ready schemas for both formats, and the handler that runs them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

import attrs
from pyrsistent import thaw

from selfctx.application.ports.store import StoreError
from selfctx.application.service import ContextService
from selfctx.domain.errors import InvalidInput, SelfContextError
from selfctx.domain.inline import handle
from selfctx.domain.objects import FileObject, ToolcallObject
from selfctx.domain.rendering import REPORTED_NOTE, toolcall_images

__all__ = [
    "CONTEXT_TOOLS",
    "ToolAnswer",
    "check_prefix",
    "context_tool",
    "handle_context_tool",
    "is_context_tool",
    "is_prefix",
    "tool_schemas",
]

CONTEXT_TOOLS: Final[Mapping[str, str]] = {
    "activate": "Load the full content of an object (file or tool output) into your context. "
    "Reading a file you have only seen listed ([unread]) reads it.",
    "deactivate": "Collapse an object to its one-line summary. Its content stays retrievable.",
    "pin": "Keep a tool output in context: pinned outputs never collapse automatically.",
    "unpin": "Remove a pin; the output may collapse again once it is old.",
}
_ID = {"type": "string", "description": "The object's id, as shown after id= in its line."}


_PREFIX = re.compile(r"[A-Za-z0-9_-]{0,32}")
"""A prefix keeps names valid for every provider (``^[a-zA-Z0-9_-]{1,64}$``)."""


def is_prefix(prefix: str) -> bool:
    """Context tool names may start with ``prefix``."""
    return _PREFIX.fullmatch(prefix) is not None


def check_prefix(prefix: str) -> str:
    """``prefix`` if context tool names may start with it, else :class:`InvalidInput`."""
    if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
        raise InvalidInput(
            "tool prefix", prefix, "use at most 32 letters, digits, '_' or '-' (e.g. 'context_')"
        )
    return prefix


def context_tool(name: str, prefix: str = "") -> str | None:
    """The context tool (``activate``, ...) that ``name`` calls under ``prefix``, or None: a
    harness's own tool, even one called ``activate`` when the prefix is not empty."""
    if not name.startswith(prefix):
        return None
    bare = name[len(prefix) :]
    return bare if bare in CONTEXT_TOOLS else None


def is_context_tool(name: str, prefix: str = "") -> bool:
    """``name`` calls a context tool under ``prefix``."""
    return context_tool(name, prefix) is not None


def tool_schemas(fmt: str, prefix: str = "") -> list[dict[str, Any]]:
    """The four tools as OpenAI ``tools`` entries (``openai``: Chat Completions; ``responses``:
    the Responses API's flat form) or Anthropic tool definitions, named with ``prefix``."""
    check_prefix(prefix)
    schema = {"type": "object", "properties": {"id": _ID}, "required": ["id"]}
    named = [(prefix + n, d) for n, d in CONTEXT_TOOLS.items()]
    if fmt == "openai":
        return [
            {"type": "function", "function": {"name": n, "description": d, "parameters": schema}}
            for n, d in named
        ]
    if fmt == "responses":
        return [
            {"type": "function", "name": n, "description": d, "parameters": schema}
            for n, d in named
        ]
    if fmt == "anthropic":
        return [{"name": n, "description": d, "input_schema": schema} for n, d in named]
    raise InvalidInput("format", fmt, "use 'openai', 'anthropic' or 'responses'")


@attrs.frozen
class ToolAnswer:
    """The result text for the model, and whether the call did what it asked."""

    ok: bool
    message: str
    images: tuple[Mapping[str, Any], ...] = ()
    """Under ``inline``, ``activate`` of a tool output shows it in its answer: with its images,
    which the harness gives back with the answer's text (neutral form, see ``image_of``)."""


def handle_context_tool(
    service: ContextService,
    session_id: str,
    name: str,
    arguments: Mapping[str, Any],
    prefix: str = "",
) -> ToolAnswer:
    """Run one context tool, ``name`` as the model called it (``prefix`` and the tool's name);
    every refusal becomes a short answer, never an exception — except store failures, which the
    harness must see.

    Under the ``inline`` policy the prompt is append-only, so ``activate`` answers with the
    object's content (the tool result is where it shows) instead of expanding it in place, and
    ``deactivate`` of a file collapses the tool messages that show it.
    """
    called = name
    bare = context_tool(name, prefix)
    if bare is None:
        known = sorted(prefix + n for n in CONTEXT_TOOLS)
        return ToolAnswer(False, f"unknown tool {called!r}; the context tools are {known}")
    name = bare
    object_id = arguments.get("id") if isinstance(arguments, Mapping) else None
    if not isinstance(object_id, str) or not object_id:
        return ToolAnswer(False, f"{name} needs an 'id' argument: the id shown in an object's line")
    try:
        if service.state(session_id).policy.inline_layout:
            return _inline(service, session_id, name, object_id, prefix)
        result = getattr(service, name)(session_id, object_id)
    except StoreError:
        raise
    except SelfContextError as exc:
        return ToolAnswer(False, f"{name} {object_id}: {exc}")
    return ToolAnswer(result.ok, result.message)


def _inline(
    service: ContextService, session_id: str, name: str, ref: str, prefix: str
) -> ToolAnswer:
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
        images = () if isinstance(obj, FileObject) else toolcall_images(state, obj.id)
        return ToolAnswer(True, f"[{label} {what}]\n{body}", tuple(thaw(i) for i in images))
    if isinstance(obj, FileObject) and name == "deactivate":
        showing = [
            t
            for t in state.ordered(state.active)
            if isinstance(o := service.object(session_id, t), ToolcallObject)
            and (
                obj.id in (o.file_refs or ())
                or (o.tool == prefix + "activate" and _target(service, session_id, o) == obj.id)
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
