"""The model's context tools: ready schemas for both formats, and the handler that runs them.

Four manage the context by id (``activate``, ``deactivate``, ``pin``, ``unpin``); ``search``
finds what the session has seen, ranked, and names each hit so that ``activate`` brings it back.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any, Final

import attrs

from selfctx.application.ports.search import KINDS, ROLES, SearchHit
from selfctx.application.ports.store import StoreError
from selfctx.application.service import ContextService
from selfctx.domain.chat import thaw_json
from selfctx.domain.compaction import SUMMARY_ID
from selfctx.domain.errors import InvalidInput, SelfContextError
from selfctx.domain.inline import handle
from selfctx.domain.objects import FileObject, ToolcallObject
from selfctx.domain.rendering import REPORTED_NOTE, toolcall_images

__all__ = [
    "CONTEXT_COMMAND",
    "CONTEXT_TOOLS",
    "SEARCH_LIMIT",
    "SHELL_TOOLS",
    "ToolAnswer",
    "called_context_tool",
    "check_prefix",
    "context_command",
    "context_tool",
    "handle_context_tool",
    "hit_to_json",
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
    "search": "Search everything this session has seen (messages, tool outputs, every version "
    "of the files it knows), best match first. Every word must occur (case-insensitive, any part "
    "of a word); quote a phrase to keep it whole. Each hit names the id that activate brings "
    "back.",
}
_ID = {"type": "string", "description": "The object's id, as shown after id= in its line."}
_SEARCH_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": 'Words or "a phrase" to look for.'},
        "role": {"type": "string", "enum": list(ROLES), "description": "Only this role."},
        "type": {"type": "string", "enum": list(KINDS), "description": "Only this kind."},
        "limit": {"type": "integer", "minimum": 1, "maximum": 50, "description": "At most (10)."},
    },
    "required": ["query"],
}
MAX_TURNS_CHARS: Final = 24_000
"""The most of the compacted turns ``activate("summary")`` shows at once."""
_TURNS = re.compile(r"turns?:([0-9]{1,9})(?:-([0-9]{1,9}))?")
SEARCH_LIMIT: Final = 10
"""Hits the model's search returns unless it asks for another number (at most 50)."""


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


CONTEXT_COMMAND = re.compile(r"\s*(activate|deactivate|pin|unpin)(?=\s|$|['\"])")
"""A command that is a context tool: it starts with one of their names. Such a command never
reaches the environment (not even a virtualenv's ``activate``): :func:`context_command` reads
its one argument, the id, in any form the model is shown (``#12`` handles included, quoted or
not: an unquoted ``#`` would start a shell comment)."""


def context_command(command: object) -> tuple[str, str | None] | None:
    """``(tool, id)`` when ``command`` is a context tool (``id`` None when it is not given as
    exactly one argument), or None for any other command."""
    if not isinstance(command, str):
        return None
    match = CONTEXT_COMMAND.match(command)
    if match is None:
        return None
    try:
        words = shlex.split(command, comments=False)
    except ValueError:  # an unbalanced quote
        return match[1], None
    if len(words) != 2 or words[0] != match[1]:
        return match[1], None
    return match[1], words[1]


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


SHELL_TOOLS = frozenset({"bash", "execute_bash", "shell"})
"""Tools whose ``command`` may be a context command (mini-swe-agent runs them in its shell)."""


def called_context_tool(
    name: str, arguments: Mapping[str, Any], prefix: str = ""
) -> tuple[str, Any] | None:
    """The context tool a call ran and the id it named: a context tool called by its name under
    ``prefix``, or a context command given to a shell tool (``activate #12``); None for any other
    call."""
    bare = context_tool(name, prefix)
    if bare is not None:
        return bare, arguments.get("id") if isinstance(arguments, Mapping) else None
    if name in SHELL_TOOLS and isinstance(arguments, Mapping):
        return context_command(arguments.get("command"))
    return None


def tool_schemas(fmt: str, prefix: str = "") -> list[dict[str, Any]]:
    """The context tools as OpenAI ``tools`` entries (``openai``: Chat Completions;
    ``responses``: the Responses API's flat form) or Anthropic tool definitions, named with
    ``prefix``."""
    check_prefix(prefix)
    by_id = {"type": "object", "properties": {"id": _ID}, "required": ["id"]}
    named = [
        (prefix + n, d, _SEARCH_SCHEMA if n == "search" else by_id)
        for n, d in CONTEXT_TOOLS.items()
    ]
    if fmt == "openai":
        return [
            {"type": "function", "function": {"name": n, "description": d, "parameters": p}}
            for n, d, p in named
        ]
    if fmt == "responses":
        return [
            {"type": "function", "name": n, "description": d, "parameters": p} for n, d, p in named
        ]
    if fmt == "anthropic":
        return [{"name": n, "description": d, "input_schema": p} for n, d, p in named]
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
    if name == "search":
        return _search(service, session_id, arguments, prefix)
    object_id = arguments.get("id") if isinstance(arguments, Mapping) else None
    if not isinstance(object_id, str) or not object_id:
        return ToolAnswer(False, f"{name} needs an 'id' argument: the id shown in an object's line")
    if name == "activate" and (object_id == SUMMARY_ID or _TURNS.fullmatch(object_id)):
        return _turns(service, session_id, object_id)
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
        return ToolAnswer(True, f"[{label} {what}]\n{body}", tuple(thaw_json(i) for i in images))
    if name == "deactivate":
        # What shows it goes too: the answers of the activations that showed it, and for a
        # file, the outputs that read or viewed it.
        showing = [
            t
            for t in state.ordered(state.active)
            if t != obj.id
            and isinstance(o := service.object(session_id, t), ToolcallObject)
            and (
                (isinstance(obj, FileObject) and obj.id in (o.file_refs or ()))
                or _activated(service, session_id, o, prefix) == obj.id
            )
        ]
        for t in showing:
            service.deactivate(session_id, t)
        if isinstance(obj, FileObject):
            service.deactivate(session_id, obj.id)
            return ToolAnswer(True, f"{label} is collapsed wherever it was shown")
    result = getattr(service, name)(session_id, obj.id)
    return ToolAnswer(result.ok, result.message.replace(obj.id, label))


def _activated(
    service: ContextService, session_id: str, call: ToolcallObject, prefix: str
) -> str | None:
    """The object an ``activate`` call showed (as a tool or a shell command), or None."""
    called = called_context_tool(call.tool, call.args, prefix)
    if called is None or called[0] != "activate":
        return None
    ref = called[1]
    if not isinstance(ref, str):
        return None
    try:
        return service.object(session_id, ref).id
    except SelfContextError:
        return None


def _search(
    service: ContextService, session_id: str, arguments: Mapping[str, Any], prefix: str = ""
) -> ToolAnswer:
    args = arguments if isinstance(arguments, Mapping) else {}
    query = args.get("query")
    if not isinstance(query, str) or not query.strip():
        return ToolAnswer(False, "search needs a 'query': the words to look for")
    limit = args.get("limit", SEARCH_LIMIT)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 50:
        return ToolAnswer(False, "search: 'limit' must be a whole number from 1 to 50")
    try:
        hits = service.search(
            query,
            session_id=session_id,
            role=args.get("role"),
            kind=args.get("type"),
            limit=limit,
        )
    except StoreError:
        raise
    except SelfContextError as exc:
        return ToolAnswer(False, f"search: {exc}")
    if not hits:
        return ToolAnswer(True, f"nothing this session has seen matches {query!r}")
    lines = [f"{len(hits)} result(s) for {query!r}, best first:"]
    lines += [_hit_line(service, session_id, hit) for hit in hits]
    act = prefix + "activate"
    lines.append(f'{act}(id) brings back a tool output or a file, {act}("turn:N") a turn.')
    return ToolAnswer(True, "\n".join(lines))


def _hit_line(service: ContextService, session_id: str, hit: SearchHit) -> str:
    """One hit for the model: the name ``activate`` takes, what it is, where, a snippet."""
    if hit.kind == "message":
        return f"- turn {hit.turn} {hit.role}: {hit.snippet}"
    state = service.state(session_id)
    name = f"id={hit.object_id}"
    if state.policy.name == "inline" and state.in_index(hit.object_id):
        name = handle(state, hit.object_id)
    if hit.kind == "toolcall":
        return f"- {name} output of {hit.title} (turn {hit.turn}): {hit.snippet}"
    path = hit.title
    try:
        obj = service.object(session_id, hit.object_id)
    except SelfContextError:
        obj = None
    if isinstance(obj, FileObject):
        path = service.mounts.display_path(obj.source)
    version = "" if hit.latest else f" (an earlier version, {hit.version}; it has changed since)"
    if hit.reported_elsewhere(session_id):  # decision 0031, as on activation
        version += f" {REPORTED_NOTE}"
    return f"- {name} file {path}{version}: {hit.snippet}"


def hit_to_json(hit: SearchHit) -> dict[str, Any]:
    """A search hit as JSON (the RPC method's and ``selfctx search --json``'s shape)."""
    return {
        "type": hit.kind,
        "object_id": hit.object_id,
        "session_id": hit.session_id,
        "role": hit.role,
        "title": hit.title,
        "snippet": hit.snippet,
        "score": hit.score,
        "tx_id": hit.tx_id,
        "version": hit.version,
        "latest": hit.latest,
        "seq": hit.seq,
        "turn": hit.turn,
        "reported_by": hit.reported_by,
    }


def _turns(service: ContextService, session_id: str, ref: str) -> ToolAnswer:
    """``activate("summary")``: the compacted turns, verbatim; ``activate("turn:N")`` or
    ``"turn:N-M"``: any turns, compacted or not."""
    state = service.state(session_id)
    if ref == SUMMARY_ID:
        if not state.compacted:
            return ToolAnswer(False, "nothing is compacted in this session yet")
        first, last = 0, state.compacted - 1
    else:
        found = _TURNS.fullmatch(ref)
        assert found is not None
        first = int(found.group(1))
        last = int(found.group(2)) if found.group(2) else first
    try:
        text = service.turns_text(session_id, first, last)
    except SelfContextError as exc:
        return ToolAnswer(False, f"activate {ref}: {exc}")
    if len(text) > MAX_TURNS_CHARS:
        text = text[:MAX_TURNS_CHARS] + (
            f"\n… (cut at {MAX_TURNS_CHARS} characters; activate 'turn:N' shows one turn)"
        )
    return ToolAnswer(True, f"[turns {first} to {last}, verbatim]\n{text}")
