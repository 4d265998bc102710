"""Objects to flat stored documents and back (docs/specification.md §1: all fields are top-level
keys).

Optional payload fields that are absent (``args_display``, ``file_refs``, ``file_views``,
``content_status``, ``reported_by``) are left out of the document, exactly as they are left out
of ``metadata_hash``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeAlias, TypeVar

import attrs

from selfctx.domain.chat import json_from_stored, stored_json
from selfctx.domain.errors import InvalidInput
from selfctx.domain.infrastructure import ChatObject, SessionObject
from selfctx.domain.objects import (
    FileObject,
    FileView,
    SummaryObject,
    SystemPromptObject,
    ToolcallObject,
    source_from_json,
)
from selfctx.domain.session.state import CollapseWindow, PolicyConfig

__all__ = [
    "StoredObject",
    "file_without_content",
    "from_document",
    "to_document",
    "toolcall_without_content",
]

StoredObject: TypeAlias = (
    FileObject | ToolcallObject | SystemPromptObject | ChatObject | SessionObject | SummaryObject
)


def _envelope(obj: StoredObject, source: Mapping[str, Any] | None) -> dict[str, Any]:
    return {"xt/id": obj.id, "type": obj.type, "source": source, "identity_hash": obj.identity_hash}


def _hashes(obj: StoredObject) -> dict[str, Any]:
    return {
        "content_hash": obj.content_hash,
        "metadata_hash": obj.metadata_hash,
        "object_hash": obj.object_hash,
    }


def to_document(obj: StoredObject) -> dict[str, Any]:
    """The flat document stored for one version of ``obj``."""
    if isinstance(obj, FileObject):
        doc = _envelope(obj, obj.source.to_json())
        doc.update(
            content=obj.content,
            file_type=obj.file_type,
            char_count=obj.char_count,
            file_hash=obj.file_hash,
        )
        if obj.content_status is not None:
            doc["content_status"] = obj.content_status
        if obj.reported_by is not None:
            doc["reported_by"] = obj.reported_by
    elif isinstance(obj, ToolcallObject):
        doc = _envelope(obj, None)
        doc.update(
            content=obj.content,
            tool=obj.tool,
            args=stored_json(obj.args),
            status=obj.status,
            chat_ref=obj.chat_ref,
        )
        if obj.args_display is not None:
            doc["args_display"] = obj.args_display
        if obj.file_refs is not None:
            doc["file_refs"] = list(obj.file_refs)
        if obj.file_views is not None:
            doc["file_views"] = [v.to_json() for v in obj.file_views]
        # Derived from the content, neither hashed nor compared: what a client that reads a tool
        # call without its content needs to know of it (decision 0065).
        doc["content_length"] = obj.content_length
    elif isinstance(obj, SystemPromptObject):
        doc = _envelope(obj, None)
        doc["content"] = obj.content
    elif isinstance(obj, SummaryObject):
        doc = _envelope(obj, None)
        doc.update(content=obj.content, case=obj.case, upto=obj.upto, session_ref=obj.session_ref)
    elif isinstance(obj, ChatObject):
        doc = _envelope(obj, None)
        doc.update(
            content=None,
            turns=list(obj.turns),
            session_ref=obj.session_ref,
            turn_count=obj.turn_count,
            toolcall_refs=list(obj.toolcall_refs),
        )
    else:
        doc = _envelope(obj, None)
        doc.update(
            content=None,
            session_id=obj.session_id,
            chat_ref=obj.chat_ref,
            system_prompt_ref=obj.system_prompt_ref,
            session_index=list(obj.session_index),
            metadata_pool=list(obj.metadata_pool),
            active_set=list(obj.active_set),
            pinned_set=list(obj.pinned_set),
            seq=obj.seq,
            auto_active=list(obj.auto_active),
            window={"per_turn": obj.window.per_turn, "turns": obj.window.turns},
            policy={f.name: getattr(obj.policy, f.name) for f in attrs.fields(PolicyConfig)},
            last_used=[[i, n] for i, n in obj.last_used],
            use_clock=obj.use_clock,
        )
        if obj.superseded:  # left out when empty: documents written before it read the same
            doc["superseded"] = [[i, by] for i, by in obj.superseded]
        if obj.excerpts:
            doc["excerpts"] = [[i, text] for i, text in obj.excerpts]
        # Only when there are any: sessions that never checkpointed keep their shape.
        if obj.checkpoints:
            doc["checkpoints"] = list(obj.checkpoints)
        if obj.detached:
            doc["detached"] = list(obj.detached)
        if obj.compacted:
            doc["compacted"] = obj.compacted
            doc["summary"] = obj.summary
    doc.update(_hashes(obj))
    return doc


def from_document(doc: Mapping[str, Any]) -> StoredObject:
    """The object version a stored document holds. Raises :class:`InvalidInput` for a document
    of an unknown type or with missing fields (a document some other program wrote)."""
    try:
        return _from_document(doc)
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, InvalidInput):
            raise
        raise InvalidInput("document", doc.get("xt/id"), f"not a valid object: {exc!r}") from exc


def toolcall_without_content(doc: Mapping[str, Any]) -> ToolcallObject:
    """The tool call a document read without its content holds (``content_length`` and every
    other field but the content: what :func:`from_document` gives with ``content`` None, and
    ``content_length`` as stored when the call has an output). Raises :class:`InvalidInput`
    as :func:`from_document` does, and for a document of another type."""

    def build() -> ToolcallObject:
        common = _identity(doc)
        if doc["content_hash"] is not None:
            common["content_length"] = int(doc["content_length"])
        return _toolcall(doc, None, common)

    return _without_content(doc, "toolcall", "a tool call", build)


def file_without_content(doc: Mapping[str, Any]) -> FileObject:
    """The file a document read without its content holds: what :func:`from_document` gives
    with ``content`` None (its hashes, source and ``char_count`` as stored). Raises
    :class:`InvalidInput` as :func:`from_document` does, and for a document of another type."""
    return _without_content(doc, "file", "a file", lambda: _file(doc, None))


_T = TypeVar("_T")


def _without_content(doc: Mapping[str, Any], kind: str, name: str, build: Callable[[], _T]) -> _T:
    """``build()`` for a document of type ``kind`` read without its content; a document of
    another type or a malformed one is :class:`InvalidInput`."""
    try:
        if doc["type"] != kind:
            raise InvalidInput("document", doc.get("xt/id"), f"is not {name}")
        return build()
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, InvalidInput):
            raise
        raise InvalidInput("document", doc.get("xt/id"), f"not a valid object: {exc!r}") from exc


def _file(doc: Mapping[str, Any], content: str | None) -> FileObject:
    return FileObject(
        source=source_from_json(doc["source"]),
        content=content,
        file_type=doc["file_type"],
        char_count=doc["char_count"],
        file_hash=doc["file_hash"],
        content_status=doc.get("content_status"),
        reported_by=doc.get("reported_by"),
        **_identity(doc),
    )


def _identity(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The fields every object's document has: its id and its four hashes."""
    return {
        "id": doc["xt/id"],
        "identity_hash": doc["identity_hash"],
        "content_hash": doc["content_hash"],
        "metadata_hash": doc["metadata_hash"],
        "object_hash": doc["object_hash"],
    }


def _toolcall(doc: Mapping[str, Any], content: str | None, common: Any) -> ToolcallObject:
    refs = doc.get("file_refs")
    views = doc.get("file_views")
    return ToolcallObject(
        content=content,
        tool=doc["tool"],
        args=json_from_stored(doc["args"]),
        status=doc["status"],
        chat_ref=doc["chat_ref"],
        args_display=doc.get("args_display"),
        file_refs=tuple(refs) if refs is not None else None,
        file_views=tuple(FileView.from_json(v) for v in views) if views is not None else None,
        **common,
    )


def _from_document(doc: Mapping[str, Any]) -> StoredObject:
    kind = doc["type"]
    common = _identity(doc)
    if kind == "file":
        return _file(doc, doc["content"])
    if kind == "toolcall":
        return _toolcall(doc, doc["content"], common)
    if kind == "system_prompt":
        return SystemPromptObject(content=doc["content"], **common)
    if kind == "summary":
        return SummaryObject(
            content=doc["content"],
            case=doc["case"],
            upto=int(doc["upto"]),
            session_ref=doc["session_ref"],
            **common,
        )
    if kind == "chat":
        return ChatObject(
            session_ref=doc["session_ref"],
            turns=tuple(doc["turns"]),
            turn_count=doc["turn_count"],
            toolcall_refs=tuple(doc["toolcall_refs"]),
            **common,
        )
    if kind == "session":
        window = doc["window"]
        return SessionObject(
            session_id=doc["session_id"],
            chat_ref=doc["chat_ref"],
            system_prompt_ref=doc["system_prompt_ref"],
            session_index=tuple(doc["session_index"]),
            metadata_pool=tuple(doc["metadata_pool"]),
            active_set=tuple(doc["active_set"]),
            pinned_set=tuple(doc["pinned_set"]),
            seq=doc["seq"],
            auto_active=tuple(doc["auto_active"]),
            window=CollapseWindow(per_turn=window["per_turn"], turns=window["turns"]),
            policy=PolicyConfig(**doc.get("policy", {})),
            last_used=tuple((str(i), int(n)) for i, n in doc.get("last_used", [])),
            use_clock=int(doc.get("use_clock", 0)),
            superseded=tuple((str(i), str(by)) for i, by in doc.get("superseded", [])),
            excerpts=tuple((str(i), str(text)) for i, text in doc.get("excerpts", [])),
            checkpoints=tuple(str(label) for label in doc.get("checkpoints", [])),
            detached=tuple(str(i) for i in doc.get("detached", [])),
            compacted=int(doc.get("compacted", 0)),
            summary=str(doc.get("summary", "")),
            **common,
        )
    raise InvalidInput("document type", kind, "not an object type this project stores")
