"""Commands: what a harness or the agent asks of a session. Orders, not facts.

The application gathers every input a decision needs (stored versions, what was read from a
source, the system prompt object) and puts it in the command, so that deciding stays pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeAlias

import attrs

from selfctx.domain.chat import AssistantMessage, Turn
from selfctx.domain.objects import FileObject, SummaryObject, SystemPromptObject, ToolcallObject
from selfctx.domain.session.state import CollapseWindow, PolicyConfig

__all__ = [
    "Activate",
    "Checkpoint",
    "CollapseToFit",
    "Command",
    "CompactChat",
    "Deactivate",
    "Discover",
    "IndexFile",
    "IndexFiles",
    "Pin",
    "RecordAssistantMessage",
    "RecordDeletion",
    "RecordToolCall",
    "RecordUserMessage",
    "Resume",
    "Rollback",
    "RollbackTarget",
    "SetSystemPrompt",
    "StartSession",
    "Trigger",
    "Unpin",
]

Trigger: TypeAlias = Literal[
    "agent_read", "agent_view", "agent_write", "watcher", "resume", "activation", "restore"
]
"""What started full indexing; it decides the session effects (§5.6 step 4). ``agent_view``:
the agent saw some lines of the file (a partial view) and the whole file was read from its
source; it joins the index and pool, not the active set (decision 0020). ``agent_write`` is an
agent read of a file the agent itself just wrote or edited (the same session effects as
``agent_read``; a rollback restores what the session wrote); ``restore`` is a rollback writing a
file back."""


@attrs.frozen
class StartSession:
    """Create the session with its system prompt and chat."""

    session_id: str
    """Stable identifier chosen by the harness."""
    system_prompt: SystemPromptObject
    """The first version of the session's system prompt."""
    chat_id: str
    """Id of the session's chat object."""
    window: CollapseWindow = CollapseWindow()
    """Auto-collapse window sizes (used by the ``ssot`` policy)."""
    policy: PolicyConfig = PolicyConfig()
    """Layout and collapse policy."""


@attrs.frozen
class SetSystemPrompt:
    """Replace the system prompt (a new version of the same object)."""

    system_prompt: SystemPromptObject
    """The new version."""


@attrs.frozen
class RecordUserMessage:
    """A user message: appended to the chat, it begins a new turn."""

    text: str
    """The message text."""
    images: tuple[Mapping[str, Any], ...] = ()
    """Images that came with it (JSON objects, see ``UserMessage.images``)."""


@attrs.frozen
class RecordAssistantMessage:
    """A model message, with the tool calls it requested."""

    message: AssistantMessage
    """The message."""


@attrs.frozen
class RecordToolCall:
    """A tool finished: its output becomes a toolcall object, auto-activated (§5.7)."""

    toolcall: ToolcallObject
    """The toolcall object's single version."""
    activate: bool = True
    """Auto-activate it (docs/specification.md §2, auto-collapse). False for a call whose output is
    recorded as a file object (a whole-file read, see docs/decisions/0006): the file is active
    instead."""
    images: tuple[Mapping[str, Any], ...] = ()
    """Images the tool returned with its output."""


@attrs.frozen
class IndexFile:
    """Full indexing of a file whose content was just observed (§5.6)."""

    observed: FileObject
    """The version built from what was read (content, file_hash)."""
    stored: FileObject | None
    """The latest stored version, or None if the object was never written."""
    trigger: Trigger
    """Why it was indexed: an agent read adds the file to every set; the others change no set."""


@attrs.frozen
class IndexFiles:
    """Full indexing of several files an agent read at once (a harness loading a source tree):
    each item is decided as its own :class:`IndexFile`, and together they are one command."""

    items: tuple[IndexFile, ...]
    """One agent read per file, in the order read; an id that recurs counts once (the first)."""


@attrs.frozen
class Discover:
    """Paths seen in a tool's output (ls, grep, find, tree): stubs for unknown files (§5.6)."""

    found: tuple[tuple[FileObject, FileObject | None], ...]
    """Pairs of (stub built from the path, latest stored version or None)."""


@attrs.frozen
class RecordDeletion:
    """The source of a file is confirmed gone: a version with null content (§5.9)."""

    stored: FileObject
    """The latest stored version."""
    trigger: Trigger
    """``watcher`` or ``resume``."""


@attrs.frozen
class Activate:
    """Load an object's content into the active set (§3.3)."""

    object_id: str
    """The object to activate."""
    refresh: IndexFile | None = None
    """For a discovery stub, the full indexing the application ran first (trigger activation)."""


@attrs.frozen
class Deactivate:
    """Remove an object from the active set; it stays in the metadata pool."""

    object_id: str
    """The object to deactivate."""


@attrs.frozen
class Pin:
    """Exempt an object from auto-collapse."""

    object_id: str
    """The object to pin."""


@attrs.frozen
class Unpin:
    """Remove a pin; the collapse window applies again."""

    object_id: str
    """The object to unpin."""


@attrs.frozen
class CollapseToFit:
    """Token-driven collapse chosen by the layout policy: deactivate these objects and note it."""

    object_ids: tuple[str, ...]
    """Active objects to collapse (unpinned)."""
    note: str
    """One line for the model saying what was collapsed and why."""
    superseded: tuple[tuple[str, str], ...] = ()
    """``(object, later output)`` for the objects collapsed because a later output shows the
    same lines of their files again (decision 0021)."""
    reasons: tuple[tuple[str, str], ...] = ()
    """``(object, rule)``: which rule of the policy collapsed each object (a short code such as
    ``batch:unused``; see ``ObjectDeactivated.reason``), kept in its event for inspection."""
    kept: tuple[tuple[str, str], ...] = ()
    """``(object, excerpt)``: the lines of a collapsing tool output its reference keeps showing
    (decision 0075)."""


@attrs.frozen
class Checkpoint:
    """Mark the session as it is now, to roll back to later."""

    label: str | None = None
    """A name (None: ``checkpoint-N``); unique within the session."""


@attrs.frozen
class RollbackTarget:
    """The session's sets and chat as they were at a checkpoint (read from the store)."""

    turns: tuple[Turn, ...]
    pool: frozenset[str]
    active: frozenset[str]
    pinned: frozenset[str]
    auto_active: frozenset[str]
    compacted: int = 0
    summary: str = ""


@attrs.frozen
class Rollback:
    """Go back to a checkpoint: its conversation (sets and chat), the files the session wrote
    since, or both. Nothing is erased: the rollback is new events, and it first checkpoints the
    session as it is, so it can itself be rolled back."""

    label: str
    """The checkpoint to go back to."""
    target: RollbackTarget | None
    """The conversation to restore; None leaves the conversation as it is (files only)."""
    files: tuple[IndexFile | RecordDeletion, ...] = ()
    """Files written back (trigger ``restore``): a version with the checkpoint's content, or a
    deletion for a file that did not exist then."""


@attrs.frozen
class CompactChat:
    """Compact the chat's turns before ``summary.upto`` (decision 0043)."""

    summary: SummaryObject
    """The summary's new version: what the chat shows in their place."""


@attrs.frozen
class Resume:
    """The session is resumed: reconcile sourced objects with their sources (§3.6)."""

    reconciled: tuple[IndexFile | RecordDeletion, ...] = ()
    """Full indexing (trigger resume) or deletions for the sources that were reachable."""


Command: TypeAlias = (
    StartSession
    | SetSystemPrompt
    | RecordUserMessage
    | RecordAssistantMessage
    | RecordToolCall
    | IndexFile
    | IndexFiles
    | Discover
    | RecordDeletion
    | Activate
    | Deactivate
    | Pin
    | Unpin
    | Resume
    | CollapseToFit
    | Checkpoint
    | Rollback
    | CompactChat
)
