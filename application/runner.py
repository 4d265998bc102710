"""Running commands against a stored session: read, decide, commit, retry on conflict.

:class:`SessionRunner` is the one place where the pure session machine meets the store. A command
is built from fresh reads, decided, and committed as one transaction whose preconditions are the
versions it read; on a conflict the runner catches up with whatever the other writer committed and
decides again, a bounded number of times.

Within :meth:`SessionRunner.batch` the commands of one request (an ingest's messages, tool calls,
reads and edits) are decided one after another as always, each on what the ones before it
leave, but committed together, as one transaction, when the batch ends (decision 0077).
"""

from __future__ import annotations

import functools
import json
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from itertools import chain
from typing import Any, Final

import attrs

from selfctx.application.objects import CONTENT_BUDGET, METADATA_BUDGET, ObjectCache
from selfctx.application.persistence import (
    LOG_ENTRIES,
    PACK_CALLS,
    compact_json,
    decode_events,
    document_size,
    entry_events,
    entry_size,
    log_document,
    log_entry,
    log_entry_id,
    pack_id,
    snapshot_size,
    toolcall_pack,
    unpack_toolcalls,
    with_size,
    with_snapshot_size,
)
from selfctx.application.ports.clock import Clock
from selfctx.application.ports.ids import IdSource
from selfctx.application.ports.store import (
    ConflictError,
    Document,
    Expect,
    FileVersions,
    ObjectStore,
    Receipt,
    StoreError,
    Submission,
)
from selfctx.application.requests import MAX_PENDING, Mark, entry_marks
from selfctx.application.tokens import TokenCounts
from selfctx.domain.chat import AssistantMessage
from selfctx.domain.documents import (
    StoredObject,
    file_without_content,
    from_document,
    to_document,
    toolcall_without_content,
)
from selfctx.domain.errors import InvalidInput, SessionNotFound
from selfctx.domain.infrastructure import (
    ChatObject,
    MemoryShelf,
    SessionObject,
    TextShelf,
    WrittenChat,
    chat_id_for,
    session_id_for,
    state_from_snapshot,
)
from selfctx.domain.inline import InlineCache
from selfctx.domain.objects import ContentObject, FileObject, SystemPromptObject, ToolcallObject
from selfctx.domain.relevance import RelevanceMemo
from selfctx.domain.rendering import RenderCache
from selfctx.domain.session import events as e
from selfctx.domain.session.commands import Command
from selfctx.domain.session.machine import decide_and_fold, fold_many
from selfctx.domain.session.state import SessionState, members

__all__ = [
    "MAX_ATTEMPTS",
    "MAX_CONTENDED_ATTEMPTS",
    "PIPELINE_DEPTH",
    "BatchProgress",
    "Contention",
    "OpenSession",
    "Reads",
    "Rider",
    "SessionRunner",
    "as_stored",
]

MAX_ATTEMPTS: Final = 5
"""How many times a command is decided again after another writer appended to the session's own
log before the conflict is raised (one writer per session: this is a second client)."""
MAX_CONTENDED_ATTEMPTS: Final = 25
"""How many times a command is decided again while objects it read keep changing (shared files
other clients are writing versions of): each retry after the first :data:`MAX_ATTEMPTS` waits a
random while, up to :data:`MAX_BACKOFF_SECONDS`, so that writers in step fall out of step."""
MAX_BACKOFF_SECONDS: Final = 0.05


class Contention:
    """Counts the conflicts of one write and decides when to give up: soon when another writer
    appends to the same session's log, later (backing off at random) when objects it read keep
    changing. Raises the last conflict, naming what changed, when it gives up."""

    def __init__(self) -> None:
        self.attempts = 0

    def failed(self, conflict: ConflictError, *, sessions_log: bool) -> None:
        """Another attempt failed with ``conflict``; raises when there is to be no other."""
        self.attempts += 1
        limit = MAX_ATTEMPTS if sessions_log else MAX_CONTENDED_ATTEMPTS
        if self.attempts >= limit:
            raise ConflictError(conflict.object_ids, operation=f"commit ({self.attempts} tries)")
        if self.attempts >= MAX_ATTEMPTS:
            ceiling = min(MAX_BACKOFF_SECONDS, 0.002 * 2 ** (self.attempts - MAX_ATTEMPTS))
            time.sleep(random.uniform(0, ceiling))


PIPELINE_DEPTH: Final = 2
"""How many commits :meth:`SessionRunner.execute_pipelined` keeps in flight by default."""
_REWRITES: Final = (e.ChatRestored, e.ChatCompacted)
_TOOLCALL_METADATA: Final = (
    "type", "identity_hash", "tool", "args", "status", "chat_ref", "args_display", "file_refs",
    "file_views", "content_hash", "metadata_hash", "object_hash", "content_length",
)  # fmt: skip
"""Every field of a tool call's document but its content."""
_FILE_METADATA: Final = (
    "type", "source", "identity_hash", "content_hash", "metadata_hash", "object_hash",
    "file_type", "char_count", "file_hash", "content_status", "reported_by",
)  # fmt: skip
"""Every field of a file's document but its content: what a resume reads of the files of the
snapshot's index (decision 0153)."""
RECENT_OUTPUTS: Final = 8
"""The outputs of at least this many last assistant messages are read whole by the policy."""
"""Events after which the chat differs other than at its end: renderings start again."""


@attrs.frozen
class Packing:
    """The tool calls a session recorded that no pack holds yet (decision 0123): their metadata
    documents as compact JSON, from position ``at`` among the session's tool calls (in the
    index's order: a new session's first is 0)."""

    at: int = 0
    pending: tuple[str, ...] = ()

    def add(self, session_id: str, texts: Sequence[str]) -> tuple[Packing, list[Document]]:
        """This packing after tool calls recorded next (``texts``), and the packs of the
        blocks they complete."""
        if not texts:
            return self, []
        at, pending = self.at, self.pending + tuple(texts)
        packs: list[Document] = []
        while True:  # bounded: each pass takes at least one call
            end = (at // PACK_CALLS + 1) * PACK_CALLS
            if at + len(pending) < end:
                return Packing(at, pending), packs
            taken = end - at
            packs.append(toolcall_pack(session_id, at // PACK_CALLS, at, pending[:taken]))
            at, pending = end, pending[taken:]

    @classmethod
    def after(cls, state: SessionState, held: Callable[[str], Document | None]) -> Packing:
        """The packing of a session whose index is ``state``'s, the metadata of its tool calls
        after the last full block as ``held`` gives them (none known: not known)."""
        calls = [i for i in state.index if state.kinds.get(i) == "toolcall"]
        at = len(calls) // PACK_CALLS * PACK_CALLS
        texts: list[str] = []
        for object_id in calls[at:]:
            doc = held(object_id)
            if doc is None or "content_length" not in doc:  # written before metadata was apart
                return cls(len(calls))  # packing goes on from the next tool call
            texts.append(compact_json(call_metadata(doc)))
        return cls(at, tuple(texts))


def call_metadata(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A tool call's document without its content, as reading its metadata fields gives it."""
    return {k: doc[k] for k in ("xt/id", *_TOOLCALL_METADATA) if k in doc}


@attrs.define(eq=False)
class OpenSession:
    """A session as this client holds it between commands: state, position in the log, and the
    latest known version of every object in its index."""

    session_id: str
    state: SessionState
    seq: int
    """Number of log entries folded into ``state``."""
    system_prompt: SystemPromptObject
    objects: ObjectCache
    """Every object of the index: metadata always, content up to a budget (the rest is read
    again from the store when needed)."""
    snapshot_bytes: int | _Snapshot
    """Size of the last snapshot written (session plus chat document); inside a batch, a
    snapshot of the batch whose chat document is built at the commit (decision 0161)."""
    log_bytes_since_snapshot: int
    stale: bool = False
    """Set when a commit failed in a way that leaves its fate unknown: catch up before deciding."""
    loaded: dict[str, Document] = attrs.field(factory=dict)
    """The file documents loading the session read, for the first command after it (a resume
    reconciles every file: it need not read them again; a conflict makes it read afresh)."""
    versions_at: int | None = None
    """The store's transaction up to which this session has learned the versions other clients
    wrote of its files (``ObjectStore.file_versions``, decision 0066)."""
    versions_ahead: tuple[int | None, Mapping[str, str], Callable[[], FileVersions]] | None = None
    """A read of the file versions feed started ahead of the next assembly (the position it
    asks from, the files it named as held with their hashes, and its result:
    ``TrackSources.look_ahead``, decisions 0089 and 0106)."""
    lock: threading.RLock = attrs.field(factory=threading.RLock)
    render_cache: RenderCache = attrs.field(factory=RenderCache)
    """What assembly rendered last time; told about every object whose version changes."""
    inline_cache: InlineCache = attrs.field(factory=InlineCache)
    """The same for the ``inline`` layout."""
    token_cache: TokenCounts = attrs.field(factory=TokenCounts)
    """Token counts of texts this session's prompts contained."""
    context_counter: Any = None
    """Counts successive contexts incrementally (``selfctx.application.tokens.ContextCounter``)."""
    sent_before: int = 0
    """Chat messages that a request before this server had sent (a resumed session's: the
    provider's cache holds them), for the counter this server starts with."""
    relevance_memo: RelevanceMemo = attrs.field(factory=RelevanceMemo)
    """What the relevance policy learnt about the outputs between turns (decision 0021)."""
    collapses: dict[str, Any] = attrs.field(factory=dict)
    """Why assembly collapsed each output it collapsed last, in this process (``CollapseRecord``
    of ``selfctx.application.usecases.collapse_order``): a diagnosis, never stored; the latest
    ``collapse_order.COLLAPSE_RECORDS`` of them (decision 0152)."""
    argument_tokens: dict[str, tuple[str, int]] = attrs.field(factory=dict)
    """Tokens of active tool calls' arguments as JSON, by object id, with the version's hash
    (what a batch weighs at every request)."""
    plan: Any = None
    """The collapse plan of the last assembly (``CollapsePlan``; None if it made none): what
    the next request is expected to collapse (``foreseen_collapses``)."""
    marks: list[Mark] = attrs.field(factory=list)
    """What the log entries folded in since the last recorded request hold that the request's
    record marks (``selfctx.application.requests.entry_marks``), oldest first."""
    marks_from: int = -1
    """:attr:`marks` holds every mark after this log position (-1: the position the session
    was opened at)."""
    batch: Any = None
    """The commands decided but not yet committed (``_Batch``), inside
    :meth:`SessionRunner.batch`; None outside one."""
    packing: Packing = Packing()
    """The tool calls recorded that no pack holds yet (decision 0123)."""
    written: WrittenChat = attrs.field(factory=WrittenChat)
    """What the session's last chat snapshot wrote, for the next to write what is new only
    (decision 0143; its text on the runner's shelf)."""

    def __attrs_post_init__(self) -> None:
        if self.marks_from < 0:
            self.marks_from = self.seq

    def note_entry(self, entry: Mapping[str, Any]) -> None:
        """Keep the marks of a log entry just folded in (at most ``MAX_PENDING``: a session
        whose requests are not recorded keeps only the latest)."""
        found = entry_marks(entry, entry_events(entry))
        if not found:
            return
        self.marks += found
        if len(self.marks) > MAX_PENDING:
            dropped = self.marks[: len(self.marks) - MAX_PENDING]
            del self.marks[: len(dropped)]
            self.marks_from = max(self.marks_from, dropped[-1].seq)

    def working_objects(self) -> Mapping[str, ContentObject]:
        """The objects as the policy's decisions read them: whole where content is read (the
        active and pinned objects, and the outputs of the last assistant messages, whose text
        the relevance policy scans), metadata only for the rest, so that a pass over the
        session's index reads nothing again from the store (``ObjectCache.showing``)."""
        state = self.state
        recent = max(state.policy.recent_messages, RECENT_OUTPUTS)
        live = set(members(state.active))
        live |= members(state.pinned)
        seen = 0
        for turn in reversed(state.turns):
            for message in reversed(turn.messages):
                if isinstance(message, AssistantMessage):
                    seen += 1
                    live.update(call.id for call in message.tool_calls)
                    if seen >= recent:
                        return self.objects.showing(live)
        return self.objects.showing(live)

    def remember(self, obj: ContentObject) -> None:
        """Record a newer version of one of the session's objects."""
        self.objects[obj.id] = obj
        self.render_cache.invalidate(obj.id)
        self.inline_cache.invalidate(obj.id)

    def reset_rendering(self) -> None:
        """Forget what assembly rendered: the chat changed other than at its end (a rollback
        restored an earlier one), which the incremental caches do not expect."""
        self.render_cache = RenderCache()
        self.inline_cache = InlineCache()
        self.context_counter = None
        self.relevance_memo = RelevanceMemo()


class Reads:
    """Store reads made while building one command. What was read becomes the commit's
    preconditions: a version is written only on top of the version the decision saw."""

    def __init__(
        self,
        store: ObjectStore,
        overlay: Iterable[_Prepared | None] = (),
        *,
        latest: Mapping[str, Document] | None = None,
    ) -> None:
        self._store = store
        self.documents: dict[str, Document | None] = {}
        self.objects: dict[str, Any] = {}
        self._overlay: Mapping[str, Document]
        """Versions that commits still in flight write: the latest, as far as a decision goes
        (``latest`` as given, not copied: a batch's, kept as its commands are added)."""
        if latest is not None:
            self._overlay = latest
            return
        built: dict[str, Document] = {}
        self._overlay = built
        for prepared in overlay:
            if prepared is not None:
                built.update((str(doc["xt/id"]), doc) for doc in prepared.documents())

    def seed(self, documents: Mapping[str, Document | None]) -> None:
        """Take these documents as read from the store just now (None: absent; the commit's
        preconditions catch a newer version)."""
        for object_id, doc in documents.items():
            if object_id not in self.documents:
                self._remember(object_id, doc)

    def stored(self, object_id: str) -> Any:
        """The latest stored version of ``object_id`` (parsed), or None."""
        if object_id not in self.documents:
            if object_id in self._overlay:
                self._remember(object_id, as_stored(self._overlay[object_id]))
            else:
                self._remember(object_id, self._store.get(object_id))
        return self.objects.get(object_id)

    def stored_many(self, object_ids: Iterable[str]) -> dict[str, Any]:
        """Latest stored versions of many objects in one round trip (absent ids map to None)."""
        ids = list(dict.fromkeys(object_ids))
        for object_id in ids:
            if object_id not in self.documents and object_id in self._overlay:
                self._remember(object_id, as_stored(self._overlay[object_id]))
        wanted = [i for i in ids if i not in self.documents]
        if wanted:
            found = self._store.get_many(wanted)
            for object_id in wanted:
                self._remember(object_id, found.get(object_id))
        return {i: self.objects.get(i) for i in ids}

    def stored_files(self, files: Iterable[FileObject]) -> dict[str, FileObject | None]:
        """The latest stored versions of these files, by id, in one round trip (None where
        absent). A file whose id is already taken by another kind of object (a tool call given
        that id by its harness) is refused, naming the file's path."""
        files = list(files)
        stored = self.stored_many(f.id for f in files)
        for file in files:
            obj = stored[file.id]
            if obj is not None and not isinstance(obj, FileObject):
                raise InvalidInput(
                    "path", file.source.path, f"its id names a stored {obj.type}, not a file"
                )
        return stored

    def stored_file(self, file: FileObject) -> FileObject | None:
        """:meth:`stored_files` for one file."""
        return self.stored_files([file])[file.id]

    def _remember(self, object_id: str, doc: Document | None) -> None:
        self.documents[object_id] = doc
        if doc is not None:
            self.objects[object_id] = from_document(doc)

    def expectation(self, object_id: str) -> Expect:
        """The precondition for writing a new version of ``object_id``."""
        return Expect(object_id, self.documents.get(object_id))


CommandBuilder = Callable[[Reads, SessionState], Command]

Refused = Callable[[Mapping[str, Document | None]], None]
"""A check run when the store refuses a batch's transaction (:meth:`SessionRunner.batch`); it
is given what the refusal said is stored (``ConflictError.current``: None, absent; empty when
the store did not say)."""


def _as_read(
    current: Mapping[str, Document | None], *read: Mapping[str, Document | None]
) -> dict[str, Document | None]:
    """What a refusal said is stored (``ConflictError.current``) that a command's next attempt
    may start from: whatever it said is absent, and the documents of the objects the command
    read (the keys of ``Reads.documents``). The refusal also carries other documents (log
    entries, riders), which are not objects."""
    return {i: d for i, d in current.items() if d is None or any(i in r for r in read)}


def _still_free(conflict: ConflictError, entry_id: str) -> bool:
    """Whether the refusal says that the log entry ``entry_id`` did not exist (its session had
    no other writer), so that the session's log need not be read again (decision 0112)."""
    return entry_id in conflict.current and conflict.current[entry_id] is None


def as_stored(doc: Document) -> dict[str, Any]:
    """``doc`` as a store gives it back (JSON types: lists, not tuples), for an :class:`Expect`."""
    parsed: dict[str, Any] = json.loads(compact_json(doc))
    return parsed


@attrs.frozen
class _Base:
    """Where a command is decided from: a session as held, or as a commit in flight leaves it."""

    session_id: str
    state: SessionState
    seq: int
    snapshot_bytes: int | _Snapshot
    """Size of the last snapshot (a snapshot of the batch not yet built: its size when
    needed, :func:`_reaches`)."""
    log_bytes_since_snapshot: int
    packing: Packing
    written: WrittenChat | None = None
    """The session's :attr:`OpenSession.written` (None: a snapshot writes its chat whole)."""

    @classmethod
    def of(cls, session: OpenSession) -> _Base:
        return cls(
            session.session_id,
            session.state,
            session.seq,
            session.snapshot_bytes,
            session.log_bytes_since_snapshot,
            session.packing,
            session.written,
        )

    @classmethod
    def after(cls, prepared: _Prepared) -> _Base:
        before = prepared.base
        sizes: tuple[int | _Snapshot, int]
        if prepared.snapshot is None:
            sizes = (before.snapshot_bytes, before.log_bytes_since_snapshot + prepared.entry_bytes)
        else:
            sizes = (prepared.snapshot, 0)
        return cls(
            before.session_id,
            prepared.state,
            prepared.seq,
            *sizes,
            prepared.packing,
            before.written,
        )


class _Snapshot:
    """A snapshot a command writes (its session and chat documents), the chat document built
    when first asked for: at the commit, after a batch's request went upstream (decision
    0161). The session document is built at once: its size is a floor of the snapshot's,
    which answers whether the next snapshot is due without the chat's (:func:`_reaches`)."""

    __slots__ = ("_chat", "_size", "_state", "_written", "floor", "ids", "session_doc")

    def __init__(self, state: SessionState, seq: int, written: WrittenChat | None) -> None:
        self.session_doc = to_document(SessionObject.of(state, seq))
        self.floor = document_size(self.session_doc)
        self.ids = (str(self.session_doc["xt/id"]), state.chat_id)
        self._state: SessionState | None = state
        self._written = written
        self._chat: Document | None = None
        self._size: int | None = None

    def documents(self) -> list[Document]:
        """The session and chat documents, in this order (the chat built the first time)."""
        if self._chat is None:
            assert self._state is not None
            chat = to_document(ChatObject.of(self._state, self._written))
            self._size = with_snapshot_size(self.session_doc, chat, session_bytes=self.floor)
            self._chat, self._state, self._written = chat, None, None
        return [self.session_doc, self._chat]

    @property
    def built(self) -> bool:
        return self._chat is not None

    @property
    def size(self) -> int:
        """Bytes of both documents (building the chat's if it is not built yet)."""
        if self._size is None:
            self.documents()
        assert self._size is not None
        return self._size


def _reaches(log_bytes: int, snapshot: int | _Snapshot) -> bool:
    """Whether ``log_bytes`` of log since the last snapshot reach its size: the snapshot's
    chat document is built only when the session document's size alone does not say."""
    if isinstance(snapshot, int):
        return log_bytes >= snapshot
    return log_bytes >= snapshot.floor and log_bytes >= snapshot.size


def _bytes(snapshot: int | _Snapshot) -> int:
    return snapshot if isinstance(snapshot, int) else snapshot.size


def _settled(snapshot: int | _Snapshot) -> int | _Snapshot:
    """A snapshot's size where its documents are built (committed), else the snapshot."""
    return snapshot.size if isinstance(snapshot, _Snapshot) and snapshot.built else snapshot


@attrs.frozen
class _Prepared:
    """A command's transaction, ready to commit, and the session it leads to."""

    base: _Base
    state: SessionState
    seq: int
    puts: list[Document]
    expect: list[Expect]
    entry: dict[str, Any]
    entry_json: str
    """``entry`` as compact JSON: measured once, and parsed into the next commit's precondition."""
    entry_bytes: int
    snapshot: _Snapshot | None
    """The snapshot it writes after ``puts`` (None: none), its chat document built at the
    commit (:meth:`documents`)."""
    written: dict[str, Any]
    reads: Reads
    packing: Packing
    chat_rewritten: bool = False
    """An event restored an earlier chat: the session's renderings must start again."""

    def documents(self) -> list[Document]:
        """Every document it writes: ``puts``, then the snapshot's (built now if not yet)."""
        return self.puts if self.snapshot is None else [*self.puts, *self.snapshot.documents()]

    def ids(self) -> list[str]:
        """The ids of :meth:`documents`, without building the snapshot's chat."""
        ids = [str(doc["xt/id"]) for doc in self.puts]
        return ids if self.snapshot is None else [*ids, *self.snapshot.ids]

    def entry_expected(self) -> Expect:
        """The precondition that the next commit requires: this log entry, exactly as stored."""
        return Expect(self.entry["xt/id"], json.loads(self.entry_json))


@attrs.frozen
class _InFlight:
    """A pipelined command: how to build it again, where its events go, what was submitted."""

    build: CommandBuilder
    slot: int
    prepared: _Prepared | None
    """None for a command that changed nothing (nothing was submitted)."""
    submission: Submission | None
    reads: Reads


@attrs.define
class BatchProgress:
    """How much of what a batch's caller recorded is committed (``SessionRunner.batch``):
    the caller counts the units it finished in :attr:`done` (an ingest: messages); each
    commit of the batch makes every unit finished by then :attr:`committed`. A unit whose
    commands straddle a commit counts only once all of them are committed."""

    done: int = 0
    committed: int = 0
    redone: bool = False
    """A commit of the batch was refused (another writer came first): its commands were
    decided again, on what that writer left, so what was read inside the block before the
    commit may differ from what is stored."""


@attrs.frozen
class Rider:
    """Documents that go with a batch's transaction without being a command of the session
    (a request's record, decision 0089): committed with the batch's commands, or not at all.
    ``landed`` is called once they are committed; when the store refuses the transaction they
    are dropped (the commands are decided again, ``BatchProgress.redone`` says so, and
    whoever attached them writes them again if it still wants them)."""

    puts: tuple[Document, ...]
    expect: tuple[Expect, ...]
    landed: Callable[[], None]


@attrs.define
class _Batch:
    """Commands a batch decided and the session moved on by, not yet committed
    (:meth:`SessionRunner.batch`), and what the session was before them."""

    state: SessionState
    seq: int
    snapshot_bytes: int | _Snapshot
    log_bytes_since_snapshot: int
    system_prompt: SystemPromptObject
    marks: list[Mark]
    marks_from: int
    packing: Packing
    builds: list[CommandBuilder] = attrs.field(factory=list)
    pending: list[_Prepared] = attrs.field(factory=list)
    writes: set[str] = attrs.field(factory=set)
    """Ids of the documents the pending commands write."""
    latest: dict[str, Document] = attrs.field(factory=dict)
    """The latest version the pending commands write of each of those documents (what the
    next command of the batch reads for them), kept as commands are added: not built again
    for each command (decision 0119)."""
    prior: dict[str, tuple[ContentObject | None, bool]] = attrs.field(factory=dict)
    """The object cache's entry (and whether it was hollow) before the batch changed it."""
    progress: BatchProgress = attrs.field(factory=lambda: BatchProgress())
    checks: list[Refused] = attrs.field(factory=list)
    """What to check when the store refuses the transaction, before the commands are executed
    again (:meth:`SessionRunner.batch`)."""
    riders: list[Rider] = attrs.field(factory=list)
    """Documents committed with the next transaction (:meth:`SessionRunner.ride`)."""

    @classmethod
    def of(cls, session: OpenSession) -> _Batch:
        return cls(
            session.state,
            session.seq,
            session.snapshot_bytes,
            session.log_bytes_since_snapshot,
            session.system_prompt,
            list(session.marks),
            session.marks_from,
            session.packing,
        )

    def restart(self, session: OpenSession) -> None:
        """Empty, from where ``session`` is now."""
        fresh = _Batch.of(session)
        for field in attrs.fields(_Batch):
            if field.name not in ("progress", "checks"):
                setattr(self, field.name, getattr(fresh, field.name))

    def keep_prior(self, session: OpenSession, object_ids: Iterable[str]) -> None:
        objects = session.objects
        for object_id in object_ids:
            if object_id not in self.prior:
                self.prior[object_id] = (objects.meta(object_id), objects.hollow(object_id))

    def add(self, session: OpenSession, build: CommandBuilder, prepared: _Prepared) -> None:
        self.keep_prior(session, [*prepared.written, *prepared.reads.objects])
        self.builds.append(build)
        self.pending.append(prepared)
        self.writes.update(prepared.ids())
        # a snapshot's chat is not an object a command reads: its document is built at the
        # commit (decision 0161), its session document is here as before
        self.latest.update((str(doc["xt/id"]), doc) for doc in prepared.puts)
        if prepared.snapshot is not None:
            self.latest[prepared.snapshot.ids[0]] = prepared.snapshot.session_doc

    def supersede(self, prepared: _Prepared) -> bool:
        """Whether the only documents of ``prepared`` that the batch already writes are the
        session's snapshot (its session and chat documents, the last two it puts), written by
        an earlier command of the batch; that earlier snapshot is then dropped, and this one
        stands for it (decision 0119). The transaction is applied whole or not at all, and
        every log entry between the two is in it: no state is lost that a load could need."""
        if prepared.snapshot is None:
            return False
        snapshot = set(prepared.snapshot.ids)
        taken = self.writes.intersection(prepared.ids())
        if not taken or not taken <= snapshot:
            return False
        for index, earlier in enumerate(self.pending):
            if earlier.snapshot is None or set(earlier.snapshot.ids) != snapshot:
                continue
            # dropped unbuilt: its chat document is never made (decision 0161)
            self.pending[index] = attrs.evolve(earlier, snapshot=None)
            self.writes.difference_update(snapshot)
            for object_id in snapshot:
                self.latest.pop(object_id, None)
            return True
        return False

    def transaction(self) -> tuple[list[Document], list[Expect]]:
        """Every pending document, and the preconditions on what the store holds now: one
        per document, none on what an earlier command of the batch writes (the command saw
        that version in the batch, where it is)."""
        puts: list[Document] = []
        expect: list[Expect] = []
        written: set[str] = set()
        expected: set[str] = set()
        # The commands' log entries go in one document, or as many as LOG_ENTRIES makes them
        # (decision 0134), each under its first entry's id; that id must not exist yet: a
        # writer appends from the end of its session's log, which ends with a whole document,
        # so another writer from the same end wants the same first id (one is refused).
        chunks = [
            self.pending[k : k + LOG_ENTRIES] for k in range(0, len(self.pending), LOG_ENTRIES)
        ]
        later = {str(p.entry["xt/id"]) for chunk in chunks for p in chunk[1:]}
        for chunk in chunks:
            for prepared in chunk:
                for condition in prepared.expect:
                    object_id = condition.object_id
                    if object_id in later:
                        continue  # an entry inside the chunk's document: never stored alone
                    if object_id not in written and object_id not in expected:
                        expected.add(object_id)
                        expect.append(condition)
                entry = prepared.entry
                documents = prepared.documents()  # a snapshot's chat built now (decision 0161)
                puts += [doc for doc in documents if doc is not entry]
                written.update(str(doc["xt/id"]) for doc in documents)
            puts.append(log_document([prepared.entry for prepared in chunk]))
        for rider in self.riders:
            expect += rider.expect
            puts += rider.puts
        return puts, expect

    def roll_back(self, session: OpenSession) -> None:
        """Put ``session`` back where the batch found it (nothing pending was committed)."""
        session.state, session.seq = self.state, self.seq
        session.snapshot_bytes = self.snapshot_bytes
        session.log_bytes_since_snapshot = self.log_bytes_since_snapshot
        session.system_prompt = self.system_prompt
        session.marks[:] = self.marks
        session.marks_from = self.marks_from
        session.packing = self.packing
        for object_id, (obj, hollow) in self.prior.items():
            if obj is None:
                session.objects.pop(object_id, None)
            elif hollow:
                session.objects.hold_hollow(obj)
            else:
                session.objects[object_id] = obj
        session.reset_rendering()


def _outcome(item: _InFlight) -> Receipt | StoreError:
    assert item.submission is not None
    try:
        return item.submission.result()
    except StoreError as exc:
        return exc


def _named_objects(
    entries: Iterable[Document], known: set[str], toolcalls: set[str]
) -> tuple[list[str], list[str]]:
    """The objects a log tail adds to the index and those of ``known`` it writes versions of,
    read from its entries as stored: the tool calls (by the kind an ``ObjectEncountered`` gives
    them, or for ``known`` by ``toolcalls``), and the others."""
    kinds: dict[str, str] = {}
    for entry in entries:
        for event in entry_events(entry):
            if not isinstance(event, dict):
                continue
            object_id = event.get("object_id")
            if not isinstance(object_id, str):
                continue
            if event.get("event") == "ObjectEncountered" and object_id not in known:
                kinds[object_id] = "toolcall" if event.get("kind") == "toolcall" else "other"
            elif "object_hash" in event and object_id in known:
                kinds[object_id] = "toolcall" if object_id in toolcalls else "other"
    calls = [i for i, kind in kinds.items() if kind == "toolcall"]
    return calls, [i for i, kind in kinds.items() if kind != "toolcall"]


_LOAD_READS: Final = 5
"""Reads a load has in flight at once: the log tail, the packs of the index's tool calls and
those no pack holds, its other objects, and the system prompt (the objects the tail added
follow as the first ones end)."""


class _Ahead:
    """Reads started now and waited for later: on threads when ``parallel`` (a store whose
    reads wait on another process), else made at once, one after the other."""

    def __init__(self, parallel: bool) -> None:
        self._pool = (
            ThreadPoolExecutor(_LOAD_READS, thread_name_prefix="selfctx-load") if parallel else None
        )

    def __call__(self, read: Callable[..., Any], *args: Any) -> Callable[[], Any]:
        """Start ``read(*args)``; the call returned gives its result (or raises its error)."""
        if self._pool is None:
            result = read(*args)
            return lambda: result
        return self._pool.submit(read, *args).result

    def __enter__(self) -> _Ahead:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


class _Read:
    """Objects of a session's index being read (:meth:`SessionRunner._read_objects`)."""

    def __init__(
        self,
        store: ObjectStore,
        calls: list[str],
        read_calls: Sequence[Callable[[], dict[str, Document]]],
        read_others: Callable[[], dict[str, Document]],
    ) -> None:
        self._store, self._calls = store, calls
        self._read_calls, self.others = read_calls, read_others
        """``others()`` waits for the objects that are not tool calls only."""

    def __call__(self) -> dict[str, Document]:
        """Wait for all of them."""
        found: dict[str, Document] = {}
        for read in self._read_calls:
            found.update(read())
        # a tool call written before its metadata was kept apart is read whole
        whole = [i for i in self._calls if i in found and "content_length" not in found[i]]
        others = self.others()
        found.update(others)
        # read by the fields of a file (decision 0153): one that is not a file is read whole
        whole += [i for i, doc in others.items() if _unread_content(doc) and doc["type"] != "file"]
        if whole:
            found.update(self._store.get_many(whole))
        return found


def _object_of(doc: Document) -> StoredObject:
    """The object a document of the index read holds (a file read without its content: that
    file, its content None)."""
    if _unread_content(doc) and doc.get("type") == "file":
        return file_without_content(doc)
    return from_document(doc)


def _unread_content(doc: Document) -> bool:
    """Whether ``doc`` was read without its content (by the fields of a tool call or a file)."""
    return "content" not in doc


class SessionRunner:
    """Loads sessions and executes commands against them."""

    def __init__(
        self,
        store: ObjectStore,
        clock: Clock,
        ids: IdSource,
        *,
        content_budget: int = CONTENT_BUDGET,
        metadata_budget: int = METADATA_BUDGET,
        shelf: Callable[[], TextShelf] = MemoryShelf,
    ) -> None:
        self.store = store
        self.shelf = shelf
        """Makes the place where each session's written chat text is kept between snapshots
        (decision 0143: the adapters give a private file)."""
        self.clock = clock
        self.ids = ids
        self.content_budget = content_budget
        """Characters of content each open session keeps in memory."""
        self.metadata_budget = metadata_budget
        """Hollow tool calls whose metadata each open session keeps in memory (decision 0111)."""

    def new_written(self) -> WrittenChat:
        """What a session's chat snapshots reuse, empty, its text kept on this runner's shelf."""
        return WrittenChat(self.shelf)

    def new_objects(self) -> ObjectCache:
        """An empty object cache for a session, reading what it drops from this store."""
        store = self.store
        return ObjectCache(
            store.get_many,
            self.content_budget,
            self.metadata_budget,
            lambda ids: store.get_many_fields(ids, _TOOLCALL_METADATA),
        )

    # -- loading ---------------------------------------------------------------------------

    def exists(self, session_id: str) -> bool:
        """Whether the session is stored (its snapshot's id only is read, not the snapshot)."""
        sid = session_id_for(session_id)
        return sid in self.store.get_many_fields([sid], ("type",))

    def feed_position(self) -> int:
        """Where the store's file versions feed is now: a session loaded after this learns the
        versions written from here on (decision 0066); -1 for a store that holds nothing yet."""
        position = self.store.file_versions(None).position
        return -1 if position is None else position

    def load(
        self,
        session_id: str,
        on_files: Callable[[Sequence[FileObject]], None] | None = None,
    ) -> OpenSession:
        """Rebuild a session from its latest snapshot and the log entries after it.

        The snapshot and its chat are read in one request (decision 0104); then the log after
        the snapshot, the objects of the snapshot's index and the system prompt are read
        together (decision 0087) while this thread builds the snapshot's state, on threads
        where the store's reads wait on another process (``ObjectStore.reads_wait``; one
        after the other otherwise). Objects the log tail adds, and those it wrote new versions
        of, are read as soon as the tail is, beside what is still being read, while this thread
        folds it. ``on_files``: called with the files of the snapshot's index as soon as they
        are read, while the tool calls may still be (a resume reads their sources then)."""
        position = self.feed_position()  # before reading anything: nothing written since is lost
        snap_id, chat_id = session_id_for(session_id), chat_id_for(session_id)
        # One read, one basis: the chat is written with every snapshot, so this is its chat.
        docs = self.store.get_many([snap_id, chat_id])
        session_doc, chat_doc = docs.get(snap_id), docs.get(chat_id)
        if session_doc is None:
            raise SessionNotFound(session_id)
        snapshot = from_document(session_doc)
        if not isinstance(snapshot, SessionObject):
            raise StoreError(f"session {session_id!r} has a damaged snapshot")
        chat = from_document(chat_doc) if chat_doc is not None else None
        if chat_doc is None or not isinstance(chat, ChatObject):
            raise StoreError(f"session {session_id!r} has a damaged snapshot")
        with _Ahead(self.store.reads_wait) as ahead:
            read_tail = ahead(self.store.session_log, session_id, snapshot.seq)
            # the snapshot's tool calls are its chat's and the detached ones: its state's kinds
            toolcalls = {*chat.toolcall_refs, *snapshot.detached}
            index = snapshot.session_index
            calls = [i for i in index if i in toolcalls]
            # the files the snapshot does not show in full without their content: one shown
            # again later is read whole then, as a file whose content was let go is (decision
            # 0153)
            shown = set(snapshot.active_set)
            read_index = self._read_objects(
                ahead,
                calls,
                [i for i in index if i not in toolcalls],
                (session_id, 0, len(calls), False),
                by_fields=[i for i in index if i not in toolcalls and i not in shown],
            )
            read_prompt = ahead(self._system_prompt, snapshot.system_prompt_ref)
            state = state_from_snapshot(snapshot, chat)
            session = OpenSession(
                session_id=session_id,
                state=state,
                seq=snapshot.seq,
                system_prompt=read_prompt(),
                objects=self.new_objects(),
                snapshot_bytes=snapshot_size(session_doc, chat_doc),
                log_bytes_since_snapshot=0,
                versions_at=position,
                written=self.new_written(),
            )
            entries = read_tail()
            # What the tail names, read now, beside the index and while it is folded: the
            # objects it adds (by the kind it gives them) and those it wrote new versions of
            # (perhaps after the read above had seen them).
            known = set(index)
            early = _named_objects(entries, known, toolcalls)
            read_early = None
            if early[0] or early[1]:
                # the tool calls it adds follow the snapshot's in the index, in this order
                added = [i for i in early[0] if i not in known]
                read_early = self._read_objects(
                    ahead,
                    [*added, *(i for i in early[0] if i in known)],
                    early[1],
                    (session_id, len(calls), len(added), True),
                )
            versioned: set[str] = set()
            self.catch_up(session, load_objects=False, entries=entries, versioned=versioned)
            state = session.state
            # Read again (as the state kinds them) any that was not read after the tail, or
            # not as its kind is read: a snapshot or a tail naming a tool call otherwise than
            # the state does (none is known to).
            read_as = {i: i in toolcalls for i in index}
            read_as.update(dict.fromkeys(early[0], True))
            read_as.update(dict.fromkeys(early[1], False))
            after = {*early[0], *early[1]}
            kinds = state.kinds
            again = [
                i
                for i in state.index
                if ((i not in known or i in versioned) and i not in after)
                or read_as.get(i) != (kinds.get(i) == "toolcall")
            ]
            read_again = self._read_objects(ahead, *self._by_kind(state, again)) if again else None
            parsed: dict[str, tuple[Document, Any]] = {}
            if on_files is not None:
                parsed = {i: (doc, _object_of(doc)) for i, doc in read_index.others().items()}
                on_files([obj for _, obj in parsed.values() if isinstance(obj, FileObject)])
            found = read_index()
            if read_early is not None:
                found.update(read_early())
            if read_again is not None:
                found.update(read_again())
            missing = [i for i in state.index if i not in found]
            if missing:  # not stored when the index was read: once more, as before
                found.update(self._read_objects(ahead, *self._by_kind(state, missing))())
        self._hold_objects(session, found, parsed)
        session.packing = Packing.after(session.state, found.get)
        return session

    @staticmethod
    def _by_kind(state: SessionState, object_ids: Iterable[str]) -> tuple[list[str], list[str]]:
        """These objects of the index: the tool calls, and the others."""
        kinds = state.kinds
        ids = list(object_ids)
        return (
            [i for i in ids if kinds.get(i) == "toolcall"],
            [i for i in ids if kinds.get(i) != "toolcall"],
        )

    def _read_objects(
        self,
        ahead: _Ahead,
        calls: list[str],
        others: list[str],
        packed: tuple[str, int, int, bool] | None = None,
        *,
        by_fields: Sequence[str] = (),
    ) -> _Read:
        """Start reading these objects of the session's index: ``others`` (files...) whole but those
        of ``by_fields``, read by a file's fields (one that is not a file is read whole after them);
        ``calls``, tool calls, without their content (the session shows few of them in full, and
        reads those again when it does: ``ObjectCache``). ``packed``: (session, position, n, last):
        the first n of ``calls`` are the session's tool calls from that position on, in the index's
        order (``last``: up to the session's last one); those of every block they touch are read
        from the blocks' packs (decision 0123), and one by one where a pack is missing or does not
        hold them, as are those after the last full block of a session (no pack holds them yet)."""
        single, covered, packs = calls, [], []
        if packed is not None:
            session_id, first, n, last = packed
            end = first + n
            low = first // PACK_CALLS
            high = end // PACK_CALLS if last else -(-end // PACK_CALLS)
            if high > low:
                b = min(n, high * PACK_CALLS - first)
                single, covered = calls[b:], calls[:b]
                packs = [pack_id(session_id, block) for block in range(low, high)]
        reads = []
        if packs:
            reads.append(ahead(self._packed_calls, packed[0] if packed else "", packs, covered))
        reads.append(ahead(self.store.get_many_fields, single, _TOOLCALL_METADATA))
        if not by_fields:
            return _Read(self.store, calls, reads, ahead(self.store.get_many, others))
        hollow = set(by_fields)
        read_whole = ahead(self.store.get_many, [i for i in others if i not in hollow])
        read_fields = ahead(
            self.store.get_many_fields, [i for i in others if i in hollow], _FILE_METADATA
        )
        both = functools.cache(lambda: {**read_whole(), **read_fields()})
        return _Read(self.store, calls, reads, both)

    def _packed_calls(
        self, session_id: str, packs: list[str], calls: list[str]
    ) -> dict[str, Document]:
        """The metadata of ``calls`` from these packs, the calls they do not hold read one by
        one."""
        held: dict[str, Document] = {}
        for doc in self.store.get_many(packs).values():
            held.update(unpack_toolcalls(doc, session_id))
        found = {i: held[i] for i in calls if i in held and "content_length" in held[i]}
        rest = [i for i in calls if i not in found]
        if rest:
            found.update(self.store.get_many_fields(rest, _TOOLCALL_METADATA))
        return found

    def _hold_objects(
        self,
        session: OpenSession,
        found: Mapping[str, Document],
        parsed: Mapping[str, tuple[Document, Any]] | None = None,
    ) -> None:
        """Put the objects of the session's index, as :meth:`_read_objects` read them, in its
        cache (files' documents also into ``session.loaded``: a resume reconciles them)."""
        state = session.state
        missing = [i for i in state.index if i not in found]
        if missing:
            raise StoreError(f"objects in the session index are missing: {missing[:5]}")
        for object_id in state.index:
            doc = found[object_id]
            if _unread_content(doc) and doc["type"] == "file":  # read by a file's fields
                was = parsed.get(object_id) if parsed else None
                file = was[1] if was is not None and was[0] is doc else file_without_content(doc)
                assert isinstance(file, FileObject)
                if file.content_hash is None:  # no content at all: nothing to read again
                    session.objects[object_id] = file
                else:
                    session.objects.hold_hollow(file)
                continue
            if "content_length" not in doc or "content" in doc:  # a whole document
                was = parsed.get(object_id) if parsed else None
                obj = was[1] if was is not None and was[0] is doc else from_document(doc)
                assert isinstance(obj, FileObject | ToolcallObject)
                session.objects[object_id] = obj
                if isinstance(obj, FileObject):
                    session.loaded[object_id] = doc
                continue
            obj = toolcall_without_content(doc)
            if obj.content_hash is None:  # no output at all: nothing to read again
                session.objects[object_id] = obj
            else:
                session.objects.hold_hollow(obj)

    def _system_prompt(self, object_id: str) -> SystemPromptObject:
        doc = self.store.get(object_id)
        obj = from_document(doc) if doc is not None else None
        if not isinstance(obj, SystemPromptObject):
            raise StoreError(f"system prompt {object_id!r} is missing from the store")
        return obj

    def _objects(
        self, object_ids: Iterable[str], files: dict[str, Document] | None = None
    ) -> dict[str, ContentObject]:
        """The latest versions of these objects (and their documents, for files, into
        ``files``)."""
        ids = list(object_ids)
        docs = self.store.get_many(ids)
        missing = [i for i in ids if i not in docs]
        if missing:
            raise StoreError(f"objects in the session index are missing: {missing[:5]}")
        out: dict[str, ContentObject] = {}
        for object_id, doc in docs.items():
            obj = from_document(doc)
            assert isinstance(obj, FileObject | ToolcallObject)
            out[object_id] = obj
            if files is not None and isinstance(obj, FileObject):
                files[object_id] = doc
        return out

    def catch_up(
        self,
        session: OpenSession,
        *,
        load_objects: bool = True,
        entries: list[Document] | None = None,
        versioned: set[str] | None = None,
    ) -> bool:
        """Fold log entries other writers appended after ``session.seq``; True if there were any.
        With ``load_objects`` (the default) the objects those entries changed are read too.
        ``entries``: the log after ``session.seq`` as already read; ``versioned`` receives the
        ids of the objects the entries wrote versions of."""
        if entries is None:
            entries = self.store.session_log(session.session_id, after_seq=session.seq)
        if not entries:
            session.stale = False
            return False
        changed: set[str] = set()
        prompt_changed = False
        rewritten = False
        recorded = False
        tail: list[e.Event] = []
        for entry in entries:
            events = decode_events(entry_events(entry))
            rewritten |= any(isinstance(event, _REWRITES) for event in events)
            tail += events
            session.seq = int(entry["seq"])
            session.log_bytes_since_snapshot += entry_size(entry)
            session.note_entry(entry)
        # the whole tail at once: a resume's is thousands of events (decision 0087)
        session.state = state = fold_many(tail, session.state)
        for event in tail:
            recorded |= isinstance(event, e.ToolCallRecorded)
            if isinstance(event, e.SystemPromptSet):
                prompt_changed = True
            elif hasattr(event, "object_id") and state.in_index(event.object_id):
                changed.add(event.object_id)  # an index only grows: in it then, in it now
            if versioned is not None and hasattr(event, "object_hash"):
                versioned.add(getattr(event, "object_id", ""))
        if changed and load_objects:
            for obj in self._objects(changed).values():
                session.remember(obj)
        if prompt_changed:
            session.system_prompt = self._system_prompt(session.state.system_prompt_id)
        if rewritten:
            session.reset_rendering()
        if recorded:
            # another writer's tool calls: this one's pending ones no longer follow the last
            # pack; packing goes on from the next tool call (decision 0123)
            count = sum(1 for kind in state.kinds.values() if kind == "toolcall")
            session.packing = Packing(count)
        session.stale = False
        return True

    # -- executing -------------------------------------------------------------------------

    def execute(self, session: OpenSession, build: CommandBuilder) -> tuple[e.Event, ...]:
        """Build a command from fresh reads, decide it and commit what it produced.

        Returns the events (empty when the command changes nothing, in which case nothing is
        written). Domain errors from building or deciding propagate and change nothing.
        """
        if session.batch is not None:
            return self._execute_batched(session, session.batch, build)
        return self._execute(session, build, {})[0]

    def _execute(
        self, session: OpenSession, build: CommandBuilder, known: Mapping[str, Document | None]
    ) -> tuple[tuple[e.Event, ...], list[Document]]:
        """:meth:`execute` outside a batch, its first reads seeded with ``known`` (documents as
        the store last said they are: None, absent); returns the events and the documents
        committed.

        A refusal that says what is stored (``ConflictError.current``, decision 0106) is used
        as such: the next attempt's reads start from it, and the session's log is read again
        only when the refusal does not say that the entry this command wanted is still free
        (decision 0112)."""
        command_id = self.ids.new_id()
        contention = Contention()
        loaded: Mapping[str, Document | None] = {**session.loaded, **known}
        session.loaded = {}
        while True:
            if session.stale:
                self.catch_up(session)
            reads = Reads(self.store)
            reads.seed(loaded)
            loaded = {}
            command = build(reads, session.state)
            events, after = decide_and_fold(session.state, command)
            if not events:
                self._refresh(session, reads, session.state)
                return events, []
            try:
                written = self._commit(session, command, command_id, events, after, reads)
            except ConflictError as exc:
                # Either another writer of this session appended first (catch up), or an object
                # we read changed underneath us (the next attempt reads it, or takes it from
                # the refusal).
                own_log = log_entry_id(session.session_id, session.seq + 1)
                if not _still_free(exc, own_log):
                    self.catch_up(session)
                contention.failed(exc, sessions_log=own_log in exc.object_ids)
                loaded = _as_read(exc.current, reads.documents)
                continue
            except StoreError:
                session.stale = True
                raise
            return events, written

    def _commit(
        self,
        session: OpenSession,
        command: Command,
        command_id: str,
        events: tuple[e.Event, ...],
        after: SessionState,
        reads: Reads,
    ) -> list[Document]:
        """Commit the command; returns the documents written."""
        prepared = self._prepare(_Base.of(session), command, command_id, events, after, reads)
        puts = prepared.documents()
        self.store.commit(puts, prepared.expect)
        self._apply(session, prepared)  # durable: now the in-memory session may move on
        return puts

    def _prepare(
        self,
        base: _Base,
        command: Command,
        command_id: str,
        events: tuple[e.Event, ...],
        new_state: SessionState,
        reads: Reads,
    ) -> _Prepared:
        """The transaction that records ``events`` on top of ``base``, leading to ``new_state``
        (``fold(events, base.state)``, which deciding computed)."""
        seq = base.seq + 1
        puts: list[Document] = []
        expect = [Expect(log_entry_id(base.session_id, seq), None)]
        written: dict[str, Any] = {}
        calls: list[str] = []
        for event in events:
            version = getattr(event, "version", None)
            if version is None:
                continue
            written[version.id] = version
            doc = to_document(version)
            puts.append(doc)
            if isinstance(version, FileObject):
                expect.append(reads.expectation(version.id))
            elif isinstance(version, ToolcallObject):
                expect.append(Expect(version.id, None))
                if isinstance(event, e.ToolCallRecorded):
                    calls.append(compact_json(call_metadata(doc)))
        # a pack is derived data, written over whatever an earlier attempt left: no precondition
        packing, packs = base.packing.add(base.session_id, calls)
        puts += packs
        entry = log_entry(
            base.session_id,
            seq,
            command=type(command).__name__,
            command_id=command_id,
            at=self.clock.now(),
            events=events,
        )
        puts.append(entry)
        entry_json, entry_bytes = with_size(entry, compact_json(entry))
        snapshot = None
        if seq == 1 or _reaches(base.log_bytes_since_snapshot + entry_bytes, base.snapshot_bytes):
            # its chat document is built at the commit: after the send, in a batch (0161)
            snapshot = _Snapshot(new_state, seq, base.written)
        return _Prepared(
            base=base,
            state=new_state,
            seq=seq,
            puts=puts,
            expect=expect,
            entry=entry,
            entry_json=entry_json,
            entry_bytes=entry_bytes,
            snapshot=snapshot,
            written=written,
            reads=reads,
            packing=packing,
            chat_rewritten=any(isinstance(event, _REWRITES) for event in events),
        )

    def _apply(self, session: OpenSession, prepared: _Prepared) -> None:
        """Move the in-memory session on by a transaction the store has applied (the ones
        before it have been applied too, so the session is where ``prepared`` was decided)."""
        after = _Base.after(prepared)
        session.state, session.seq = after.state, after.seq
        session.snapshot_bytes = _settled(after.snapshot_bytes)
        session.log_bytes_since_snapshot = after.log_bytes_since_snapshot
        session.packing = after.packing
        if prepared.chat_rewritten:
            session.reset_rendering()
        session.note_entry(prepared.entry)
        self._refresh(session, prepared.reads, prepared.state)
        for version in prepared.written.values():
            if isinstance(version, SystemPromptObject):
                session.system_prompt = version
            elif isinstance(version, FileObject | ToolcallObject):
                session.remember(version)

    # -- batches ---------------------------------------------------------------------------

    @contextmanager
    def batch(
        self, session: OpenSession, refused: Refused | None = None
    ) -> Iterator[BatchProgress]:
        """Commit the commands executed on ``session`` inside this block together, in one
        transaction when it ends (decision 0077). The caller holds the session's lock
        throughout; a batch inside a batch is part of it.

        Each command is decided as :meth:`execute` decides it, on what the ones before it
        leave (their versions are read from the batch, not the store), and the session moves
        on at once, as if it had been committed: what the caller reads between commands is
        the same. Each command keeps its own log entry. Two commands that write the same
        document (a file read and then edited) go in two transactions: the batch commits what
        it holds before the second; but of two snapshots of the session, the later replaces
        the earlier in the one transaction (decision 0119). When the transaction is refused
        (another writer came first), the session goes back to where the batch found it,
        catches up when another writer appended to its log, and the commands are decided
        again, all of them, each on what the ones before it leave, and committed again as one
        transaction (decision 0118; bounded retries as :meth:`execute`'s; reads start from
        what the refusal said is stored, when it said, decision 0112); when the store fails,
        the session goes back too, is marked stale and the error is raised. When the block
        raises, what was decided before is committed, then the error is raised. What it yields
        counts what the caller recorded and what of it is committed (:class:`BatchProgress`).

        ``refused`` is called when the store refuses the transaction, once the session is back
        where the batch found it and has caught up, before the commands are executed again: it
        may raise, and then nothing the batch held is recorded (a check that would cost a round
        trip on every batch costs one only when a transaction is refused, decision 0080). It is
        given what the refusal said is stored, which may spare it that round trip too."""
        if session.batch is not None:
            if refused is not None:
                session.batch.checks.append(refused)
            yield session.batch.progress
            return
        session.batch = _Batch.of(session)
        if refused is not None:
            session.batch.checks.append(refused)
        try:
            yield session.batch.progress
        finally:
            batch, session.batch = session.batch, None
            self._flush(session, batch)

    def ride(self, session: OpenSession, rider: Rider) -> bool:
        """Commit ``rider`` with the transaction of the batch open on ``session`` (the caller
        holds its lock); False when no batch is open (nothing is attached)."""
        batch = session.batch
        if batch is None:
            return False
        written = {str(doc["xt/id"]) for doc in rider.puts}
        if batch.writes & written or any(
            written & {str(doc["xt/id"]) for doc in r.puts} for r in batch.riders
        ):
            return False  # a document the transaction already writes: not twice in one
        batch.riders.append(rider)
        return True

    def _execute_batched(
        self, session: OpenSession, batch: _Batch, build: CommandBuilder
    ) -> tuple[e.Event, ...]:
        loaded, session.loaded = session.loaded, {}
        return self._decide_batched(session, batch, build, loaded)[0]

    def _decide_batched(
        self,
        session: OpenSession,
        batch: _Batch,
        build: CommandBuilder,
        known: Mapping[str, Document | None],
    ) -> tuple[tuple[e.Event, ...], _Prepared | None]:
        """Decide a command into ``batch``, its first reads seeded with ``known`` (documents as
        the store last said they are: None, absent); returns its events and its transaction
        (None when it changed nothing)."""
        if session.stale:
            self.catch_up(session)
        reads = Reads(self.store, latest=batch.latest)
        reads.seed(known)
        command = build(reads, session.state)
        events, after = decide_and_fold(session.state, command)
        if not events:
            batch.keep_prior(session, reads.objects)
            self._refresh(session, reads, session.state)
            return events, None
        base = _Base.of(session)
        prepared = self._prepare(base, command, self.ids.new_id(), events, after, reads)
        if batch.writes.intersection(prepared.ids()) and not batch.supersede(prepared):
            # A document the batch already writes (other than a snapshot this command's
            # replaces): what it holds goes first, and the command is decided again on top of it.
            self._flush(session, batch)
            return self._decide_batched(session, batch, build, {})
        batch.add(session, build, prepared)
        self._apply(session, prepared)
        return events, prepared

    def _flush(self, session: OpenSession, batch: _Batch) -> None:
        """Commit what ``batch`` holds, in one transaction; the batch is empty afterwards.

        When the store refuses the transaction, the session goes back to where the batch
        found it, and the batch's commands are decided again, all of them, on what the refusal
        said is stored and on what those before them write, then committed again as one
        transaction (decision 0118); as often as :class:`Contention` allows, as
        :meth:`execute` retries a command."""
        if not batch.pending and not batch.riders:
            return
        contention = Contention()
        while batch.pending or batch.riders:
            builds = list(batch.builds)
            riders = list(batch.riders)
            try:
                puts, expect = batch.transaction()  # a snapshot's chat document built here
            except Exception as exc:  # reported as the commit's failure (decision 0161)
                batch.roll_back(session)
                batch.restart(session)
                session.stale = True
                raise StoreError(f"the commit's documents could not be prepared: {exc!r}") from exc
            try:
                self.store.commit(puts, expect)
            except ConflictError as exc:
                read = [p.reads.documents for p in batch.pending]
                batch.roll_back(session)
                # The refusal may say what is stored (decision 0106): then the session's log is
                # read only if its next entry is taken, and the commands below start from what
                # it said of what they read, and from what those before them write (0112).
                own_log = log_entry_id(session.session_id, session.seq + 1)
                if not _still_free(exc, own_log):
                    self.catch_up(session)
                batch.restart(session)  # the riders are dropped: BatchProgress.redone says so
                contention.failed(exc, sessions_log=own_log in exc.object_ids)
                for check in batch.checks:
                    check(exc.current)  # raising: nothing of the batch is recorded
                batch.progress.redone = True
                try:
                    self._decide_again(session, batch, builds, _as_read(exc.current, *read), read)
                except BaseException:
                    # a command no longer decided (a domain error): what the redo decided is
                    # dropped, the session is where the store has it, and the error is raised
                    batch.roll_back(session)
                    batch.restart(session)
                    raise
                continue
            except StoreError:
                batch.roll_back(session)
                batch.restart(session)
                session.stale = True
                raise
            batch.restart(session)
            session.snapshot_bytes = _bytes(session.snapshot_bytes)  # built: a size again
            for rider in riders:
                rider.landed()
            break
        batch.progress.committed = batch.progress.done

    def _decide_again(
        self,
        session: OpenSession,
        batch: _Batch,
        builds: Iterable[CommandBuilder],
        known: dict[str, Document | None],
        read: Sequence[Mapping[str, Document | None]],
    ) -> None:
        """Decide the commands of a refused transaction again into ``batch`` (empty, from
        where the session is now), each on ``known`` (what the refusal said of what they
        read: ``read``) as the objects the commands before it write leave it (a log entry or
        a snapshot they write is not an object a command reads)."""
        for build in builds:
            prepared = self._decide_batched(session, batch, build, known)[1]
            if prepared is None:
                continue
            for doc in prepared.puts:
                doc_id = str(doc["xt/id"])
                if doc_id in prepared.written and any(doc_id in r for r in read):
                    known[doc_id] = as_stored(doc)
                else:
                    known.pop(doc_id, None)

    # -- pipelining ------------------------------------------------------------------------

    def execute_pipelined(
        self, session: OpenSession, builds: Iterable[CommandBuilder], *, depth: int = PIPELINE_DEPTH
    ) -> list[tuple[e.Event, ...]]:
        """Execute many commands, in order, as :meth:`execute` would one after another, but
        without waiting for each commit before building the next: each is decided on the state
        the ones still in flight will leave and handed to :meth:`ObjectStore.submit`; at most
        ``depth`` are in flight at once. Returns the events of each command.

        Each commit also requires the log entry of the one before it, exactly as submitted, so
        a commit whose predecessor was refused is refused too: the log never has a gap. After a
        conflict, the refused commands are built and executed again the ordinary way (fresh
        reads, bounded retries) and so are the rest. When the store fails, the commits in flight
        are waited for, the session is marked stale and the error raised. When ``builds`` or a
        command raises, the commits in flight are settled first: what was committed stays.
        """
        if depth < 1:
            raise InvalidInput("depth", depth, "must be at least 1")
        if session.batch is not None:  # what a batch decided is committed first
            self._flush(session, session.batch)
        if session.stale:
            self.catch_up(session)
        results: list[tuple[e.Event, ...]] = []
        flight: deque[_InFlight] = deque()
        todo = iter(builds)
        try:
            for build in todo:
                while len(flight) >= depth:
                    redo = self._land(session, flight)
                    if redo:  # ``build`` is next, after the refused ones
                        return self._sequentially(session, redo, chain([build], todo), results)
                # The last commit in flight: decide on what it leaves, and require its entry.
                ahead = next((f.prepared for f in reversed(flight) if f.prepared), None)
                reads = Reads(self.store, overlay=[f.prepared for f in flight])
                state = session.state if ahead is None else ahead.state
                command = build(reads, state)
                events, after = decide_and_fold(state, command)
                slot = len(results)
                results.append(events)
                if not events:
                    flight.append(_InFlight(build, slot, None, None, reads))
                    continue
                base = _Base.of(session) if ahead is None else _Base.after(ahead)
                prepared = self._prepare(base, command, self.ids.new_id(), events, after, reads)
                if ahead is not None:
                    prepared.expect.append(ahead.entry_expected())
                submission = self.store.submit(prepared.documents(), prepared.expect)
                flight.append(_InFlight(build, slot, prepared, submission, reads))
            while flight:
                redo = self._land(session, flight)
                if redo:
                    return self._sequentially(session, redo, todo, results)
        except BaseException:
            self._drain(session, flight)
            raise
        return results

    def _land(self, session: OpenSession, flight: deque[_InFlight]) -> list[_InFlight]:
        """Settle the oldest command in flight. On a conflict, every later one is refused too
        (each requires its predecessor's entry): wait for them all and return them to redo."""
        oldest = flight[0]
        if oldest.submission is not None:
            assert oldest.prepared is not None
            try:
                oldest.submission.result()
            except ConflictError:
                redo = list(flight)
                flight.clear()
                for later in redo[1:]:
                    if later.submission is not None:
                        _outcome(later)  # refused: it requires the refused entry
                session.stale = True
                return redo
            except StoreError:
                flight.popleft()
                session.stale = True  # its fate is unknown, and so is every later one's
                self._drain(session, flight)
                raise
            self._apply(session, oldest.prepared)
        else:
            self._refresh(session, oldest.reads, session.state)
        flight.popleft()
        return []

    def _drain(self, session: OpenSession, flight: deque[_InFlight]) -> None:
        """Settle what is in flight after a failure, keeping what was committed. Store errors
        are not raised (they only mark the session stale): the failure being handled is."""
        while flight:
            item = flight.popleft()
            if item.submission is None:
                continue
            if isinstance(_outcome(item), Receipt) and not session.stale:
                assert item.prepared is not None
                self._apply(session, item.prepared)
            else:
                session.stale = True  # catch up from the log before the next decision

    def _sequentially(
        self,
        session: OpenSession,
        redo: list[_InFlight],
        todo: Iterator[CommandBuilder],
        results: list[tuple[e.Event, ...]],
    ) -> list[tuple[e.Event, ...]]:
        for item in redo:
            results[item.slot] = self.execute(session, item.build)
        for build in todo:
            results.append(self.execute(session, build))
        return results

    @staticmethod
    def _refresh(session: OpenSession, reads: Reads, state: SessionState) -> None:
        """Adopt the versions a decision read for objects in the index: they are the latest in
        the store (e.g. an unchanged file that was encountered, re-read or activated after another
        session wrote a version this one had not seen)."""
        for object_id, obj in reads.objects.items():
            if not state.in_index(object_id) or not isinstance(obj, FileObject | ToolcallObject):
                continue
            known = session.objects.meta(object_id)
            if known is None or known.object_hash != obj.object_hash:
                session.remember(obj)
