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

The commands committed together (a batch, decision 0077) have their entries in one log document
(:func:`log_document`, up to :data:`LOG_ENTRIES` of them, under the first one's id; decision
0134): a document is the node's work, an entry is not. The id of the first entry a transaction
writes is a precondition (it must not exist yet), so two writers of one session cannot both
append entry ``seq``: one gets a conflict and retries on fresh state. A writer appends from the
end of the log it read, which ends with a whole document, so a writer from the same end wants
the same first id. A snapshot is written
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

from selfctx.application.ports.store import ObjectStore
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
    "LOG_ENTRIES",
    "LOG_TYPE",
    "PACK_CALLS",
    "PACK_TYPE",
    "compact_json",
    "decode_events",
    "document_size",
    "encode_events",
    "entry_events",
    "entry_size",
    "json_size",
    "log_document",
    "log_document_ids",
    "log_entries",
    "log_entries_of",
    "log_entry",
    "log_entry_id",
    "log_entry_tx",
    "pack_id",
    "read_log_entries",
    "snapshot_size",
    "toolcall_pack",
    "unpack_toolcalls",
    "with_size",
    "with_snapshot_size",
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


LOG_ENTRIES: Final = 16
"""The most entries one log document holds (decision 0134): the commands of one transaction
(a batch, decision 0077) go in one document, or in as many of these as they need. A reader of
the entries from position ``k`` on reads the documents from ``k - LOG_ENTRIES + 1`` on, the
first of which may hold ``k``; decision 0134 says how it was chosen."""


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


_ENTRY_HEAD: Final = ("xt/id", "type", "session_id")
"""The fields of an entry that a log document of several entries holds once, for all."""


def log_document(entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One stored document for consecutive entries of one session's log, as :func:`log_entry`
    builds them (decision 0134). One entry is its own document, as before. Several are one
    document under the first one's id: its ``seq``, the ``last`` one's, and ``entries``, each
    entry without the fields the document holds for all (as ``{"list": [...]}``, decision
    0017). :func:`log_entries` gives them back exactly."""
    if not entries:
        raise InvalidInput("session-log document", [], "holds no entry")
    first = entries[0]
    if len(entries) == 1:
        return dict(first)
    if len(entries) > LOG_ENTRIES:
        raise InvalidInput("session-log document", len(entries), f"holds at most {LOG_ENTRIES}")
    seqs = [entry["seq"] for entry in entries]
    if seqs != list(range(seqs[0], seqs[0] + len(seqs))) or any(
        entry["session_id"] != first["session_id"] for entry in entries
    ):
        raise InvalidInput("session-log document", seqs, "holds consecutive entries of a session")
    return {
        "xt/id": first["xt/id"],
        "type": LOG_TYPE,
        "session_id": first["session_id"],
        "seq": seqs[0],
        "last": seqs[-1],
        "entries": {"list": [_without_head(entry) for entry in entries]},
    }


def _without_head(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k not in _ENTRY_HEAD}


def log_entries(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The entries a stored log document holds, in order, each as :func:`log_entry` built it
    (same fields, same order: the same bytes as compact JSON): the document itself when it is
    one entry (every document before decision 0134), or those of ``entries``. Raises
    :class:`InvalidInput` for a document of several entries that is not in that shape."""
    held = doc.get("entries")
    if held is None:
        return [dict(doc)]
    items = held.get("list") if isinstance(held, Mapping) else None
    session_id = doc.get("session_id")
    if not isinstance(items, list) or not items or not isinstance(session_id, str):
        raise InvalidInput("session-log document", doc.get("xt/id"), "has no list of entries")
    out = []
    for item in items:
        seq = item.get("seq") if isinstance(item, Mapping) else None
        if not isinstance(seq, int) or isinstance(seq, bool):
            raise InvalidInput("session-log document", doc.get("xt/id"), "has an entry without seq")
        entry = {"xt/id": log_entry_id(session_id, seq), "type": LOG_TYPE, "session_id": session_id}
        entry.update(item)
        out.append(entry)
    return out


def log_entries_of(docs: Iterable[Mapping[str, Any]], session_id: str) -> dict[int, dict[str, Any]]:
    """The entries of ``session_id`` that ``docs`` (stored log documents) hold, by position;
    documents of another session or type are left out."""
    out: dict[int, dict[str, Any]] = {}
    for doc in docs:
        if doc.get("type") != LOG_TYPE or doc.get("session_id") != session_id:
            continue
        for entry in log_entries(doc):
            out[int(entry["seq"])] = entry
    return out


def log_document_ids(session_id: str, first: int, last: int) -> list[str]:
    """The ids of the documents that may hold the entries ``first`` to ``last`` of a session's
    log: a document holds at most :data:`LOG_ENTRIES` entries, under its first one's id."""
    return [log_entry_id(session_id, k) for k in range(max(1, first - LOG_ENTRIES + 1), last + 1)]


def read_log_entries(
    store: ObjectStore, session_id: str, first: int, last: int
) -> dict[int, dict[str, Any]]:
    """The entries ``first`` to ``last`` of a session's log, by position, read by id (those the
    store does not hold are missing): one request, and one more when entry ``first`` is held by
    a document that begins before it."""
    if last < first:
        return {}
    ids = [log_entry_id(session_id, k) for k in range(first, last + 1)]
    found = log_entries_of(store.get_many(ids).values(), session_id)
    if first not in found and first > 1:  # held by a document that begins before it
        earlier = log_document_ids(session_id, first, first - 1)
        found.update(log_entries_of(store.get_many(earlier).values(), session_id))
    return {seq: entry for seq, entry in found.items() if first <= seq <= last}


def log_entry_tx(store: ObjectStore, session_id: str, seq: int) -> int | None:
    """The transaction that wrote entry ``seq`` of a session's log; None when it is not stored.
    An entry that begins its document is one read (every entry before decision 0134 does);
    another, one more: the documents that may hold it."""
    versions = store.history(log_entry_id(session_id, seq))
    if not versions and seq > 1:
        docs = store.get_many(log_document_ids(session_id, seq, seq - 1))
        holder = next(
            (
                object_id
                for object_id, doc in sorted(docs.items(), reverse=True)
                if seq in log_entries_of([doc], session_id)
            ),
            None,
        )
        if holder is None:
            return None
        versions = store.history(holder)
    return versions[0].tx_id if versions else None


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


ENTRY_BYTES: Final = "bytes"
"""The field of a session-log entry that holds its size as the snapshot rule counts it: the
bytes of the entry without this field (decision 0164). A resume adds these up instead of
encoding the tail again; an entry written before it is measured (:func:`entry_size`)."""

SNAPSHOT_BYTES: Final = "snapshot_bytes"
"""The field of a snapshot's session document that holds the snapshot's size as the snapshot
rule counts it: its session document without this field and its chat document (decision 0164).
The session document, not the chat: a snapshot's session document is new every time (its
``seq``), a chat document may be the one the node holds already (decision 0160)."""


def _stored_size(doc: Mapping[str, Any], key: str) -> int | None:
    value = doc.get(key)
    return value if type(value) is int and value >= 0 else None


def with_size(entry: dict[str, Any], entry_json: str) -> tuple[str, int]:
    """Store in ``entry`` (a :func:`log_entry`, its compact JSON ``entry_json``) its size, the
    bytes of ``entry_json``; return the entry's compact JSON with it, and the size. The field
    goes last, so its text is ``entry_json`` with it appended (no second encoding)."""
    size = json_size(entry_json)
    entry[ENTRY_BYTES] = size
    return f'{entry_json[:-1]},"{ENTRY_BYTES}":{size}}}', size


def entry_size(entry: Mapping[str, Any]) -> int:
    """The size of a session-log entry as the snapshot rule counts it: as stored with it
    (:func:`with_size`), or, for an entry written before it was, its bytes as compact JSON."""
    stored = _stored_size(entry, ENTRY_BYTES)
    return document_size(entry) if stored is None else stored


def with_snapshot_size(
    session_doc: dict[str, Any], chat_doc: Mapping[str, Any], *, session_bytes: int | None = None
) -> int:
    """Store in ``session_doc`` the size of the snapshot of ``session_doc`` and ``chat_doc``
    (the bytes of both as compact JSON; ``session_bytes``: the session document's, if measured
    already) and return it."""
    if session_bytes is None:
        session_bytes = document_size(session_doc)
    size = session_bytes + document_size(chat_doc)
    session_doc[SNAPSHOT_BYTES] = size
    return size


def snapshot_size(session_doc: Mapping[str, Any], chat_doc: Mapping[str, Any]) -> int:
    """The size of a stored snapshot as the snapshot rule counts it: as stored with its chat
    (:func:`with_snapshot_size`), or, for a snapshot written before it was, the bytes of both
    documents as compact JSON."""
    stored = _stored_size(session_doc, SNAPSHOT_BYTES)
    if stored is None:
        return document_size(session_doc) + document_size(chat_doc)
    return stored
