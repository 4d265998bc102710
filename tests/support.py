"""Test doubles and helpers shared by the core test suite. No mocking library: every double is a
small real implementation of a port, and tests assert on what it recorded."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from selfctx.adapters.search import SqliteSearchIndex
from selfctx.adapters.summarizer import ExtractiveSummarizer
from selfctx.adapters.tokenizer import EstimateTokenizer
from selfctx.application.persistence import LOG_TYPE
from selfctx.application.ports.clock import Clock
from selfctx.application.ports.files import (
    FileReader,
    FileRestorer,
    FileSnapshot,
    SourceChanged,
    SourceMissing,
    SourceUnreachable,
)
from selfctx.application.ports.ids import IdSource
from selfctx.application.ports.store import (
    Change,
    ConflictError,
    Document,
    Expect,
    FileVersions,
    Landing,
    ObjectStore,
    Receipt,
    Settled,
    StoreUnavailable,
    Submission,
    Version,
)
from selfctx.application.service import ContextService
from selfctx.application.settings import Settings
from selfctx.domain.mounts import MountTable
from selfctx.domain.objects import Source

__all__ = [
    "CONTAINER_FS",
    "CountingClock",
    "CountingIds",
    "FakeFileReader",
    "StoreProbe",
    "WrappedStore",
    "compose_service",
    "file_id",
    "json_bytes",
    "utf16_len",
]

CONTAINER_FS = "container-fs"
"""Filesystem id of a sandbox's own files: the fake reader cannot read them from the host."""


class CountingClock(Clock):
    """A clock that starts at a fixed instant and moves one second per call."""

    def __init__(self) -> None:
        self.calls = 0

    def now(self) -> str:
        self.calls += 1
        minutes, seconds = divmod(self.calls, 60)
        hours, minutes = divmod(minutes, 60)
        return f"2026-01-01T{hours:02d}:{minutes:02d}:{seconds:02d}.000000Z"


class CountingIds(IdSource):
    """Ids ``id-000001``, ``id-000002``, ... (fixed width, so documents do not grow with them)."""

    def __init__(self, prefix: str = "id") -> None:
        self.prefix = prefix
        self.issued = 0

    def new_id(self) -> str:
        self.issued += 1
        return f"{self.prefix}-{self.issued:06d}"


class FakeFileReader(FileReader, FileRestorer):
    """An in-memory filesystem map: ``(filesystem id, path) -> bytes``.

    Only the filesystems in ``readable`` can be read (by default the host's); a source on any
    other filesystem is unreachable, as a container's files are from the host. A readable path
    that holds no file is confirmed deleted (:class:`SourceMissing`); paths marked with
    :meth:`make_unreachable` raise :class:`SourceUnreachable` (permission denied, mount gone).
    """

    def __init__(self, host_id: str) -> None:
        self.host_id = host_id
        self.readable: set[str] = {host_id}
        self.files: dict[tuple[str, str], bytes] = {}
        self.unreachable: set[tuple[str, str]] = set()
        self.reads: list[str] = []
        """Every path :meth:`read` was asked for, in order."""
        self.restored: list[str] = []
        """Every path :meth:`restore` wrote or deleted, in order."""

    def write(self, path: str, data: str | bytes, filesystem_id: str | None = None) -> None:
        raw = data.encode("utf-8") if isinstance(data, str) else data
        self.files[(filesystem_id or self.host_id, path)] = raw

    def delete(self, path: str, filesystem_id: str | None = None) -> None:
        del self.files[(filesystem_id or self.host_id, path)]

    def make_unreachable(self, path: str, filesystem_id: str | None = None) -> None:
        self.unreachable.add((filesystem_id or self.host_id, path))

    def read(self, source: Source, max_bytes: int) -> FileSnapshot:
        self.reads.append(source.path)
        key = (source.filesystem_id, source.path)
        if source.filesystem_id not in self.readable:
            raise SourceUnreachable(source, "it lives on another filesystem, not readable here")
        if key in self.unreachable:
            raise SourceUnreachable(source, "permission denied")
        data = self.files.get(key)
        if data is None:
            raise SourceMissing(source, "the file does not exist")
        digest = hashlib.sha256(data).hexdigest()
        return FileSnapshot(
            data=data if len(data) <= max_bytes else None, size=len(data), file_hash=digest
        )

    def restore(
        self, source: Source, data: bytes | None, expected_hash: str | None, max_bytes: int
    ) -> None:
        """Write back like the host reader does: readable filesystems only, over what is
        expected; ``restored`` lists every path written or deleted."""
        key = (source.filesystem_id, source.path)
        if source.filesystem_id not in self.readable or key in self.unreachable:
            raise SourceUnreachable(source, "not writable here")
        current = self.files.get(key)
        found = None if current is None else hashlib.sha256(current).hexdigest()
        if found != expected_hash:
            raise SourceChanged(source, expected_hash, found)
        self.restored.append(source.path)
        if data is None:
            del self.files[key]
        else:
            self.files[key] = data


DESIGN_SETTINGS = Settings(policy="ssot")
"""The original design's layout (``ssot``) and the service's other defaults."""


def compose_service(
    *,
    store: ObjectStore,
    files: FileReader,
    clock: Clock,
    ids: IdSource,
    mounts: MountTable,
    settings: Settings | None = None,
) -> ContextService:
    """The composition every test uses: a :class:`ContextService` over the given doubles. Its
    sessions use the original design's layout unless ``settings`` says otherwise: the scenario
    tests check the design's rules (``ContextService`` itself defaults to ``relevance``)."""
    return ContextService(
        store=store,
        clock=clock,
        ids=ids,
        files=files,
        mounts=mounts,
        tokenizer=EstimateTokenizer(),
        settings=settings or DESIGN_SETTINGS,
        search=SqliteSearchIndex(),
        summarizer=ExtractiveSummarizer(),
    )


def file_id(filesystem_id: str, path: str) -> str:
    """The id every client computes for a file (docs/specification.md §1), worked out here without
    the domain's hashing module: SHA-256 of the sorted-key JSON of ``{type, source}`` (plain
    ``json.dumps`` equals JavaScript's for the ASCII strings tests use)."""
    assert (filesystem_id + path).isascii()
    source = {"type": "filesystem", "filesystemId": filesystem_id, "path": path}
    text = json.dumps({"type": "file", "source": source}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def utf16_len(text: str) -> int:
    """JavaScript's ``length`` of a string: UTF-16 code units."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def json_bytes(doc: Mapping[str, Any]) -> int:
    """Size of a document as compact UTF-8 JSON, the way a store receives it."""
    text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
    return len(text.encode("utf-8", "surrogatepass"))


class WrappedStore(ObjectStore):
    """Delegates to a real store, counting what it is sent, and fails commits on request.

    ``fail_commits = n`` makes the next ``n`` commits raise :class:`StoreUnavailable` before
    anything reaches the inner store. ``lose_acks = n`` makes the next ``n`` commits reach the
    inner store (durably) and then raise, as a connection that drops after the write would.
    ``on_commit`` runs before each commit reaches the inner store (to interleave another writer);
    what it returns is ignored.

    ``namespace`` (for a store shared between tests, e.g. one XTDB node per run) is prefixed to
    every ``xt/id``, and to the ``session_id`` of every session-log entry, on the way in and
    removed on the way out (documents, log queries, ``ids_of_type``, the ids a conflict names,
    ``changes``, which also start where the namespace began), so literal ids such as ``tc-1`` or
    a session ``main`` in one test never meet another test's and the caller reads back exactly
    the ids it wrote; with the default ``""`` nothing changes.
    """

    def __init__(self, inner: ObjectStore, namespace: str = "") -> None:
        self.inner = inner
        self.namespace = namespace
        self.commits = 0
        """Commits that reached the inner store."""
        self.bytes_committed = 0
        """JSON bytes of every document in those commits (as the caller wrote them)."""
        self.committed: list[list[Document]] = []
        self.fail_commits = 0
        self.lose_acks = 0
        self.on_commit: Callable[[], object] | None = None
        origin = inner.latest_tx() if namespace else None
        self._origin = None if origin is None else origin.tx_id
        """A namespace begins here: :meth:`changes` from the start reads from this point."""

    def _id(self, object_id: str) -> str:
        """The id in the inner store. A log entry's is ``log:{ns}{session}:{seq}``, so that it
        stays an entry of the namespaced session (a store may find entries by their ids)."""
        if not self.namespace:
            return object_id
        if object_id.startswith("log:"):
            return "log:" + self.namespace + object_id[4:]
        return self.namespace + object_id

    def _id_out(self, object_id: str) -> str:
        ns = self.namespace
        if ns and object_id.startswith("log:" + ns):
            return "log:" + object_id[4 + len(ns) :]
        return object_id.removeprefix(ns)

    def _in(self, doc: Document) -> Document:
        ns = self.namespace
        if not ns or not isinstance(doc, Mapping) or not isinstance(doc.get("xt/id"), str):
            return doc  # a malformed document reaches the inner store as it is, to be refused
        out = {**doc, "xt/id": self._id(doc["xt/id"])}
        if doc.get("type") == LOG_TYPE and isinstance(doc.get("session_id"), str):
            out["session_id"] = ns + doc["session_id"]
        return out

    def _strip(self, doc: Document) -> Document:
        ns = self.namespace
        if not ns:
            return doc
        out = {**doc, "xt/id": self._id_out(str(doc["xt/id"]))}
        if doc.get("type") == LOG_TYPE and isinstance(doc.get("session_id"), str):
            out["session_id"] = doc["session_id"].removeprefix(ns)
        return out

    def _mine(self, object_id: str) -> bool:
        ns = self.namespace
        return object_id.startswith(ns) or object_id.startswith("log:" + ns)

    def _out(self, doc: Document | None) -> Document | None:
        return None if doc is None else self._strip(doc)

    def _docs(self, docs: dict[str, Document]) -> dict[str, Document]:
        return {self._id_out(object_id): self._strip(doc) for object_id, doc in docs.items()}

    def get(self, object_id: str) -> Document | None:
        return self._out(self.inner.get(self._id(object_id)))

    def get_many(self, object_ids: Iterable[str]) -> dict[str, Document]:
        return self._docs(self.inner.get_many(self._id(i) for i in object_ids))

    def commit(self, puts: Sequence[Document], expect: Sequence[Expect] = ()) -> Receipt:
        # The inner store's own commit (not a submit awaited): on a node, a refusal's answer
        # says what is stored (decision 0106), as it does for the application.
        if self.fail_commits:
            self.fail_commits -= 1
            raise StoreUnavailable("injected failure", operation="commit")
        self._hook()
        inner_puts, inner_expect = self._in_tx(puts, expect)
        return self._landed(lambda: self.inner.commit(inner_puts, inner_expect), puts)

    def submit(self, puts: Sequence[Document], expect: Sequence[Expect] = ()) -> Submission:
        if self.fail_commits:
            self.fail_commits -= 1
            return Settled(error=StoreUnavailable("injected failure", operation="commit"))
        self._hook()
        inner = self.inner.submit(*self._in_tx(puts, expect))
        return _Wrapped(self, inner, [dict(d) for d in puts])

    def _hook(self) -> None:
        hook, self.on_commit = self.on_commit, None
        if hook is not None:
            hook()

    def _in_tx(
        self, puts: Sequence[Document], expect: Sequence[Expect]
    ) -> tuple[list[Document], list[Expect]]:
        return [self._in(doc) for doc in puts], [
            Expect(self._id(x.object_id), None if x.document is None else self._in(x.document))
            for x in expect
        ]

    def _landed(self, land: Callable[[], Receipt], puts: Sequence[Document]) -> Receipt:
        try:
            receipt = land()
        except ConflictError as exc:
            if not self.namespace:
                raise
            ids = [self._id_out(i) for i in exc.object_ids]
            current = {self._id_out(i): self._out(d) for i, d in exc.current.items()}
            raise ConflictError(ids, url=exc.url, operation=exc.operation, current=current) from exc
        self.commits += 1
        self.bytes_committed += sum(json_bytes(d) for d in puts)
        self.committed.append([dict(d) for d in puts])
        if self.lose_acks:
            self.lose_acks -= 1
            raise StoreUnavailable("injected: connection lost after the write", operation="commit")
        return receipt

    def history(self, object_id: str) -> list[Version]:
        versions = self.inner.history(self._id(object_id))
        return [attrs.evolve(v, document=self._strip(v.document)) for v in versions]

    def get_as_of(self, object_id: str, tx_id: int) -> Document | None:
        return self._out(self.inner.get_as_of(self._id(object_id), tx_id))

    def get_many_as_of(self, object_ids: Iterable[str], tx_id: int) -> dict[str, Document]:
        return self._docs(self.inner.get_many_as_of((self._id(i) for i in object_ids), tx_id))

    def session_log(self, session_id: str, after_seq: int = 0) -> list[Document]:
        entries = self.inner.session_log(self.namespace + session_id, after_seq)
        return [self._strip(doc) for doc in entries]

    def ids_of_type(self, doc_type: str) -> list[str]:
        found = self.inner.ids_of_type(doc_type)
        return sorted(self._id_out(i) for i in found if self._mine(i))

    def latest_tx(self) -> Receipt | None:
        return self.inner.latest_tx()

    def changes(self, after_tx_id: int | None = None, limit: int = 500) -> list[Change]:
        if after_tx_id is None:
            after_tx_id = self._origin
        return [
            attrs.evolve(
                change,
                documents=tuple(
                    self._strip(doc)
                    for doc in change.documents
                    if self._mine(str(doc.get("xt/id", "")))
                ),
            )
            for change in self.inner.changes(after_tx_id, limit)
        ]

    def file_versions(
        self, after_tx_id: int | None, held: Mapping[str, str] | None = None
    ) -> FileVersions:
        inner_held = None if held is None else {self._id(i): h for i, h in held.items()}
        found = self.inner.file_versions(after_tx_id, inner_held)
        mine = tuple(
            (tx, self._id_out(object_id), object_hash)
            for tx, object_id, object_hash in found.versions
            if self._mine(object_id)
        )
        documents = {
            self._id_out(object_id): self._strip(doc)
            for object_id, doc in found.documents.items()
            if self._mine(object_id)
        }
        return attrs.evolve(found, versions=mine, documents=documents)

    def close(self) -> None:
        self.inner.close()


class _Wrapped(Landing):
    """A submission through :class:`WrappedStore`: its bookkeeping happens once it lands."""

    def __init__(self, store: WrappedStore, inner: Submission, puts: list[Document]) -> None:
        self.store = store
        self.inner = inner
        self.puts = puts

    def _land(self) -> Receipt:
        return self.store._landed(self.inner.result, self.puts)


@attrs.frozen
class StoreProbe:
    """What a store holds, cheaply: compare one taken before an operation with one after."""

    latest_tx: Receipt | None
    commits: int
    bytes_committed: int
    inner_bytes: int | None
    """``MemoryStore.bytes_received`` when the inner store is the in-memory one."""

    @classmethod
    def of(cls, store: WrappedStore) -> StoreProbe:
        return cls(
            latest_tx=store.latest_tx(),
            commits=store.commits,
            bytes_committed=store.bytes_committed,
            inner_bytes=getattr(store.inner, "bytes_received", None),
        )
