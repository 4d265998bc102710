"""Cursor-based ingestion: each call the harness hands over its whole message list; every message
is recorded exactly once.

The ingestor remembers the harness's list as it last saw it (its *view*, as fingerprints) and every
message it recorded (a multiset of fingerprints). A list that extends the view is consumed from
the cursor. A list that is a prefix of the view (a retry, a truncation) records nothing. A list
that diverges (the harness compacted or edited its history) is reconciled message by message:
whatever was already recorded is recognised by its fingerprint and skipped, the rest is recorded
after the existing history. Nothing recorded is ever removed, and nothing is recorded twice: tool
messages are identified by their provider call id, other messages by role, text and the call ids
they carry (docs/decisions/0007-ingestion-cursor.md states the one ambiguity this leaves).
"""

from __future__ import annotations

import collections
import posixpath
from collections.abc import Sequence

import attrs

from selfctx.adapters.harness.messages import MalformedMessage, Message
from selfctx.adapters.harness.recognise import (
    Effect,
    FileEdit,
    FileRead,
    FileWrite,
    Listing,
    recognise,
    unwrap_output,
)
from selfctx.application.persistence import entry_events
from selfctx.application.ports.files import SourceUnavailable
from selfctx.application.ports.store import StoreError
from selfctx.application.service import ContextService
from selfctx.domain.chat import AssistantMessage, ToolCallRequest, ToolResult, UserMessage
from selfctx.domain.errors import DuplicateObject, InvalidInput, SelfContextError
from selfctx.domain.objects import FileObject, ToolcallObject, ToolStatus
from selfctx.domain.session.machine import INFRASTRUCTURE_PREFIXES

__all__ = ["IngestResult", "Ingestor"]


@attrs.frozen
class IngestResult:
    """What one call consumed."""

    consumed: int
    """Messages recorded by this call."""
    diverged: bool
    """The list did not extend the previous one; it was reconciled."""
    total: int
    """Messages recorded over the session's life."""


_AFTER_CALL = frozenset({"Discover", "IndexFile", "Resume"})
"""Log commands that may follow a tool result's tool call while its recording is unfinished."""

_SYSTEM_MARK = "[system] "
"""How a system message in mid-conversation is kept: as a user message with this mark."""


def _fingerprint(role: str, text: str, call_ids: Sequence[str] = (), call_id: str = "") -> str:
    if role == "tool":
        return Message("tool", "", tool_call_id=call_id).fingerprint
    if role == "system":  # known by the form it is recorded in, so a resume recognises it
        role, text = "user", _SYSTEM_MARK + text
    calls = tuple(ToolCallRequest(i, "x") for i in call_ids)
    return Message(role, text, calls).fingerprint  # type: ignore[arg-type]


def _key(message: Message) -> str:
    """The fingerprint the cursor uses for a message of the harness's list."""
    if message.role == "system":
        return _fingerprint("system", message.text)
    return message.fingerprint


def _common_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class Ingestor:
    """Feeds one session from a harness's message lists."""

    def __init__(
        self,
        service: ContextService,
        session_id: str,
        *,
        cwd: str = "/",
        roots: Sequence[str] = ("/",),
    ) -> None:
        self.service = service
        self.session_id = session_id
        self.cwd = posixpath.normpath(cwd)
        self.roots = tuple(posixpath.normpath(r) for r in roots)
        self.view: list[str] = []
        self.recorded: collections.Counter[str] = collections.Counter()
        self.calls: dict[str, ToolCallRequest] = {}
        self.answered: set[str] = set()
        self.total = 0
        self._resync = False
        """Set when recording failed in the store: what landed is unknown until caught up."""
        self.inline = service.state(session_id).policy.name == "inline"
        self._restore()
        self._finish_interrupted()

    def _restore(self) -> None:
        """Rebuild view and memory from the stored chat (after a resume: nothing is re-recorded
        when the harness sends the same list again)."""
        state = self.service.state(self.session_id)
        prompt_fp = _fingerprint("system", self.service.system_prompt(self.session_id))
        # Turn 0 always exists: only a session with recorded messages has a prompt in its view.
        view = [prompt_fp] if any(turn.messages for turn in state.turns) else []
        for turn in state.turns:
            for message in turn.messages:
                if isinstance(message, UserMessage):
                    fp = _fingerprint("user", message.text)
                elif isinstance(message, AssistantMessage):
                    fp = _fingerprint("assistant", message.text, [c.id for c in message.tool_calls])
                    for call in message.tool_calls:
                        self.calls[call.id] = call
                elif isinstance(message, ToolResult):
                    fp = _fingerprint("tool", "", call_id=message.toolcall_id)
                    self.answered.add(message.toolcall_id)
                else:
                    continue  # the context manager's own notes are not the harness's messages
                view.append(fp)
                self.recorded[fp] += 1
                self.total += 1
        self.view = view

    # -- planning --------------------------------------------------------------------------

    def _plan(self, messages: Sequence[Message]) -> tuple[list[Message], bool]:
        fps = [_key(m) for m in messages]
        prefix = _common_prefix(self.view, fps)
        if prefix == len(fps):
            return [], False  # nothing beyond what we have seen (a retry or a truncation)
        if prefix == len(self.view):
            return list(messages[prefix:]), False
        # Divergence: skip what was already recorded, in order of appearance.
        available = collections.Counter(self.recorded)
        available.subtract(fps[:prefix])
        new = []
        for message, fp in zip(messages[prefix:], fps[prefix:], strict=True):
            if available[fp] > 0:
                available[fp] -= 1
            elif message.tool_calls and all(c.id in self.calls for c in message.tool_calls):
                continue  # an assistant message the harness edited: its calls say which it is
            else:
                new.append(message)
        return new, True

    def _validate(self, new: Sequence[Message]) -> None:
        """Refuse the whole list before recording anything."""
        calls = dict(self.calls)
        answered = set(self.answered)
        for message in new:
            if message.role == "assistant":
                for call in message.tool_calls:
                    if call.id in calls:
                        raise MalformedMessage(message.index, f"tool call id {call.id!r} is reused")
                    if call.id.startswith(INFRASTRUCTURE_PREFIXES):
                        raise MalformedMessage(
                            message.index,
                            f"tool call id {call.id!r} uses a prefix of the session's own objects",
                        )
                    calls[call.id] = call
            elif message.role == "tool":
                call_id = message.tool_call_id or ""
                if call_id not in calls:
                    raise MalformedMessage(
                        message.index,
                        f"tool result for {call_id!r}, which no assistant message requested",
                    )
                if call_id in answered:
                    raise MalformedMessage(
                        message.index, f"a second result for tool call {call_id!r}"
                    )
                answered.add(call_id)
                limit = self.service.settings.max_output_bytes
                text = message.text
                if len(text) > limit // 4 and len(text.encode("utf-8", "surrogatepass")) > limit:
                    raise MalformedMessage(
                        message.index, f"the tool output is over the limit of {limit} bytes"
                    )
        self._refuse_taken_ids([c for m in new if m.role == "assistant" for c in m.tool_calls])

    def _refuse_taken_ids(self, calls: Sequence[ToolCallRequest]) -> None:
        """A call id is its tool call's object id: one another object already has (another
        session's tool call, say) is refused here, before anything of the list is recorded."""
        taken = self.service.taken_ids(self.session_id, [c.id for c in calls])
        if taken:
            raise DuplicateObject(taken[0], "another object already has this id")

    # -- recording -------------------------------------------------------------------------

    def ingest(self, messages: Sequence[Message]) -> IngestResult:
        """Record what is new in ``messages`` (the harness's whole list, parsed).

        If recording fails in the store, the error is raised and the next call first catches up
        with the store and rebuilds what it knows from the stored chat: a commit whose answer was
        lost is then known, and nothing is recorded twice."""
        if self._resync:
            self.service.refresh(self.session_id)
            self.view, self.recorded, self.calls, self.answered = (
                [],
                collections.Counter(),
                {},
                set(),
            )
            self.total = 0
            self._restore()
            self._resync = False
        lead = 0
        while lead < len(messages) and messages[lead].role == "system":
            lead += 1
        leading = {id(m) for m in messages[:lead]}
        _check_unique(messages)
        new, diverged = self._plan(messages)
        new = [m for m in new if id(m) not in leading]  # they are the system prompt, not chat
        self._validate(new)
        if lead:
            prompt = "\n\n".join(m.text for m in messages[:lead])
            self.service.set_system_prompt(self.session_id, prompt)
        consumed = 0
        try:
            for message in new:
                self._record(message)
                self.recorded[_key(message)] += 1
                consumed += 1
        except StoreError:
            self._resync = True
            raise
        finally:
            self.total += consumed
            if consumed == len(new):
                if diverged or len(messages) > len(self.view):  # a prefix keeps the longer view
                    self.view = [_key(m) for m in messages]
            elif not diverged and consumed:
                # Only part of an append was recorded: the view is the list up to the last
                # message recorded (the list's leading system messages are not in ``new``).
                end = next(n for n, m in enumerate(messages) if m is new[consumed - 1]) + 1
                self.view = [_key(m) for m in messages[:end]]
        return IngestResult(consumed=consumed, diverged=diverged, total=self.total)

    def _record(self, message: Message) -> None:
        sid = self.session_id
        if message.role == "user":
            self.service.record_user_message(sid, message.text, message.images)
        elif message.role == "system":  # in mid-conversation: kept, as a marked user message
            self.service.record_user_message(sid, _SYSTEM_MARK + message.text)
        elif message.role == "assistant":
            self.service.record_assistant_message(
                sid, message.text, message.tool_calls, reasoning=message.reasoning
            )
            for call in message.tool_calls:
                self.calls[call.id] = call
        else:
            call = self.calls[message.tool_call_id or ""]
            self._record_tool_result(call, message)
            self.answered.add(call.id)

    def _record_tool_result(self, call: ToolCallRequest, message: Message) -> None:
        sid = self.session_id
        args = dict(call.arguments)
        status: ToolStatus = "fail" if message.is_error or _failed(message.text) else "ok"
        # An output with images (a screenshot, an image file read) is not a file's text.
        effects = [] if message.images else recognise(call.name, args, message.text, self.cwd)
        read_ids: list[str] = []
        listings: list[list[str]] = []
        for effect in effects:
            if isinstance(effect, FileRead) and self._allowed(effect.path):
                read_ids += self._index(effect.path, effect.content)
            elif isinstance(effect, Listing):
                listings.append([p for p in effect.paths if self._allowed(p)])
        # The files a call read or listed are its file_refs, so that a collapsed listing still
        # names them; listed files are discovered after the call, in first-encounter order.
        listed = [i for paths in listings for i in self._ids(paths)]
        refs = list(dict.fromkeys(read_ids + listed))
        self.service.record_tool_call(
            sid,
            call.id,
            tool=call.name,
            args=args,
            output=message.text,
            status=status,
            file_refs=refs or None,
            # ssot: a read file is active instead (decision 0006); inline: the read's message is
            # where the file's content shows, so the tool call itself stays visible.
            activate=not read_ids or self.inline,
            images=message.images,
        )
        self._after_call(effects)

    def _after_call(self, effects: Sequence[Effect], done: frozenset[str] = frozenset()) -> None:
        """What a tool result records after its tool call: discovery of what it listed, then
        the files it wrote or edited (but not those in ``done``, already indexed since)."""
        for effect in effects:
            if isinstance(effect, Listing):
                paths = [p for p in effect.paths if self._allowed(p)]
                if paths:
                    self.service.discover(self.session_id, paths, strict=False)
        for effect in effects:
            if not isinstance(effect, FileWrite | FileEdit) or not self._allowed(effect.path):
                continue
            ids = self._ids([effect.path])
            if ids and ids[0] in done:
                continue
            if isinstance(effect, FileWrite):
                self._index(effect.path, effect.content)
            else:
                self._index(effect.path, self._edited(effect))

    def _finish_interrupted(self) -> None:
        """After a resume: finish recording the last tool result if its client died part-way.

        Recording a tool result is several commands — its reads, the tool call (which puts the
        result in the chat, so the cursor counts the message as recorded), then the discovery of
        what it listed and the indexing of what it wrote or edited. A client killed between them
        left the rest undone. When the session's last message is a tool result and nothing but
        those commands (and resumes) followed its tool call in the log, the rest is run again:
        discovery and indexing known content are idempotent, and a written or edited file that
        the log shows indexed since is skipped, so an edit is never applied twice.
        """
        turns = [turn for turn in self.service.state(self.session_id).turns if turn.messages]
        last = turns[-1].messages[-1] if turns else None
        if not isinstance(last, ToolResult) or last.toolcall_id not in self.calls:
            return
        position = self.service.log_position(self.session_id)
        after = None
        for since in (max(0, position - 64), 0):  # the recent log first, all of it if need be
            entries = self.service.store.session_log(self.session_id, since)
            starts = [
                n
                for n, entry in enumerate(entries)
                if entry["command"] == "RecordToolCall"
                and any(ev.get("object_id") == last.toolcall_id for ev in entry_events(entry))
            ]
            if starts:
                after = entries[starts[-1] + 1 :]
                break
        if after is None or any(e["command"] not in _AFTER_CALL for e in after):
            return  # the message was finished: something else happened after it
        done = frozenset(
            ev["object_id"]
            for e in after
            if e["command"] == "IndexFile"
            for ev in entry_events(e)
            if "object_id" in ev
        )
        call = self.calls[last.toolcall_id]
        toolcall = self.service.object(self.session_id, last.toolcall_id)
        if not isinstance(toolcall, ToolcallObject) or toolcall.content is None:
            return
        effects = recognise(call.name, dict(call.arguments), toolcall.content, self.cwd)
        self._after_call(effects, done)

    def _ids(self, paths: Sequence[str]) -> list[str]:
        """Object ids of the paths that resolve (discovery refuses the others)."""
        out = []
        for path in paths:
            try:
                out.append(self.service.object_id_for(path))
            except (SourceUnavailable, InvalidInput):
                continue
        return out

    def _allowed(self, path: str) -> bool:
        return any(path == r or path.startswith(r.rstrip("/") + "/") for r in self.roots)

    def _index(self, path: str, content: str | None) -> list[str]:
        """Index a file with known content, or from its source when the content is unknown;
        a source that cannot be read leaves the tool call alone."""
        try:
            return [self.service.index_file(self.session_id, path, content).object_id]
        except (SourceUnavailable, InvalidInput):
            return []  # store errors are not caught: they must reach the harness

    def _edited(self, edit: FileEdit) -> str | None:
        """The file's text after a replacement, when its current text is known exactly."""
        try:
            obj = self.service.object(self.session_id, self.service.object_id_for(edit.path))
        except SelfContextError:
            return None
        if (
            isinstance(obj, FileObject)
            and obj.content is not None
            and obj.content.count(edit.old) == 1
        ):
            return obj.content.replace(edit.old, edit.new, 1)
        return None


def _check_unique(messages: Sequence[Message]) -> None:
    """In one list a call id is requested once and answered once, whatever is already recorded
    (after a divergence, an assistant message whose calls are recorded is taken for an edited
    copy — only if no other message of the list carries them)."""
    requested: set[str] = set()
    answered: set[str] = set()
    for message in messages:
        for call in message.tool_calls:
            if call.id in requested:
                raise MalformedMessage(message.index, f"tool call id {call.id!r} is reused")
            requested.add(call.id)
        if message.role == "tool":
            if message.tool_call_id in answered:
                raise MalformedMessage(
                    message.index, f"a second result for tool call {message.tool_call_id!r}"
                )
            answered.add(message.tool_call_id or "")


def _failed(output: str) -> bool:
    """The output carries a non-zero exit code (mini-swe-agent's ``<returncode>``, also on a cut
    output; OpenHands' ``[Command finished with exit code N]``)."""
    head = output[:40]
    if head.startswith("<returncode>"):
        return not head.startswith("<returncode>0</returncode>")
    return unwrap_output(output)[1] not in (None, 0)
