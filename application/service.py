"""``ContextService``: the facade a harness embeds.

One service serves many sessions; each public method names the session it acts on. Calls on one
session are serialised by that session's lock (a watcher thread and the agent loop may call at
once); different sessions proceed independently. Every method either completes and is durable, or
raises a :class:`~selfctx.domain.errors.SelfContextError` and changes nothing.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from selfctx.application.budget import TokenBudget, token_budget
from selfctx.application.cache_budget import ENTRY_BYTES
from selfctx.application.policies import as_policy
from selfctx.application.ports.clock import Clock
from selfctx.application.ports.files import FileReader, FileRestorer
from selfctx.application.ports.ids import IdSource
from selfctx.application.ports.search import (
    Encounter,
    SearchHit,
    SearchIndex,
    SearchQuery,
    SearchUnavailable,
)
from selfctx.application.ports.store import Document, ObjectStore, Version
from selfctx.application.ports.summarizer import Summarizer, SummarizerError
from selfctx.application.ports.tokenizer import Tokenizer
from selfctx.application.ports.tracking import SourceTracker
from selfctx.application.requests import RequestFacts, RequestRecord, RequestRecords
from selfctx.application.runner import BatchProgress, OpenSession, Refused, SessionRunner
from selfctx.application.settings import Settings
from selfctx.application.usecases.assemble import AssembleContext, foreseen_collapses
from selfctx.application.usecases.base import Deps
from selfctx.application.usecases.chat import RecordToolCall, RecordTurn
from selfctx.application.usecases.checkpoints import (
    CheckpointInfo,
    CreateCheckpoint,
    ListCheckpoints,
    Mode,
    RollbackReport,
    RollbackSession,
)
from selfctx.application.usecases.collapse_order import CollapseRecord
from selfctx.application.usecases.compaction import CompactChat, CompactionReport
from selfctx.application.usecases.context import ActionResult, Activate, Deactivate, Pin, Unpin
from selfctx.application.usecases.files import (
    Discover,
    DiscoverReport,
    IndexFile,
    IndexFiles,
    IndexResult,
    resolve,
)
from selfctx.application.usecases.requests import ListRequests, RecordRequest
from selfctx.application.usecases.search import SearchHistory
from selfctx.application.usecases.sessions import (
    PastContext,
    PastState,
    ResumeReport,
    ResumeSession,
    SetSystemPrompt,
    StartSession,
    StateAt,
    validate_session_id,
)
from selfctx.application.usecases.tracking import RefreshReport, TrackSources
from selfctx.domain.chat import ToolCallRequest, thaw_json
from selfctx.domain.documents import from_document
from selfctx.domain.errors import InvalidInput, SessionNotFound, UnknownObject
from selfctx.domain.infrastructure import MemoryShelf, TextShelf
from selfctx.domain.inline import render_inline
from selfctx.domain.mounts import MountTable
from selfctx.domain.objects import (
    ContentObject,
    FileObject,
    FileView,
    SystemPromptObject,
    ToolcallObject,
    ToolStatus,
)
from selfctx.domain.rendering import AssembledContext, render_context, render_turn
from selfctx.domain.session.state import CollapseWindow, PolicyConfig, SessionState

__all__ = ["ContextService"]


_HANDLE = re.compile(r"#[0-9]+")
"""A ``#n`` handle (ASCII digits only: ``str.isdigit`` also takes ``²``, which ``int`` refuses)."""


class ContextService:
    """Everything a harness does with the context manager, by session id."""

    def __init__(
        self,
        *,
        store: ObjectStore,
        clock: Clock,
        ids: IdSource,
        files: FileReader,
        mounts: MountTable,
        tokenizer: Tokenizer,
        settings: Settings | None = None,
        tracker: SourceTracker | None = None,
        search: SearchIndex | None = None,
        restorer: FileRestorer | None = None,
        summarizer: Summarizer | None = None,
        fallback_summarizer: Summarizer | None = None,
        shelf: Callable[[], TextShelf] = MemoryShelf,
    ) -> None:
        """``shelf``: where each session's chat text written in its last snapshot is kept
        until the next (decision 0143; memory unless an adapter gives a file)."""
        self.store = store
        self.tracker = tracker
        """Watches the files open sessions have read (None: no watching; ``rehash`` still works).
        Its ``failures()`` lists every error raised on its thread."""
        self.settings = settings or Settings()
        self.mounts = mounts
        runner = SessionRunner(
            store,
            clock,
            ids,
            content_budget=self.settings.content_budget,
            metadata_budget=self.settings.metadata_budget,
            shelf=shelf,
        )
        deps = Deps(runner=runner, files=files, mounts=mounts, settings=self.settings)
        self._deps = deps
        self._runner = runner
        self._sessions: dict[str, OpenSession] = {}
        self._guard = threading.Lock()
        self._start = StartSession(deps)
        self._resume = ResumeSession(deps)
        self._state_at = StateAt(deps)
        self._set_prompt = SetSystemPrompt(deps)
        self._index_file = IndexFile(deps)
        self._index_files = IndexFiles(deps)
        self._discover = Discover(deps)
        self._turn = RecordTurn(deps)
        self._toolcall = RecordToolCall(deps)
        self._activate = Activate(deps)
        self._deactivate = Deactivate(deps)
        self._pin = Pin(deps)
        self._unpin = Unpin(deps)
        self.tokenizer = tokenizer
        """Counts tokens for budgets and reports."""
        tokenizer.bound_memo(self.settings.caches.tokenizer_memo)  # its share (decision 0169)
        compact = None
        if summarizer is not None:
            compact = CompactChat(deps, summarizer, fallback_summarizer or summarizer)
        self._compact = compact
        self._assemble = AssembleContext(deps, tokenizer, compact)
        self._tracking = TrackSources(deps, tracker, self._open_sessions)
        self._search = SearchHistory(store, search) if search is not None else None
        if restorer is None and isinstance(files, FileRestorer):
            restorer = files  # the host reader writes back under the same roots
        self._checkpoint = CreateCheckpoint(deps)
        self._checkpoints = ListCheckpoints(deps)
        self._rollback = RollbackSession(deps, restorer)
        self._record_request = RecordRequest(deps)
        self._requests = ListRequests(deps)
        if tracker is not None:
            tracker.start(self._tracking.on_changes)

    # -- sessions -------------------------------------------------------------------------

    def start_session(
        self,
        session_id: str,
        system_prompt: str = "",
        *,
        window: CollapseWindow | None = None,
        policy: PolicyConfig | str | None = None,
    ) -> None:
        """Create a new session. Raises SessionExists if the id is taken (resume it instead).
        ``policy`` chooses its layout and collapse policy, by name or as a :class:`PolicyConfig`
        (default: the service's settings); an unknown one is refused with ``UnknownPolicy``."""
        chosen = None if policy is None else as_policy(policy)
        session = self._start(session_id, system_prompt, window, chosen)
        with self._guard:
            self._sessions[session_id] = session

    def resume_session(self, session_id: str) -> ResumeReport:
        """Load a stored session, restore its sets and reconcile its files with their sources."""
        session, report = self._resume(session_id)
        with self._guard:
            self._sessions[session_id] = session
        self._tracking.track(session)  # re-establish watchers (docs/specification.md §2, lifecycle)
        return report

    def open_session(
        self,
        session_id: str,
        system_prompt: str = "",
        *,
        policy: PolicyConfig | str | None = None,
    ) -> ResumeReport | None:
        """Start the session if it is new, resume it otherwise (None when it was started; a
        resumed session keeps the policy it was started with)."""
        validate_session_id(session_id)
        policy = None if policy is None else as_policy(policy)
        if self._runner.exists(session_id):
            return self.resume_session(session_id)
        self.start_session(session_id, system_prompt, policy=policy)
        return None

    def close_session(self, session_id: str) -> None:
        """Forget the in-memory copy; everything is already stored."""
        with self._guard:
            session = self._sessions.pop(session_id, None)
        if session is not None:
            self._tracking.release(session)
        self._record_request.forget(session_id)

    def close(self) -> None:
        """Stop tracking (changes already seen are still written). Sessions stay stored."""
        if self.tracker is not None:
            self.tracker.close()
        self._tracking.close()
        if self._search is not None:
            self._search.close()

    def rehash(self, session_id: str) -> RefreshReport:
        """Re-read every file the session has read and write new versions for what changed
        (or was deleted) while nobody watched: what the watcher may have missed."""
        return self._tracking.rehash(self._open(session_id))

    def _open_sessions(self) -> list[OpenSession]:
        with self._guard:
            return list(self._sessions.values())

    def sessions(self) -> list[str]:
        """Ids of every session in the store."""
        prefix = "session:"
        return [i[len(prefix) :] for i in self.store.ids_of_type("session")]

    def _open(self, session_id: str) -> OpenSession:
        with self._guard:
            session = self._sessions.get(session_id)
        if session is None:
            validate_session_id(session_id)
            raise SessionNotFound(session_id)
        return session

    # -- what the harness reports ---------------------------------------------------------

    def set_system_prompt(self, session_id: str, text: str) -> bool:
        """Replace the system prompt; True if it changed (a new version was written)."""
        session = self._open(session_id)
        with session.lock:
            return self._set_prompt(session, text)

    def object_id_for(self, path: str) -> str:
        """The id of the file object an agent-visible path names (whether or not it exists)."""
        return FileObject.identity_of(resolve(self._deps, path))

    def index_file(
        self,
        session_id: str,
        path: str,
        content: str | bytes | None = None,
        *,
        wrote: bool = False,
    ) -> IndexResult:
        """The agent read a file (``content`` is what it read; None reads it from the source).
        ``wrote``: the agent itself just wrote or edited it (what a rollback can restore)."""
        session = self._open(session_id)
        with session.lock:
            result = self._index_file(session, path, content, wrote=wrote)
            self._tracking.track(session, [result.object_id])
            return result

    def view_file(self, session_id: str, path: str) -> IndexResult:
        """The agent saw some lines of a file: the whole file is read from its source and
        indexed (a new version if it changed), joining the index and pool but not the active set
        (decision 0020). Raises as :meth:`index_file` does when the source cannot be read."""
        session = self._open(session_id)
        with session.lock:
            result = self._index_file(session, path, None, view=True)
            self._tracking.track(session, [result.object_id])
            return result

    def index_files(self, session_id: str, paths: Sequence[str]) -> tuple[IndexResult, ...]:
        """The agent read many files at once (say, a harness loading a source tree): each is
        indexed as :meth:`index_file` would index it, read from its source, but they are committed
        in batches (one transaction and one log entry per batch), not one at a time."""
        session = self._open(session_id)
        with session.lock:
            results = self._index_files(session, paths)
            self._tracking.track(session, [result.object_id for result in results])
            return results

    def discover(
        self, session_id: str, paths: Iterable[str], *, strict: bool = True
    ) -> DiscoverReport:
        """Paths seen in tool output: stubs into the index and metadata pool."""
        session = self._open(session_id)
        with session.lock:
            report = self._discover(session, paths, strict=strict)
            self._tracking.track(session, [found.object_id for found in report.found])
            return report

    def record_user_message(
        self, session_id: str, text: str, images: Sequence[Mapping[str, Any]] = ()
    ) -> None:
        """A user message (and the images that came with it): it begins a new turn."""
        session = self._open(session_id)
        with session.lock:
            self._turn.user(session, text, images)

    def record_assistant_message(
        self,
        session_id: str,
        text: str,
        tool_calls: Sequence[ToolCallRequest] = (),
        *,
        reasoning: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        """A model message with the tool calls it requested (and the provider's reasoning blocks,
        kept opaque: see ``AssistantMessage.reasoning``)."""
        session = self._open(session_id)
        with session.lock:
            self._turn.assistant(session, text, tool_calls, reasoning=reasoning)

    def record_tool_call(
        self,
        session_id: str,
        toolcall_id: str,
        *,
        tool: str,
        args: Mapping[str, Any],
        output: str | None,
        status: ToolStatus = "ok",
        args_display: str | None = None,
        file_refs: Sequence[str] | None = None,
        activate: bool = True,
        images: Sequence[Mapping[str, Any]] = (),
        file_views: Sequence[FileView] | None = None,
    ) -> str:
        """A tool's result: a toolcall object, auto-activated unless ``activate`` is False (a
        whole-file read whose file object is active instead). Images the tool returned are kept
        in the chat beside it and shown with its output. ``file_views`` say what it showed of
        which files, or that it changed them (decision 0020). Returns its id."""
        session = self._open(session_id)
        with session.lock:
            return self._toolcall(
                session,
                toolcall_id,
                tool=tool,
                args=args,
                output=output,
                status=status,
                args_display=args_display,
                file_refs=file_refs,
                activate=activate,
                images=images,
                file_views=file_views,
            ).id

    # -- the agent's context tools ----------------------------------------------------------

    def activate(self, session_id: str, object_id: str) -> ActionResult:
        """Load an object's full content into the context."""
        session = self._open(session_id)
        object_id = self._resolve(session, object_id)
        with session.lock:
            result = self._activate(session, object_id)
            self._tracking.track(session, [object_id])
            return result

    def deactivate(self, session_id: str, object_id: str) -> ActionResult:
        """Collapse an object to its metadata line."""
        session = self._open(session_id)
        object_id = self._resolve(session, object_id)
        with session.lock:
            return self._deactivate(session, object_id)

    def pin(self, session_id: str, object_id: str) -> ActionResult:
        """Exempt an object from auto-collapse."""
        session = self._open(session_id)
        object_id = self._resolve(session, object_id)
        with session.lock:
            return self._pin(session, object_id)

    def unpin(self, session_id: str, object_id: str) -> ActionResult:
        """Let auto-collapse apply to an object again."""
        session = self._open(session_id)
        object_id = self._resolve(session, object_id)
        with session.lock:
            return self._unpin(session, object_id)

    # -- reading --------------------------------------------------------------------------

    def assemble(self, session_id: str) -> AssembledContext:
        """The context the model sees now (with the versions other clients wrote of its files
        since the last one: decision 0066)."""
        session = self._open(session_id)
        with session.lock:
            self._tracking.learn(session)
            return self._assemble(session)

    def prepare(self, session_id: str) -> AssembledContext:
        """The context the model would see now, rendered, counted and looked at as the next
        :meth:`assemble` would (which then does again only what changed since), deciding and
        recording nothing: what a resumed session does once, so that its first assembly costs
        what an ordinary one does (decision 0110)."""
        session = self._open(session_id)
        with session.lock:
            return self._assemble.prepare(session)

    def look_ahead(self, session_id: str, *, wait: bool = True) -> bool:
        """Start, in the background, the store read the session's next :meth:`assemble` makes
        (the file versions other clients wrote since: decision 0066), so that it overlaps the
        caller's work before it (an ingest, say; decision 0089). A no-op on a store whose reads
        are this process's own work. Without ``wait``, nothing is done if another thread holds
        the session (an event loop's caller, which must not block: decision 0126); returns
        whether it was done."""
        session = self._open(session_id)
        if not session.lock.acquire(blocking=wait):
            return False
        try:
            self._tracking.look_ahead(session)
        finally:
            session.lock.release()
        return True

    def compact(self, session_id: str) -> CompactionReport | None:
        """Compact the chat's older turns now, whatever the trigger and however little it saves
        (seed 002's forced summarisation): the turns before the verbatim window, or before a
        confident topic boundary. None when there is nothing to compact. Raises SummarizerError
        only if no summarizer is configured at all (a failing one falls back to the extractive
        one)."""
        session = self._open(session_id)
        if self._compact is None:
            raise SummarizerError("this service was built without a summarizer")
        with session.lock:
            return self._compact(session, self.tokenizer.count, force=True)

    def budget(self, session_id: str) -> TokenBudget:
        """Seed 001's token-budget report for the context the model sees now: the chat's tokens
        against its share, the prompt against the model's input limit, and whether the chat
        needs compacting."""
        session = self._open(session_id)
        with session.lock:
            self._tracking.learn(session)
            return self._assemble.budget(session)

    def budget_of(self, context: AssembledContext, policy: PolicyConfig) -> TokenBudget:
        """The same report for any context (a past one, say), counted by this service."""
        return token_budget(context, policy, self.tokenizer.count)

    @staticmethod
    def _resolve(session: OpenSession, ref: str) -> str:
        """An object id from an id or a handle ``#n`` (the n-th object of the session index)."""
        if isinstance(ref, str) and _HANDLE.fullmatch(ref):
            digits = ref[1:].lstrip("0")
            index = session.state.index
            # Compared as text first: int() refuses numbers over 4,300 digits.
            if digits and len(digits) <= len(str(len(index))) and int(digits) <= len(index):
                return str(index[int(digits) - 1])
            raise UnknownObject(ref, session.session_id)
        return ref

    def turns_text(self, session_id: str, first: int, last: int) -> str:
        """Turns ``first`` to ``last`` of the session's chat, verbatim (compacted or not), as
        the ssot layout renders them: what ``activate("summary")`` answers with."""
        session = self._open(session_id)
        turns = session.state.turns
        if not 0 <= first <= last < len(turns):
            raise InvalidInput("turns", (first, last), f"the chat has turns 0 to {len(turns) - 1}")
        lines = []
        for turn in turns[first : last + 1]:
            for message in render_turn(turn, session.objects):
                body = message.text
                for call in message.tool_calls:
                    shown = json.dumps(thaw_json(call.arguments), ensure_ascii=False)
                    body += f"\n-> {call.name} {shown}"
                lines.append(f"[turn {turn.number} {message.role}] {body}")
        return "\n".join(lines)

    def prompt_tokens(self, session_id: str, context: AssembledContext) -> int:
        """Size of an assembled context in tokens, by the service's tokenizer."""
        return self._assemble.tokens(self._open(session_id), context)

    def foreseen(self, session_id: str) -> frozenset[str] | None:
        """The active tool outputs the last assembly expects the next request to collapse
        (None: the session's policy makes no such forecast). Whoever places a provider's cache
        marks needs it: a mark after an output about to collapse is never read."""
        session = self._open(session_id)
        with session.lock:
            return foreseen_collapses(session, self._assemble.counter(session))

    @contextmanager
    def batch(self, session_id: str, refused: Refused | None = None) -> Iterator[BatchProgress]:
        """What is recorded in the session inside this block is committed together, in one
        transaction when it ends (``SessionRunner.batch``, decision 0077): one request's
        messages, calls, reads and edits cost one commit. Other threads wait for the session
        until the block ends. ``refused`` is called if the store refuses the transaction,
        with what the refusal said is stored (decision 0112), before its commands are
        decided again (in one transaction, decision 0118); when it raises, nothing of the
        block is recorded."""
        session = self._open(session_id)
        with session.lock, self._runner.batch(session, refused) as progress:
            yield progress

    def refresh(self, session_id: str) -> bool:
        """Fold whatever other writers (or a commit whose answer was lost) appended to the
        session's log since this service last wrote; True if there was anything."""
        session = self._open(session_id)
        with session.lock:
            return self._runner.catch_up(session)

    def taken_ids(
        self,
        session_id: str,
        object_ids: Iterable[str],
        known: Mapping[str, Document | None] | None = None,
    ) -> list[str]:
        """Of ``object_ids``, those another object already has in the store (outside this
        session): a tool call may not take them (one store query, for the ids ``known`` does
        not answer: what a refusal said is stored, None for absent, decision 0112)."""
        state = self._open(session_id).state
        known = known or {}
        candidates = [i for i in dict.fromkeys(object_ids) if not state.in_index(i)]
        unknown = [i for i in candidates if i not in known]
        found = self.store.get_many(unknown) if unknown else {}
        return [i for i in candidates if i in found or known.get(i) is not None]

    def system_prompt(self, session_id: str) -> str:
        """The session's current system prompt, as the harness gave it."""
        return self._open(session_id).system_prompt.content

    def state(self, session_id: str) -> SessionState:
        """The session's current state (immutable)."""
        return self._open(session_id).state

    def why_collapsed(self, session_id: str, object_id: str) -> CollapseRecord | None:
        """Why assembly collapsed an output, when this process did among its latest
        ``COLLAPSE_RECORDS`` collapses (None: it did not, the agent did, or the record was let
        go: decision 0152): the rule, the output's tier and whether it showed the working set
        then."""
        session = self._open(session_id)
        return session.collapses.get(self._resolve(session, object_id))

    def log_position(self, session_id: str) -> int:
        """How many commands the session has recorded."""
        return self._open(session_id).seq

    def cached_chars(self, session_id: str) -> int:
        """Characters of object content the session holds in memory (at most the settings'
        ``content_budget``; the rest is in the store)."""
        return self._open(session_id).objects.chars

    def cache_bytes(self, session_id: str) -> dict[str, int]:
        """Bytes each cache of the session holds, as the cache budget counts them (decision
        0169: content by its characters, the others by entries at their measured size); the
        tokenizer's memo is the process's."""
        session = self._open(session_id)
        sizes = ENTRY_BYTES
        return {
            "content": session.objects.chars,
            "metadata": session.objects.warm_calls * sizes["metadata"],
            "token_counts": len(session.token_cache) * sizes["token_counts"],
            "known_names": len(session.relevance_memo.known) * sizes["known_names"],
            "tokenizer_memo": self.tokenizer.memo_entries * sizes["tokenizer_memo"],
        }

    def object(self, session_id: str, object_id: str) -> ContentObject:
        """The latest version of one of this session's objects (an id or a ``#n`` handle)."""
        session = self._open(session_id)
        obj = session.objects.get(self._resolve(session, object_id))
        if obj is None:
            raise UnknownObject(object_id, session_id)
        return obj

    def open_objects(self, session_id: str) -> dict[str, ContentObject]:
        """The latest version of every object of a session this service holds open (a copy).
        Raises SessionNotFound when it does not hold it open."""
        session = self._open(session_id)
        with session.lock:
            return dict(session.objects)

    def state_at(
        self,
        session_id: str,
        seq: int,
        *,
        on_snapshot: Callable[[SessionState], None] | None = None,
        on_toolcalls: Callable[[Sequence[str]], None] | None = None,
    ) -> PastState:
        """The session as it was right after its ``seq``-th command, rebuilt from the store
        (``on_snapshot``: called with the stored snapshot it starts from, before the commands
        after it are applied, so that a caller may read that state's objects meanwhile;
        ``on_toolcalls``: called earlier still, with the snapshot's tool calls as soon as its
        documents are read, before its state is built)."""
        return self._state_at(
            validate_session_id(session_id), seq, on_snapshot, on_toolcalls=on_toolcalls
        )

    def context_at(
        self, session_id: str, seq: int, *, tx_id: int | None = None
    ) -> AssembledContext:
        """The exact context as it was right after the ``seq``-th command; with ``tx_id``, its
        objects as they were right after that later transaction (a file a watcher changed
        meanwhile), as for a request recorded then (``requests``)."""
        return self.past_context(session_id, seq, tx_id=tx_id).context

    def past_context(self, session_id: str, seq: int, *, tx_id: int | None = None) -> PastContext:
        """:meth:`context_at` with the state and the object versions it was rendered from."""
        past = self.state_at(session_id, seq)
        as_of = past.tx_id if tx_id is None else max(tx_id, past.tx_id)
        prompt_id = past.state.system_prompt_id
        docs = self.store.get_many_as_of([*past.state.index, prompt_id], as_of)
        prompt_doc = docs.pop(prompt_id, None)
        objects: dict[str, FileObject | ToolcallObject] = {}
        for object_id, doc in docs.items():
            obj = from_document(doc)
            assert isinstance(obj, FileObject | ToolcallObject)
            objects[object_id] = obj
        prompt = from_document(prompt_doc) if prompt_doc is not None else None
        text = prompt.content if isinstance(prompt, SystemPromptObject) else ""
        if past.state.policy.inline_layout:
            context = render_inline(past.state, objects, text, self.mounts.display_path)
        else:
            context = render_context(past.state, objects, text, self.mounts.display_path)
        return PastContext(past.state, seq, as_of, objects, context)

    def history(self, object_id: str) -> list[Version]:
        """Every stored version of an object, oldest first."""
        return self.store.history(object_id)

    # -- model requests -------------------------------------------------------------------

    def record_request(
        self, session_id: str, context: AssembledContext, facts: RequestFacts | None = None
    ) -> RequestRecord:
        """Record that ``context`` (just assembled) is being sent to the model: its size by
        part, the prefix it shares with the session's previous request, a digest, and what the
        caller knows (``facts``: client, model, the naive request). One small commit; the
        context itself is rebuilt from the log when asked for (``context_at``). Inside a
        :meth:`batch` of the session the record is part of the batch's transaction instead: it
        is written when the batch commits, and not at all when the store refuses that
        transaction (the batch's progress says ``redone``; decision 0089)."""
        session = self._open(session_id)
        with session.lock:
            count = self._assemble.counter(session)
            return self._record_request(session, context, facts or RequestFacts(), count)

    def requests(self, session_id: str) -> list[RequestRecord]:
        """Every recorded request of a stored session, oldest first."""
        return self._requests(validate_session_id(session_id))

    def request_records(self, session_id: str) -> RequestRecords:
        """:meth:`requests` as a sequence that decodes each record when it is first read (a
        reader of a few records of a long session does not pay for all of them)."""
        return self._requests.lazily(validate_session_id(session_id))

    def latest_requests(self, session_ids: Iterable[str]) -> dict[str, RequestRecord]:
        """The latest recorded request of each of these sessions that has any."""
        return self._requests.latest(session_ids)

    # -- checkpoints and rollback -------------------------------------------------------------

    def checkpoint(self, session_id: str, label: str | None = None) -> CheckpointInfo:
        """Mark the session as it is now (``label`` default: ``checkpoint-N``), to roll back to.
        Raises DuplicateCheckpoint for a label the session already has."""
        session = self._open(session_id)
        with session.lock:
            return self._checkpoint(session, label)

    def checkpoints(self, session_id: str) -> list[CheckpointInfo]:
        """Every checkpoint of a stored session (open or not), oldest first."""
        return self._checkpoints(validate_session_id(session_id))

    def rollback(
        self,
        session_id: str,
        to: str,
        *,
        mode: Mode = "conversation",
        dry_run: bool = False,
    ) -> RollbackReport:
        """Go back to checkpoint ``to``: the sets and chat as they were (``conversation``), the
        files this session wrote since as they were (``files``), or ``both``. Nothing is erased;
        the session as it was before is saved as a checkpoint (``report.saved_as``), so a
        rollback can be rolled back. Files someone else changed since are refused and listed
        (``report.refused``). ``dry_run`` says what would change and changes nothing.

        A session this service has not opened is read from the store for the rollback (not
        resumed: nothing is reconciled or watched); a client holding it open catches up."""
        with self._guard:
            session = self._sessions.get(session_id)
        held = session is not None
        if session is None:
            session = self._runner.load(validate_session_id(session_id))
        with session.lock:
            report = self._rollback(session, to, mode, dry_run=dry_run)
        if held and not dry_run:
            self._tracking.track(session)
        return report

    # -- search ---------------------------------------------------------------------------

    def search(
        self,
        text: str,
        *,
        session_id: str | None = None,
        role: str | None = None,
        kind: str | None = None,
        limit: int = 20,
    ) -> list[SearchHit]:
        """Ranked hits for ``text`` (every term a case-insensitive substring) over what
        ``session_id`` has seen — its messages, its tool outputs, every version of the files in
        its index — or, with no session, over everything in the store. The index is caught up
        with the store first, so whatever was committed before the call (by any client) is
        found. Raises SearchUnavailable when the service has no search index."""
        query = SearchQuery(text, session_id=session_id, role=role, kind=kind, limit=limit)
        if session_id is not None:
            validate_session_id(session_id)
            if session_id not in self._sessions and not self._runner.exists(session_id):
                raise SessionNotFound(session_id)
        if self._search is None:
            raise SearchUnavailable("this service was built without a search index")
        return self._search(query)

    def catch_up_search(self) -> int:
        """Bring the search index up to date with the store now (what a query would do first);
        returns the transactions taken in, 0 without an index. A reader that expects queries
        calls it ahead of them, on a thread of its own, so the first query finds it done."""
        return self._search.catch_up() if self._search is not None else 0

    def sessions_with(self, object_id: str) -> list[str]:
        """The sessions that have met file ``object_id`` (read or discovered it), from the
        search index's memberships (caught up first). Raises SearchUnavailable without one."""
        if self._search is None:
            raise SearchUnavailable("this service was built without a search index")
        return self._search.sessions_of(object_id)

    def encounters(self, object_id: str) -> list[Encounter] | None:
        """How each session met ``object_id`` (first encounter, active spans), from the search
        index (caught up first); None when the index does not keep it. Raises
        SearchUnavailable without an index."""
        if self._search is None:
            raise SearchUnavailable("this service was built without a search index")
        return self._search.encounters(object_id)
