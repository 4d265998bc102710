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

import itertools
import operator
import posixpath
from collections.abc import Callable, Mapping, Sequence

import attrs

from selfctx.adapters.harness.cursor import SYSTEM_MARK, Cursor, Planned
from selfctx.adapters.harness.ids import CallIds
from selfctx.adapters.harness.messages import Message
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
from selfctx.application.ports.store import Document, StoreError
from selfctx.application.runner import BatchProgress
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
    digest: str = attrs.field(default="", eq=False)
    """The digest of the list as given: what the next call names to append to it (not part of
    equality: it names a list, not what was recorded)."""
    redone: bool = attrs.field(default=False, eq=False)
    """Its commit was refused and its messages recorded again on what another writer left
    (``BatchProgress.redone``): what ``before_commit`` read may differ from what is stored."""


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
        self._last: list[Message] = []
        """The last whole list :meth:`ingest` was given (its messages, by identity)."""
        self._lead = 0
        """How many system messages led the last list given whole."""
        self.inline = service.state(session_id).policy.inline_layout
        self._finish_interrupted()

    def _new_cursor(self) -> Cursor:
        cursor = Cursor(self.session_id, self.service.settings.max_output_bytes)
        cursor.restore(self.service.state(self.session_id).turns)
        return cursor

    @property
    def ids(self) -> CallIds:
        """The session's tool calls: the harness's ids and the object ids they are stored as."""
        return self.cursor.ids

    @property
    def lead(self) -> int:
        """How many system messages led the last list given from its start (its prompt)."""
        return self._lead

    def needs_whole(self, start: int, tail: Sequence[Message]) -> bool:
        """Whether a list whose first ``start`` messages are unchanged must still be given from
        its start: its leading system messages (the prompt, whose text is all of them) changed or
        grew."""
        if start == 0:
            return False
        return start < self._lead or (
            start == self._lead and bool(tail) and tail[0].role == "system"
        )

    @property
    def total(self) -> int:
        """Messages recorded over the session's life."""
        return self.cursor.total

    def _refuse_taken_ids(
        self, calls: Sequence[ToolCallRequest], known: Mapping[str, Document | None]
    ) -> None:
        """Object ids are digests no other session produces; should one be held all the same,
        the list's transaction is refused (each new call's document must not exist yet), and
        this names the id before anything of the list is recorded. ``known``: what the refusal
        said is stored (read only where it did not say, decision 0112)."""
        taken = self.service.taken_ids(self.session_id, [c.id for c in calls], known)
        if taken:
            raise DuplicateObject(taken[0], "another object already has this id")

    # -- recording -------------------------------------------------------------------------

    def ingest(
        self, messages: Sequence[Message], *, before_commit: Callable[[], None] | None = None
    ) -> IngestResult:
        """Record what is new in ``messages`` (the harness's whole list, parsed).

        A list that begins with the very message objects of the last one (a harness that keeps
        its parsed messages, as the proxy does) is planned from where they end: only its new
        messages are looked at. See :meth:`ingest_from`."""
        last = self._last
        start = 0
        n = len(last)
        if n and len(messages) >= n and all(map(operator.is_, messages, last)):
            start = n
        elif n:
            start = sum(1 for _ in itertools.takewhile(bool, map(operator.is_, messages, last)))
        if self.needs_whole(start, messages[start:]):
            start = 0
        self._last = []
        result = self.ingest_from(start, messages[start:], before_commit=before_commit)
        self._last = list(messages)
        return result

    def ingest_from(
        self,
        start: int,
        messages: Sequence[Message],
        *,
        before_commit: Callable[[], None] | None = None,
    ) -> IngestResult:
        """Record what is new in a list whose first ``start`` messages are those of the list
        last given (not given again: the harness sent them unchanged) and whose others are
        ``messages``. The list's leading system messages are its system prompt; the rest is the
        chat, which the cursor compares with what it last saw.

        The list is checked before anything is recorded. If recording fails in the store,
        the error is raised and the next call first catches up with the store and rebuilds what
        it knows from the stored chat: a commit whose answer was lost is then known, and nothing
        is recorded twice (the next call must then give the whole list: ``start`` 0)."""
        lead = 0
        if start == 0:
            while lead < len(messages) and messages[lead].role == "system":
                lead += 1
            chat_start, chat = 0, messages[lead:]
        else:
            chat_start, chat = start - self._lead, messages
        prompt = messages[:lead] if start == 0 else None
        return self.ingest_chat(chat_start, chat, prompt=prompt, before_commit=before_commit)

    def ingest_chat(
        self,
        start: int,
        messages: Sequence[Message],
        *,
        prompt: Sequence[Message] | None = None,
        before_commit: Callable[[], None] | None = None,
    ) -> IngestResult:
        """Record what is new in a chat (a list without its leading system messages) whose
        first ``start`` messages are the cursor's (the append form names them by their digest)
        and whose others are ``messages``; ``prompt``, the list's leading system messages, when
        the list was given from its start (their text becomes the system prompt).

        ``before_commit`` is called once all of it is recorded and before it is committed, in
        the same transaction (decision 0078): what it reads is the session with these messages,
        what it records is committed with them. The proxy builds the managed request there and
        sends it while the commit is made. Should the commit be refused, the result's
        ``redone`` says so."""
        if self._resync:
            self.service.refresh(self.session_id)
            self.cursor = self._new_cursor()
            self._resync = False
            self._last = []
        if not 0 <= start <= len(self.cursor.view):
            raise InvalidInput(
                "start", start, f"the chat last seen has {len(self.cursor.view)} messages"
            )
        plan = self.cursor.plan(messages, start)
        calls = [c for item in plan.new for c in item.calls]
        progress = BatchProgress()
        try:
            # One transaction for all of it (decision 0077). Its preconditions refuse a call id
            # some other object holds; only then is the store asked which (decision 0080).
            refused = (lambda known: self._refuse_taken_ids(calls, known)) if calls else None
            with self.service.batch(self.session_id, refused) as progress:
                if prompt is not None:
                    self._lead = len(prompt)
                    if prompt:
                        text = "\n\n".join(m.text for m in prompt)
                        self.service.set_system_prompt(self.session_id, text)
                for item in plan.new:
                    self._record(item)
                    self.cursor.recorded_one(item)
                    progress.done += 1
                if before_commit is not None:
                    before_commit()
        except StoreError:
            self._resync = True
            raise
        finally:
            # Recorded but not committed (the store failed): not consumed, and the cursor is
            # rebuilt from the store on the next call.
            consumed = progress.committed
            self.cursor.total -= progress.done - consumed
            self.cursor.settle(plan, consumed)
        return IngestResult(
            consumed=consumed,
            diverged=plan.diverged,
            total=self.total,
            digest=self.cursor.digest(plan.end),
            redone=progress.redone,
        )

    def digest(self) -> str:
        """The digest of the chat the cursor holds (what an append names: ``Cursor.digest``)."""
        return self.cursor.digest()

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
                views += [v for i in self._ids([effect.path]) if (v := _view(i, effect.ranges))]
            elif isinstance(effect, FileWrite | FileEdit) and self._allowed(effect.path):
                views += [FileView(i, "change") for i in self._ids([effect.path])]
            elif isinstance(effect, Listing):
                listings.append([p for p in effect.paths if self._allowed(p)])
        context = called_context_tool(call.name, args, self.tool_prefix)
        # Under the inline layouts the answer of activate is where the object shows (decision
        # 0008); under the ssot policy's layout the object itself is active, and its answer says so.
        activated = (
            self.inline and context is not None and context[0] == "activate" and status == "ok"
        )
        shown = self._activated_file(context[1]) if activated and context is not None else None
        if shown is not None:  # the answer of activate(file) shows the whole file
            views.append(FileView(shown, "read"))
            read_ids.append(shown)
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
            args=call.arguments,  # the chat's frozen map, shared with the object (decision 0092)
            output=message.text,
            status=status,
            file_refs=refs or None,
            # ssot: a read file is active instead (decision 0006); inline: the read's message is
            # where the file's content shows, so the tool call itself stays visible.
            activate=not read_ids or self.inline,
            images=message.images,
            file_views=views or None,
        )
        if activated:
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

    def _activated_file(self, ref: object) -> str | None:
        """The file an ``activate`` call named (an id or a ``#n`` handle), or None."""
        if not isinstance(ref, str):
            return None
        try:
            obj = self.service.object(self.session_id, self.ids.resolve(ref))
        except SelfContextError:
            return None
        return obj.id if isinstance(obj, FileObject) else None

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


def _view(file_id: str, ranges: tuple[tuple[int, int], ...]) -> FileView | None:
    """A lines view, or None for ranges that are not line numbers: recognition names views or
    nothing, and never stops a message list from being recorded."""
    try:
        return FileView(file_id, "lines", ranges)
    except InvalidInput:
        return None


def _failed(output: str) -> bool:
    """The output carries a non-zero exit code (mini-swe-agent's ``<returncode>``, also on a cut
    output; OpenHands' ``[Command finished with exit code N]``)."""
    head = output[:40]
    if head.startswith("<returncode>"):
        return not head.startswith("<returncode>0</returncode>")
    return unwrap_output(output)[1] not in (None, 0)
