"""The model's context tools: ready schemas for both formats, and the handler that runs them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from application.service import ContextService
from domain.errors import InvalidInput, SelfContextError

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
    store failures, which the harness must see."""
    from application.ports.store import StoreError

    if name not in CONTEXT_TOOLS:
        return ToolAnswer(
            False, f"unknown tool {name!r}; the context tools are {sorted(CONTEXT_TOOLS)}"
        )
    object_id = arguments.get("id") if isinstance(arguments, Mapping) else None
    if not isinstance(object_id, str) or not object_id:
        return ToolAnswer(False, f"{name} needs an 'id' argument: the id shown in an object's line")
    try:
        result = getattr(service, name)(session_id, object_id)
    except StoreError:
        raise
    except SelfContextError as exc:
        return ToolAnswer(False, f"{name} {object_id}: {exc}")
    return ToolAnswer(result.ok, result.message)
