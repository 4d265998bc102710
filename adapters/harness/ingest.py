"""Cursor-based ingestion: each call the harness hands over its whole message list; every message
is recorded exactly once.

What is new in a list, and which object each tool call and result stands for, is the cursor's
business (:mod:`selfctx.adapters.harness.cursor`; decisions 0007 and 0030): the whole list is
planned and checked before anything is recorded. This module records what the plan says — user
and assistant messages, and each tool result with what it shows about files (reads index them,
listings discover them, writes and edits re-index them) — and finishes a result whose client died
part-way through recording it.
"""

from __future__ import annotations

import operator
import posixpath
from collections.abc import Sequence

import attrs

from selfctx.adapters.harness.cursor import SYSTEM_MARK, Cursor, Planned
from selfctx.adapters.harness.ids import CallIds
from selfctx.adapters.harness.messages import MalformedMessage, Message
from selfctx.adapters.harness.recognise import (
    Effect,
    FileEdit,
    FileLines,
    FileRead,
    FileWrite,
    Listing,
    recognise,
    unwrap_output,
)
from selfctx.adapters.harness.tools import called_context_tool
from selfctx.application.persistence import entry_events
from selfctx.application.ports.files import SourceUnavailable
from selfctx.application.ports.store import StoreError
from selfctx.application.service import ContextService
from selfctx.domain.chat import ToolCallRequest, ToolResult
from selfctx.domain.errors import DuplicateObject, InvalidInput, SelfContextError
from selfctx.domain.objects import FileObject, FileView, ToolcallObject, ToolStatus

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


class Ingestor:
    """Feeds one session from a harness's message lists."""

    def __init__(
        self,
        service: ContextService,
        session_id: str,
        *,
        cwd: str = "/",
        roots: Sequence[str] = ("/",),
        tool_prefix: str = "",
    ) -> None:
        self.service = service
        self.tool_prefix = tool_prefix
        """The context tools' prefix: an ``activate`` answer is what the model asked to see."""
        self.session_id = session_id
        self.cwd = posixpath.normpath(cwd)
        self.roots = tuple(posixpath.normpath(r) for r in roots)
        self.cursor = self._new_cursor()
        self._resync = False
        """Set when recording failed in the store: what landed is unknown until caught up."""
        self._unique = _UniqueIds()
        self.inline = service.state(session_id).policy.inline_layout
        self._finish_interrupted()

    def _new_cursor(self) -> Cursor:
        cursor = Cursor(self.session_id, self.service.settings.max_output_bytes)
        state = self.service.state(self.session_id)
        cursor.restore(state.turns, self.service.system_prompt(self.session_id))
        return cursor

    @property
    def ids(self) -> CallIds:
        """The session's tool calls: the harness's ids and the object ids they are stored as."""
        return self.cursor.ids

    @property
    def total(self) -> int:
        """Messages recorded over the session's life."""
        return self.cursor.total

    def _refuse_taken_ids(self, calls: Sequence[ToolCallRequest]) -> None:
        """Object ids are digests no other session produces; should one be held all the same,
        it is refused here, before anything of the list is recorded."""
        taken = self.service.taken_ids(self.session_id, [c.id for c in calls])
        if taken:
            raise DuplicateObject(taken[0], "another object already has this id")

    # -- recording -------------------------------------------------------------------------

    def ingest(self, messages: Sequence[Message]) -> IngestResult:
        """Record what is new in ``messages`` (the harness's whole list, parsed).

        The whole list is checked before anything is recorded. If recording fails in the store,
        the error is raised and the next call first catches up with the store and rebuilds what
        it knows from the stored chat: a commit whose answer was lost is then known, and nothing
        is recorded twice."""
        if self._resync:
            self.service.refresh(self.session_id)
            self.cursor = self._new_cursor()
            self._resync = False
        lead = 0
        while lead < len(messages) and messages[lead].role == "system":
            lead += 1
        self._unique.check(messages)
        plan = self.cursor.plan(messages, lead)
        self._refuse_taken_ids([c for item in plan.new for c in item.calls])
        if lead:
            prompt = "\n\n".join(m.text for m in messages[:lead])
            self.service.set_system_prompt(self.session_id, prompt)
        consumed = 0
        try:
            for item in plan.new:
                self._record(item)
                self.cursor.recorded_one(item)
                consumed += 1
        except StoreError:
            self._resync = True
            raise
        finally:
            self.cursor.settle(plan, consumed)
        return IngestResult(consumed=consumed, diverged=plan.diverged, total=self.total)

    def _record(self, item: Planned) -> None:
        sid = self.session_id
        message = item.message
        if message.role == "user":
            self.service.record_user_message(sid, message.text, message.images)
        elif message.role == "system":  # in mid-conversation: kept, as a marked user message
            self.service.record_user_message(sid, SYSTEM_MARK + message.text)
        elif message.role == "assistant":
            self.service.record_assistant_message(
                sid, message.text, item.calls, reasoning=message.reasoning
            )
        else:
            call = self.ids.call(item.answers or "")
            assert call is not None, "planning maps every result to a known call"
            self._record_tool_result(call, message)

    def _record_tool_result(self, call: ToolCallRequest, message: Message) -> None:
        sid = self.session_id
        args = dict(call.arguments)
        status: ToolStatus = "fail" if message.is_error or _failed(message.text) else "ok"
        # An output with images (a screenshot, an image file read) is not a file's text.
        effects = [] if message.images else recognise(call.name, args, message.text, self.cwd)
        read_ids: list[str] = []
        listings: list[list[str]] = []
        views: list[FileView] = []
        for effect in effects:
            if isinstance(effect, FileRead) and self._allowed(effect.path):
                ids = self._index(effect.path, effect.content)
                read_ids += ids
                views += [FileView(i, "read") for i in ids]
            elif isinstance(effect, FileLines) and self._allowed(effect.path):
                views += [FileView(i, "lines", effect.ranges) for i in self._ids([effect.path])]
            elif isinstance(effect, FileWrite | FileEdit) and self._allowed(effect.path):
                views += [FileView(i, "change") for i in self._ids([effect.path])]
            elif isinstance(effect, Listing):
                listings.append([p for p in effect.paths if self._allowed(p)])
        # The files a call read, viewed or listed are its file_refs, so that a collapsed output
        # still names them; viewed and listed files are discovered after the call, in
        # first-encounter order.
        listed = [i for paths in listings for i in self._ids(paths)]
        viewed = [v.file for v in views if v.kind == "lines"]
        refs = list(dict.fromkeys(read_ids + viewed + listed))
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
            file_views=views or None,
        )
        context = called_context_tool(call.name, args, self.tool_prefix)
        if context is not None and context[0] == "activate" and status == "ok":
            # The answer shows what the model asked for: it stays until the model deactivates
            # it or a budget forces it out, as an object the model activated does.
            self.service.activate(sid, call.id)
        self._after_call(effects)

    def _after_call(self, effects: Sequence[Effect], done: frozenset[str] = frozenset()) -> None:
        """What a tool result records after its tool call: discovery of what it listed, then
        the files it wrote or edited (but not those in ``done``, already indexed since)."""
        listed = {p for effect in effects if isinstance(effect, Listing) for p in effect.paths}
        for effect in effects:
            if isinstance(effect, FileLines) and self._allowed(effect.path):
                if effect.path not in listed:  # a search's hits: the listing discovers them
                    self._view(effect.path)
            elif isinstance(effect, Listing):
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
                self._index(effect.path, effect.content, wrote=True)
            else:
                self._index(effect.path, self._edited(effect), wrote=True)

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
        if not isinstance(last, ToolResult) or not self.ids.known(last.toolcall_id):
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
        call = self.ids.call(last.toolcall_id)
        assert call is not None
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

    def _index(self, path: str, content: str | None, *, wrote: bool = False) -> list[str]:
        """Index a file with known content, or from its source when the content is unknown;
        a source that cannot be read leaves the tool call alone. ``wrote``: the agent wrote or
        edited it (a rollback restores such files)."""
        try:
            result = self.service.index_file(self.session_id, path, content, wrote=wrote)
            return [result.object_id]
        except (SourceUnavailable, InvalidInput):
            return []  # store errors are not caught: they must reach the harness

    def _view(self, path: str) -> None:
        """A partial view: the whole file from its source when it can be read (a host file: it
        becomes current and tracked), else a discovery stub, so the view names an object of the
        session either way (decision 0020). The hits of a search over many files are left to
        its listing: they are discovered, not read."""
        try:
            self.service.view_file(self.session_id, path)
        except (SourceUnavailable, InvalidInput):
            self.service.discover(self.session_id, [path], strict=False)

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


class _UniqueIds:
    """In one list, the calls of one assistant message have distinct ids, and a call id is
    answered at most once between two assistant messages that request it (a harness may give a
    new call an id it used before: a result answers the latest call with its id).

    The last list that passed and the state at its end are kept: a list that begins with the
    same message objects (a harness that keeps its parsed messages, as the proxy does) is checked
    from there on."""

    def __init__(self) -> None:
        self._last: list[Message] = []
        self._answered: dict[str, bool] = {}

    def check(self, messages: Sequence[Message]) -> None:
        """Raises :class:`MalformedMessage` for the first message that breaks the rule."""
        n = len(self._last)
        if n and len(messages) >= n and all(map(operator.is_, messages, self._last)):
            start, answered = n, dict(self._answered)
        else:
            start, answered = 0, {}
        _check_unique(messages[start:], answered)
        self._last, self._answered = list(messages), answered


def _check_unique(messages: Sequence[Message], answered: dict[str, bool]) -> None:
    """The rule of :class:`_UniqueIds` over ``messages``, from the state ``answered`` (call id →
    answered since the latest call with it), which it updates."""
    for message in messages:
        if message.tool_calls:
            ids = [call.id for call in message.tool_calls]
            if len(set(ids)) != len(ids):
                reused = next(i for i in ids if ids.count(i) > 1)
                raise MalformedMessage(
                    message.index, f"tool call id {reused!r} is used twice in one message"
                )
            answered.update(dict.fromkeys(ids, False))
        elif message.role == "tool":
            call_id = message.tool_call_id or ""
            if answered.get(call_id):
                raise MalformedMessage(message.index, f"a second result for tool call {call_id!r}")
            answered[call_id] = True


def _failed(output: str) -> bool:
    """The output carries a non-zero exit code (mini-swe-agent's ``<returncode>``, also on a cut
    output; OpenHands' ``[Command finished with exit code N]``)."""
    head = output[:40]
    if head.startswith("<returncode>"):
        return not head.startswith("<returncode>0</returncode>")
    return unwrap_output(output)[1] not in (None, 0)
