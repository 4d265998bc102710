"""Events: facts a decision produced, in the past tense. State is the fold of its events.

Events that wrote an object version carry it (``version``) so the application can persist it in
the same commit; the session log stores only the version's id and ``object_hash``, and folding
never needs the content. After a reload from the log, ``version`` is None.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypeAlias

import attrs

from selfctx.domain.chat import AssistantMessage, Turn, freeze_json
from selfctx.domain.identifiers import interned
from selfctx.domain.indexing import Outcome
from selfctx.domain.objects import FileObject, SummaryObject, SystemPromptObject, ToolcallObject
from selfctx.domain.session.commands import Trigger
from selfctx.domain.session.state import CollapseWindow, PolicyConfig

__all__ = [
    "AssistantMessageRecorded",
    "ChatCompacted",
    "ChatRestored",
    "CheckpointCreated",
    "ContextNoteRecorded",
    "Event",
    "FileDeleted",
    "FileDiscovered",
    "FileIndexed",
    "ObjectActivated",
    "ObjectDeactivated",
    "ObjectDemoted",
    "ObjectEncountered",
    "ObjectPinned",
    "ObjectUnpinned",
    "RolledBack",
    "SessionResumed",
    "SessionStarted",
    "SystemPromptSet",
    "ToolCallRecorded",
    "UserMessageRecorded",
]

_version_field = attrs.field(default=None, eq=False, repr=False)


def _images(items: Iterable[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    return tuple(freeze_json(item) for item in items)


@attrs.frozen
class SessionStarted:
    """The session exists, with its system prompt and chat."""

    session_id: str
    system_prompt_id: str
    chat_id: str
    window: CollapseWindow
    object_hash: str
    """object_hash of the first system prompt version."""
    version: SystemPromptObject | None = _version_field
    policy: PolicyConfig = PolicyConfig()


@attrs.frozen
class SystemPromptSet:
    """The system prompt got a new version."""

    object_id: str = attrs.field(converter=interned)
    object_hash: str
    version: SystemPromptObject | None = _version_field


@attrs.frozen
class UserMessageRecorded:
    """A user message was appended; a new turn began."""

    text: str
    images: tuple[Mapping[str, Any], ...] = attrs.field(converter=_images, default=())


@attrs.frozen
class AssistantMessageRecorded:
    """A model message was appended to the current turn."""

    message: AssistantMessage


@attrs.frozen
class ToolCallRecorded:
    """A toolcall object was written and its place recorded in the chat."""

    object_id: str = attrs.field(converter=interned)
    object_hash: str
    version: ToolcallObject | None = _version_field
    images: tuple[Mapping[str, Any], ...] = attrs.field(converter=_images, default=())
    """Images the tool returned with its output (kept in the chat, beside its reference)."""


@attrs.frozen
class FileIndexed:
    """Full indexing wrote a new version of a file (``created`` or ``updated``)."""

    object_id: str = attrs.field(converter=interned)
    outcome: Outcome
    trigger: Trigger
    object_hash: str
    version: FileObject | None = _version_field


@attrs.frozen
class FileDiscovered:
    """Discovery wrote a stub for a file nobody had indexed."""

    object_id: str = attrs.field(converter=interned)
    object_hash: str
    version: FileObject | None = _version_field


@attrs.frozen
class FileDeleted:
    """A version with null content records that the file's source is gone."""

    object_id: str = attrs.field(converter=interned)
    trigger: Trigger
    object_hash: str
    version: FileObject | None = _version_field


@attrs.frozen
class ObjectEncountered:
    """A content object entered the session index and the metadata pool (or, already in the
    index but only there, came back into the pool)."""

    object_id: str = attrs.field(converter=interned)
    kind: Literal["file", "toolcall"]


@attrs.frozen
class ObjectActivated:
    """An object entered the active set."""

    object_id: str = attrs.field(converter=interned)
    auto: bool
    """True for a tool call activated on creation (the window may collapse it later)."""


@attrs.frozen
class ObjectDeactivated:
    """An object left the active set; it stays in the metadata pool."""

    object_id: str = attrs.field(converter=interned)
    by: Literal["agent", "window", "budget", "rollback"]
    """Who collapsed it: the agent, the auto-collapse window, token budget enforcement, or a
    rollback to a checkpoint when it was not active."""
    superseded_by: str | None = None
    """A tool output collapsed because a later one shows the same lines of its files again:
    that later one (decision 0021)."""
    reason: str | None = None
    """For ``by="budget"``: the rule that chose it (``batch:superseded``, ``batch:unused``,
    ``batch:over-keep``, ``batch:lru``, ``seen:unused``, ``seen:superseded``, ``shed``,
    ``budget``); None in entries written before it was kept. Changes no state: it is there so
    that a reader of the log can say why an output collapsed."""
    kept: str | None = None
    """The lines of a collapsing tool output its one-line reference still shows (an excerpt,
    decision 0075), None: the reference alone."""


@attrs.frozen
class ObjectPinned:
    """An object is exempt from auto-collapse."""

    object_id: str = attrs.field(converter=interned)


@attrs.frozen
class ObjectUnpinned:
    """An object's pin was removed."""

    object_id: str = attrs.field(converter=interned)


@attrs.frozen
class ContextNoteRecorded:
    """The context manager appended a note to the chat (e.g. what a budget collapse did)."""

    text: str


@attrs.frozen
class ObjectDemoted:
    """An object left the metadata pool (and the active set); it stays in the index. A rollback
    does this to what the session had not met at its checkpoint."""

    object_id: str = attrs.field(converter=interned)


@attrs.frozen
class CheckpointCreated:
    """A checkpoint: the session as it was right before the log entry holding this event."""

    label: str
    auto: bool
    """True when the policy took it (every N turns) or a rollback did (before rolling back)."""


@attrs.frozen
class ChatRestored:
    """The chat became what it was at a checkpoint: the first ``keep`` turns stay, the turns
    after them are replaced by ``turns``. The turns it removes stay in the log and the store."""

    keep: int
    turns: tuple[Turn, ...]
    compacted: int = 0
    """The checkpoint's compaction: turns before this one compacted ..."""
    summary: str = ""
    """... shown as this summary."""


@attrs.frozen
class ChatCompacted:
    """The chat's turns before ``upto`` are compacted: the chat shows ``summary`` in their
    place. The turns stay in the session and the log; the summary is also a new version of the
    session's summary object."""

    upto: int
    case: str
    """``summarize`` or ``truncate`` (decision 0043)."""
    summary: str
    object_id: str = attrs.field(converter=interned)
    object_hash: str
    version: SummaryObject | None = _version_field


@attrs.frozen
class RolledBack:
    """A rollback to checkpoint ``label`` happened (the events before it in the entry say what
    it restored)."""

    label: str
    conversation: bool
    files: tuple[str, ...]
    """Ids of the files written back."""


@attrs.frozen
class SessionResumed:
    """The session was resumed; reconciliation events follow in the same batch."""


Event: TypeAlias = (
    SessionStarted
    | SystemPromptSet
    | UserMessageRecorded
    | AssistantMessageRecorded
    | ToolCallRecorded
    | FileIndexed
    | FileDiscovered
    | FileDeleted
    | ObjectEncountered
    | ObjectActivated
    | ObjectDeactivated
    | ObjectPinned
    | ObjectUnpinned
    | SessionResumed
    | ContextNoteRecorded
    | ObjectDemoted
    | CheckpointCreated
    | ChatRestored
    | RolledBack
    | ChatCompacted
)
