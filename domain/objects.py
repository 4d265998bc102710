"""Objects (docs/specification.md §1): an immutable envelope, a mutable payload, and the five
hashes.

Content objects (``file``, ``toolcall``) take part in context management; infrastructure objects
(``chat``, ``system_prompt``, ``session``) are scaffolding rendered in fixed places. Each class here
is one *version* of an object: a new version is a new instance, built by the factory functions,
which are the only place hashes are computed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Final, Literal, TypeAlias

import attrs
from pyrsistent import PMap

from selfctx.domain import hashing
from selfctx.domain.chat import FlatMap, freeze_json, thaw_json
from selfctx.domain.errors import InvalidInput, InvalidPath
from selfctx.domain.identifiers import interned, interned_or_none

__all__ = [
    "CONTENT_TYPES",
    "INFRASTRUCTURE_TYPES",
    "ContentObject",
    "ContentStatus",
    "FileObject",
    "FileView",
    "FilesystemSource",
    "Source",
    "SummaryObject",
    "SystemPromptObject",
    "ToolcallObject",
    "file_type_of",
    "source_from_json",
]

CONTENT_TYPES: Final = frozenset({"file", "toolcall"})
INFRASTRUCTURE_TYPES: Final = frozenset({"chat", "system_prompt", "session", "summary"})

ContentStatus: TypeAlias = Literal["deleted", "binary", "too_large"]
"""Why a file version holds no content although its source was seen (decision 0003 explains
this addition to the design: without it a deleted file would render like an unread stub)."""

ToolStatus: TypeAlias = Literal["ok", "fail"]

ViewKind: TypeAlias = Literal["read", "lines", "change"]
"""What a tool call did with a file: showed all of it, showed some of its lines, or changed it."""
MAX_RANGES: Final = 64
"""Line ranges kept per view (a ``grep -n`` with many hits keeps its first ones)."""


def _ranges(value: Any) -> tuple[tuple[int, int], ...]:
    out = []
    for item in value:
        start, end = item
        for n in (start, end):
            if not isinstance(n, int) or isinstance(n, bool) or n == 0:
                raise InvalidInput("view range", item, "line numbers are non-zero integers")
        if (start > 0) == (end > 0) and end < start:
            raise InvalidInput("view range", item, "a range ends at or after its start")
        out.append((start, end))
    return tuple(out[:MAX_RANGES])


@attrs.frozen
class FileView:
    """What one tool call showed of one file, or that it changed the file (decision
    0020). The file object's content stays the whole file: a view names lines of the version the
    agent saw, not a version of its own."""

    file: str
    """Id of the file object."""
    kind: ViewKind
    """``read``: the output is the whole file; ``lines``: the output shows ``ranges`` of it;
    ``change``: the call wrote or edited it."""
    ranges: tuple[tuple[int, int], ...] = attrs.field(default=(), converter=_ranges)
    """For ``lines``: 1-based inclusive ranges; a negative number counts from the end (-1 is the
    last line, so ``tail -n 5`` is ``(-5, -1)`` and ``sed -n '40,$p'`` is ``(40, -1)``). Empty:
    some lines, which ones unknown (a ``grep`` without ``-n``)."""

    def __attrs_post_init__(self) -> None:
        if self.kind not in ("read", "lines", "change"):
            raise InvalidInput("view kind", self.kind, "must be 'read', 'lines' or 'change'")
        if self.kind != "lines" and self.ranges:
            raise InvalidInput("view", self.kind, "line ranges belong to a 'lines' view only")

    def to_json(self) -> dict[str, Any]:
        """The view as stored and hashed."""
        out: dict[str, Any] = {"file": self.file, "kind": self.kind}
        if self.ranges:
            out["ranges"] = [list(r) for r in self.ranges]
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FileView:
        return cls(str(data["file"]), data["kind"], tuple(data.get("ranges") or ()))


@attrs.frozen
class FilesystemSource:
    """Source binding of a file on a filesystem (docs/specification.md §1): immutable, part of
    identity."""

    type: ClassVar[str] = "filesystem"
    filesystem_id: str = attrs.field(converter=interned)
    """Namespace of the filesystem (§5.4): the host's id, or a container's declared id."""
    path: str
    """Canonical absolute path on that filesystem (for a bind mount, the host-side path)."""

    def __attrs_post_init__(self) -> None:
        if not self.filesystem_id:
            raise InvalidInput("filesystem id", self.filesystem_id, "must not be empty")
        if not self.path.startswith("/"):
            raise InvalidPath(self.path, "a source path must be absolute")

    def to_json(self) -> dict[str, str]:
        """The binding as stored and hashed: ``{"type", "filesystemId", "path"}``."""
        return {"type": self.type, "filesystemId": self.filesystem_id, "path": self.path}


Source: TypeAlias = FilesystemSource
"""Union of the source binding types; new types (s3, git) join it with their own ``type`` tag."""

_SOURCE_TYPES: Final[Mapping[str, type[FilesystemSource]]] = {"filesystem": FilesystemSource}


def source_from_json(data: Mapping[str, Any]) -> Source:
    """Parse a stored source binding, refusing unknown tags rather than guessing."""
    tag = data.get("type")
    if tag not in _SOURCE_TYPES:
        raise InvalidInput("source type", tag, f"known types are {sorted(_SOURCE_TYPES)}")
    return FilesystemSource(filesystem_id=str(data["filesystemId"]), path=str(data["path"]))


def file_type_of(path: str) -> str:
    """The extension without its dot, as JavaScript's ``path.extname`` finds it ('' if none)."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    dot = name.rfind(".")
    if dot <= 0 or dot == len(name) - 1:
        return ""
    return name[dot + 1 :]


def _absent_if_none(value: object) -> object:
    return hashing.ABSENT if value is None else value


def held_digest(value: str | None) -> bytes | str | None:
    """A hash as an object holds it for the session: a SHA-256 given as lowercase hex (every
    hash :mod:`selfctx.domain.hashing` makes, and a document's) as its 32 bytes, 65 bytes
    where the hex string is 113 (decision 0163); any other text as it is, so that
    :func:`digest_hex` gives back exactly what was given."""
    if value is None or len(value) != 64:
        return value
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        return value
    return raw if raw.hex() == value else value


def digest_hex(held: bytes | str) -> str:
    """The hex of a hash :func:`held_digest` holds (the form documents, JSON and logs show)."""
    return held.hex() if isinstance(held, bytes) else held


@attrs.frozen
class FileObject:
    """One version of a ``file`` object: a sourced content object (§2.6)."""

    type: ClassVar[str] = "file"
    id: str = attrs.field(converter=interned)
    """``xt/id``: equal to the identity hash of the source binding."""
    source: FilesystemSource
    identity_hash: str
    content: str | None
    """The file's text; None for a discovery stub, a deleted file, or binary/oversized content."""
    file_type: str = attrs.field(converter=interned)
    char_count: int
    file_hash: str | None
    """SHA-256 of the bytes on disk; None for a stub (never read) and for a deletion."""
    content_hash: str | None
    metadata_hash: str
    object_hash: str
    content_status: ContentStatus | None = attrs.field(default=None, converter=interned_or_none)
    """Why content is null although the file was seen; None for ordinary versions and stubs."""
    reported_by: str | None = None
    """The session whose harness handed this content over when it could not be checked against
    the source, or differed from it: what that agent saw, not known to be the file's (decision
    0031). None for a version read from the source or checked against it."""

    def reported_elsewhere(self, session_id: str) -> bool:
        """True if another session's harness reported this content (it is not the file's truth
        for ``session_id``)."""
        return self.reported_by is not None and self.reported_by != session_id

    @property
    def is_stub(self) -> bool:
        """A discovery stub: known to exist by path, never read."""
        return self.file_hash is None and self.content_status is None

    @property
    def needs_read(self) -> bool:
        """The stub test (docs/specification.md §2): neither bytes nor content are known, so
        activating it reads the source first. True for discovery stubs and for deletions (the file
        may be back); False for binary or oversized files, whose bytes were hashed."""
        return self.file_hash is None and self.content is None

    @property
    def is_deleted(self) -> bool:
        return self.content_status == "deleted"

    @staticmethod
    def identity_of(source: Source) -> str:
        """The object id every client computes for this source binding."""
        return hashing.identity_hash("file", source=source.to_json())

    @classmethod
    def build(
        cls,
        source: Source,
        *,
        content: str | None,
        file_hash: str | None,
        content_status: ContentStatus | None = None,
        reported_by: str | None = None,
    ) -> FileObject:
        """Compute every hash for a version with this content (the single place they are made)."""
        ident = cls.identity_of(source)
        file_type = file_type_of(source.path)
        count = hashing.char_count(content)
        fields: dict[str, object] = {"file_type": file_type, "char_count": count}
        if content_status is not None:
            fields["content_status"] = content_status
        if reported_by is not None:
            fields["reported_by"] = reported_by
        meta = hashing.metadata_hash(fields)
        chash = hashing.content_hash(content)
        return cls(
            id=ident,
            source=source,
            identity_hash=ident,
            content=content,
            file_type=file_type,
            char_count=count,
            file_hash=file_hash,
            content_hash=chash,
            metadata_hash=meta,
            object_hash=hashing.object_hash(file_hash, chash, meta),
            content_status=content_status,
            reported_by=reported_by,
        )

    @classmethod
    def stub(cls, source: Source) -> FileObject:
        """A discovery stub (§5.6): content, file_hash and content_hash null, char_count 0."""
        return cls.build(source, content=None, file_hash=None)

    def deleted(self) -> FileObject:
        """The version recording that the source is gone: content null, history kept."""
        return self.build(self.source, content=None, file_hash=None, content_status="deleted")


@attrs.frozen
class ToolcallObject:
    """A ``toolcall`` object: the result of one tool execution, written once (§2.6)."""

    type: ClassVar[str] = "toolcall"
    id: str = attrs.field(converter=interned)
    """``xt/id``: the provider's tool-call id."""
    _identity: bytes | str = attrs.field(alias="identity_hash", converter=held_digest)
    """The identity hash as its 32 bytes (:func:`held_digest`); :attr:`identity_hash` gives
    its hex."""
    content: str | None
    """The tool's output."""
    tool: str = attrs.field(converter=interned)
    args: Mapping[str, Any] = attrs.field(converter=freeze_json)
    """The call's arguments as a JSON object (stored frozen)."""
    status: ToolStatus = attrs.field(converter=interned)
    chat_ref: str = attrs.field(converter=interned)
    """One string for every call of a session, as the status (decision 0105)."""
    args_display: str | None
    file_refs: tuple[str, ...] | None
    _content: bytes | str | None = attrs.field(alias="content_hash", converter=held_digest)
    _metadata: bytes | str = attrs.field(alias="metadata_hash", converter=held_digest)
    _object: bytes | str = attrs.field(alias="object_hash", converter=held_digest)
    """The three other hashes as 32 bytes each, their hex given by the properties of their
    names: one object a tool call, held for the whole session (decision 0163)."""
    file_views: tuple[FileView, ...] | None = None
    """What the call showed of which files, or that it changed them (decision 0020); None when
    nothing was recognised."""
    content_length: int = attrs.field(
        default=attrs.Factory(lambda self: len(self.content or ""), takes_self=True)
    )
    """Characters of the output (``len``): derived from it, kept when a client holds the object
    without its content (``selfctx.application.objects``). Not stored, not hashed."""

    source: ClassVar[None] = None

    @property
    def identity_hash(self) -> str:
        return digest_hex(self._identity)

    @property
    def content_hash(self) -> str | None:
        return None if self._content is None else digest_hex(self._content)

    @property
    def metadata_hash(self) -> str:
        return digest_hex(self._metadata)

    @property
    def object_hash(self) -> str:
        return digest_hex(self._object)

    @classmethod
    def build(
        cls,
        toolcall_id: str,
        *,
        tool: str,
        args: Mapping[str, Any],
        output: str | None,
        status: ToolStatus,
        chat_ref: str,
        args_display: str | None = None,
        file_refs: Sequence[str] | None = None,
        file_views: Sequence[FileView] | None = None,
    ) -> ToolcallObject:
        """Build the single version of a tool call with all its hashes."""
        if not toolcall_id:
            raise InvalidInput("tool-call id", toolcall_id, "must not be empty")
        if not tool:
            raise InvalidInput("tool name", tool, "must not be empty")
        if status not in ("ok", "fail"):
            raise InvalidInput("tool status", status, "must be 'ok' or 'fail'")
        if not isinstance(args, Mapping):
            raise InvalidInput("tool args", args, "must be a JSON object")
        refs = tuple(file_refs) if file_refs is not None else None
        views = tuple(file_views) if file_views is not None else None
        if views is not None and not all(isinstance(v, FileView) for v in views):
            raise InvalidInput("file views", file_views, "must be FileView values")
        plain_args = thaw_json(args)
        fields = {
            "tool": tool,
            "args": plain_args,
            "args_display": _absent_if_none(args_display),
            "status": status,
            "chat_ref": chat_ref,
            "file_refs": _absent_if_none(list(refs) if refs is not None else None),
            "file_views": _absent_if_none(
                [v.to_json() for v in views] if views is not None else None
            ),
        }
        try:
            meta = hashing.metadata_hash(fields)
        except (TypeError, ValueError) as exc:
            raise InvalidInput("tool args", args, str(exc)) from exc
        chash = hashing.content_hash(output)
        return cls(
            id=toolcall_id,
            identity_hash=hashing.identity_hash("toolcall", xt_id=toolcall_id),
            content=output,
            tool=tool,
            # frozen already (the chat's call): that very map, not a copy (decision 0092)
            args=args if isinstance(args, PMap | FlatMap) else plain_args,
            status=status,
            chat_ref=chat_ref,
            args_display=args_display,
            file_refs=refs,
            content_hash=chash,
            metadata_hash=meta,
            object_hash=hashing.object_hash(hashing.ABSENT, chash, meta),
            file_views=views,
        )


ContentObject: TypeAlias = FileObject | ToolcallObject


@attrs.frozen
class SystemPromptObject:
    """The session's system prompt: an infrastructure object with no type-specific fields."""

    type: ClassVar[str] = "system_prompt"
    id: str
    identity_hash: str
    content: str
    content_hash: str | None
    metadata_hash: str
    object_hash: str

    @classmethod
    def build(cls, object_id: str, content: str) -> SystemPromptObject:
        chash = hashing.content_hash(content)
        meta = hashing.metadata_hash({})
        return cls(
            id=object_id,
            identity_hash=hashing.identity_hash("system_prompt", xt_id=object_id),
            content=content,
            content_hash=chash,
            metadata_hash=meta,
            object_hash=hashing.object_hash(hashing.ABSENT, chash, meta),
        )


@attrs.frozen
class SummaryObject:
    """A session's compaction summary (decision 0043): an infrastructure object, one per
    session (``summary:{session}``), with a new version at every compaction. The chat shows its
    content in place of the turns it covers; those turns stay in the session, verbatim."""

    type: ClassVar[str] = "summary"
    id: str
    identity_hash: str
    content: str
    """The summary the model reads (for a truncation, a line saying an earlier topic was left)."""
    case: str
    """``summarize`` or ``truncate``."""
    upto: int
    """It covers the session's turns before this one."""
    session_ref: str
    content_hash: str | None
    metadata_hash: str
    object_hash: str

    @classmethod
    def build(cls, session_id: str, content: str, *, case: str, upto: int) -> SummaryObject:
        """The version for a compaction of ``session_id``'s turns before ``upto``."""
        object_id = f"summary:{session_id}"
        session_ref = f"session:{session_id}"
        meta = hashing.metadata_hash({"case": case, "upto": upto, "session_ref": session_ref})
        chash = hashing.content_hash(content)
        return cls(
            id=object_id,
            identity_hash=hashing.identity_hash("summary", xt_id=object_id),
            content=content,
            case=case,
            upto=upto,
            session_ref=session_ref,
            content_hash=chash,
            metadata_hash=meta,
            object_hash=hashing.object_hash(hashing.ABSENT, chash, meta),
        )
