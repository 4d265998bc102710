"""How a session is stored: one session-log entry per command, snapshots now and then.

Each command that changes anything is committed as ONE transaction holding:

* the object versions its events wrote (file, toolcall, system prompt documents);
* its session-log entry ``log:{session_id}:{seq}`` (type ``session_log``): the events, with
  object versions reduced to ``object_id`` and ``object_hash``, as ``{"list": [...]}`` so that a
  store which indexes every element of a top-level list (XTDB) indexes them as one value
  (decision 0017; :func:`entry_events` also reads the bare list earlier versions wrote);
* sometimes a snapshot: new versions of the ``session`` and ``chat`` documents, reflecting
  the state right after this entry;
* sometimes a pack of tool calls' metadata ``calls:{session_id}:{n}`` (type ``toolcall_pack``):
  when the session's tool calls reach a multiple of :data:`PACK_CALLS`, the metadata of the
  last ones, which a resume then reads as one document instead of one each (decision 0123).

The entry's id is a precondition (it must not exist yet), so two writers of one session cannot
both append entry ``seq``: one gets a conflict and retries on fresh state. A snapshot is written
at session start and whenever the log has grown, since the last snapshot, by at least as many bytes
as that snapshot had. Snapshot bytes per turn therefore never exceed log bytes per turn, whatever
the session's size, while rebuilding any past state reads one snapshot and at most a snapshot's
worth of log. docs/decisions/0001-event-sourced-sessions.md records the design.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

from selfctx.domain.chat import (
    AssistantMessage,
    Turn,
    json_from_stored,
    message_from_json,
    message_to_json,
    stored_json,
    turn_from_json,
    turn_to_json,
)
from selfctx.domain.errors import InvalidInput
from selfctx.domain.indexing import Outcome
from selfctx.domain.session import events as e
from selfctx.domain.session.state import CollapseWindow, PolicyConfig

__all__ = [
    "LOG_TYPE",
    "PACK_CALLS",
    "PACK_TYPE",
    "compact_json",
    "decode_events",
    "document_size",
    "encode_events",
    "entry_events",
    "json_size",
    "log_entry",
    "log_entry_id",
    "pack_id",
    "toolcall_pack",
    "unpack_toolcalls",
]

LOG_TYPE: Final = "session_log"
PACK_TYPE: Final = "toolcall_pack"
PACK_CALLS: Final = 256
"""Tool calls whose metadata one pack holds: the pack of block ``n`` holds the session's tool
calls ``n * PACK_CALLS`` to ``(n + 1) * PACK_CALLS - 1`` in the order the index has them
(decision 0123 says how it was chosen)."""

_EVENT_TYPES: Final[Mapping[str, type[Any]]] = {
    # Every member of the Event union, so a new event type can never be written but not read.
    cls.__name__: cls
    for cls in typing.get_args(e.Event)
}


def log_entry_id(session_id: str, seq: int) -> str:
    """Id of entry ``seq`` of a session's log (zero-padded so ids sort by seq)."""
    return f"log:{session_id}:{seq:09d}"


def _value_to_json(value: Any) -> Any:
    if isinstance(value, Outcome):
        return value.value
    if isinstance(value, CollapseWindow):
        return {"per_turn": value.per_turn, "turns": value.turns}
    if isinstance(value, PolicyConfig):
        return policy_to_json(value)
    if isinstance(value, AssistantMessage):
        return message_to_json(value)
    if isinstance(value, tuple) and all(isinstance(v, Turn) for v in value):
        return [turn_to_json(v) for v in value]
    if isinstance(value, tuple) and all(isinstance(v, Mapping) for v in value):
        return [stored_json(v) for v in value]  # images (decision 0132: a large one as text)
    if isinstance(value, tuple):
        return list(value)
    return value


def encode_events(events: Iterable[e.Event]) -> list[dict[str, Any]]:
    """Events as JSON objects, without object contents (``version`` is dropped)."""
    out = []
    for event in events:
        data: dict[str, Any] = {"event": type(event).__name__}
        for field in attrs.fields(type(event)):
            value = getattr(event, field.name)
            if field.name == "version" or (value is None and field.default is None):
                continue  # an optional field left unset: decoding gives its default back
            if field.name == "images" and not value:
                continue  # no images: the entry reads as entries written before they were kept
            data[field.name] = _value_to_json(value)
        out.append(data)
    return out


def _value_from_json(name: str, value: Any) -> Any:
    if name == "outcome":
        return Outcome(value)
    if name == "window":
        return CollapseWindow(per_turn=value["per_turn"], turns=value["turns"])
    if name == "message":
        return message_from_json(value)
    if name == "policy":
        return policy_from_json(value)
    if name == "turns":
        return tuple(turn_from_json(t) for t in value)
    if name == "images":
        return tuple(json_from_stored(v) for v in value)
    if isinstance(value, list):
        return tuple(value)
    return value


_DECODED: Final = frozenset({"outcome", "window", "message", "policy", "turns", "images"})
"""The fields :func:`_value_from_json` decodes by name; any other is a list (a tuple) or as is."""

_FIELDS: dict[type, tuple[tuple[str, bool], ...]] = {}
"""Each event type's fields but ``version``, with whether the field is one of ``_DECODED``."""


def _fields_of(cls: type) -> tuple[tuple[str, bool], ...]:
    found = _FIELDS.get(cls)
    if found is None:
        names = [f.name for f in attrs.fields(cls) if f.name != "version"]
        found = _FIELDS[cls] = tuple((name, name in _DECODED) for name in names)
    return found


def decode_events(data: Sequence[Mapping[str, Any]]) -> list[e.Event]:
    """Inverse of :func:`encode_events` (``version`` is None on every decoded event)."""
    out = []
    for item in data:
        cls = _EVENT_TYPES[item["event"]]
        kwargs = {}
        for name, decoded in _fields_of(cls):
            if name not in item:
                continue  # later fields have defaults
            value = item[name]
            if decoded:
                value = _value_from_json(name, value)
            elif isinstance(value, list):
                value = tuple(value)
            kwargs[name] = value
        out.append(cls(**kwargs))
    return out


def policy_to_json(policy: PolicyConfig) -> dict[str, Any]:
    return {f.name: getattr(policy, f.name) for f in attrs.fields(PolicyConfig)}


def policy_from_json(data: Mapping[str, Any]) -> PolicyConfig:
    return PolicyConfig(**{k: v for k, v in data.items() if k in attrs.fields_dict(PolicyConfig)})


def pack_id(session_id: str, block: int) -> str:
    """Id of the pack of block ``block`` of a session's tool calls (decision 0123)."""
    return f"calls:{session_id}:{block:09d}"


def toolcall_pack(session_id: str, block: int, first: int, calls: Sequence[str]) -> dict[str, Any]:
    """The pack of block ``block``: ``calls`` are the metadata documents (every field of a
    tool call's document but its content, as :func:`compact_json` text) of the session's tool
    calls from position ``first`` (in the index's order) to the block's end. They are kept as
    one string: the node stores and sends one value, not a structure it converts and indexes."""
    return {
        "xt/id": pack_id(session_id, block),
        "type": PACK_TYPE,
        "session_id": session_id,
        "first": first,
        "calls": "[" + ",".join(calls) + "]",
    }


def unpack_toolcalls(doc: Mapping[str, Any] | None, session_id: str) -> dict[str, dict[str, Any]]:
    """The tool calls' metadata documents a pack holds, by id; none for anything that is not
    a pack of this session as :func:`toolcall_pack` writes it (a reader then reads the calls
    one by one, as before packs)."""
    if doc is None or doc.get("type") != PACK_TYPE or doc.get("session_id") != session_id:
        return {}
    text = doc.get("calls")
    if not isinstance(text, str):
        return {}
    try:
        calls = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(calls, list):
        return {}
    return {
        call["xt/id"]: call
        for call in calls
        if isinstance(call, dict) and isinstance(call.get("xt/id"), str)
    }


def log_entry(
    session_id: str,
    seq: int,
    *,
    command: str,
    command_id: str,
    at: str,
    events: Iterable[e.Event],
) -> dict[str, Any]:
    """The session-log document of one command."""
    return {
        "xt/id": log_entry_id(session_id, seq),
        "type": LOG_TYPE,
        "session_id": session_id,
        "seq": seq,
        "command": command,
        "command_id": command_id,
        "at": at,
        "events": {"list": encode_events(events)},
    }


def entry_events(entry: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The encoded events of a session-log entry, as :func:`log_entry` wrote them (``{"list":
    [...]}``) or as versions before decision 0017 did (the bare list). Raises
    :class:`InvalidInput` for anything else."""
    events = entry.get("events")
    if isinstance(events, Mapping):
        events = events.get("list")
    if not isinstance(events, list):
        raise InvalidInput("session-log entry", entry.get("xt/id"), "has no list of events")
    return events


def compact_json(doc: Mapping[str, Any]) -> str:
    """A document as compact JSON text, non-ASCII characters as they are."""
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))


def json_size(text: str) -> int:
    """Bytes of :func:`compact_json` text as UTF-8: the measure of the snapshot rule."""
    return len(text.encode("utf-8", "surrogatepass"))


def document_size(doc: Mapping[str, Any]) -> int:
    """Bytes of a document as compact UTF-8 JSON (:func:`json_size`)."""
    return json_size(compact_json(doc))
