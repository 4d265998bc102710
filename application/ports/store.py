"""The object store port: a bitemporal document store that keeps every version.

Documents are flat JSON objects with a string ``xt/id`` (docs/specification.md §1). The store never
interprets them beyond the attributes it queries: ``xt/id``, ``type`` and, on session-log entries,
``session_id`` and ``seq`` (see :meth:`ObjectStore.session_log`). Two adapters implement this port:
the in-memory store (``selfctx.adapters.memory``) and XTDB 1.x over HTTP
(``selfctx.adapters.xtdb``). Both run the same behaviour suite in ``contracts/store.py``.
"""

from __future__ import annotations

import abc
import contextvars
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeAlias

import attrs

from selfctx.domain.errors import SelfContextError

Document: TypeAlias = Mapping[str, Any]
"""A stored document: a JSON object whose ``xt/id`` is a non-empty string."""

LOGGED: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar(
    "selfctx_store_logged", default=None
)
"""Set by a caller that wants to know when the commits it makes from this context are durable
before they are decided (decision 0138): a store whose commit has that moment (XTDB: the
transaction is in the node's synced tx-log, a node restarted after a crash indexes it, and its
preconditions are checked later, when it is indexed) calls it then, from whichever thread sends
the transaction, before :meth:`ObjectStore.commit` returns or raises. It must not block or
raise. A store without that moment (the in-memory one) never calls it: its commit is decided
when it is durable."""


@attrs.frozen
class Expect:
    """A precondition of a commit: the latest version of ``object_id`` equals ``document``.

    ``document=None`` means the object must not exist yet. If any precondition of a commit fails,
    nothing of the commit is written and the store raises :class:`ConflictError`.
    """

    object_id: str
    """Id of the object whose latest version is checked."""
    document: Document | None
    """The exact document expected as the latest version, or None for "does not exist"."""


@attrs.frozen
class Receipt:
    """What the store returns once a commit is durable and visible to reads."""

    tx_id: int
    """The transaction's id: increasing across commits (gaps are possible), the basis for as-of."""
    tx_time: str
    """The transaction time as an ISO-8601 UTC string (precision depends on the store)."""


@attrs.frozen
class Change:
    """One committed transaction and the documents it wrote, as :meth:`ObjectStore.changes`
    lists them."""

    tx_id: int
    """The transaction's id."""
    tx_time: str
    """The transaction time, ISO-8601 UTC."""
    documents: tuple[Document, ...]
    """Every document the transaction wrote, in the order it wrote them."""


@attrs.frozen
class FileVersions:
    """The file versions transactions after a point wrote (``ObjectStore.file_versions``)."""

    position: int | None
    """The last transaction this answer covers (None: the store holds none)."""
    complete: bool
    """``versions`` lists every file version written after the point asked for, up to
    ``position``; False when the store cannot tell (the caller compares all its files)."""
    versions: tuple[tuple[int, str, str], ...] = ()
    """``(tx_id, object id, object_hash)`` of each version, oldest first."""
    supported: bool = True
    """False for a store that keeps no such feed: nothing is to be learned from it this way."""
    documents: Mapping[str, Document] = attrs.field(factory=dict)
    """Asked with ``held``: by id, the document as of ``position`` of each held file whose
    latest version in ``versions`` has another hash than the one held, so that learning it
    needs no second read (decision 0106). A store may leave any out: the caller reads those."""


@attrs.frozen
class Version:
    """One version of a document, as the store recorded it."""

    tx_id: int
    """The transaction that wrote this version."""
    tx_time: str
    """The transaction time, ISO-8601 UTC."""
    document: Document
    """The document as written."""


class StoreError(SelfContextError):
    """The store could not do what was asked. Carries the store's location and the operation."""

    kind = "store_error"

    def __init__(self, message: str, *, url: str = "", operation: str = "") -> None:
        self.url = url
        self.operation = operation
        where = " ".join(part for part in (operation, url and f"at {url}") if part)
        super().__init__(f"{message} ({where})" if where else message)


class StoreUnavailable(StoreError):
    """The store cannot be reached (connection refused, timed out, node stopped). Nothing was
    written by the failed call if it was a commit that never reached the store; retrying once the
    store is back is safe because commits carry preconditions."""

    kind = "store_unavailable"


class StoreRejected(StoreError):
    """The store answered, but refused the request (a 4xx/5xx status or an error body)."""

    kind = "store_rejected"

    def __init__(
        self, message: str, *, status: int = 0, url: str = "", operation: str = ""
    ) -> None:
        self.status = status
        super().__init__(message, url=url, operation=operation)


class StoreProtocolError(StoreError):
    """The store's answer could not be understood (malformed or truncated body)."""

    kind = "store_protocol_error"


class ConflictError(StoreError):
    """A precondition of a commit failed: another writer changed an object first.

    Nothing of the commit was written. The retry policy is the caller's: re-read the objects named
    in ``object_ids``, decide again on fresh state and commit again (the application's use cases do
    this a bounded number of times, see ``selfctx.application.runner``).
    """

    kind = "conflict"

    def __init__(
        self,
        object_ids: Sequence[str],
        *,
        url: str = "",
        operation: str = "commit",
        current: Mapping[str, Document | None] | None = None,
    ) -> None:
        self.object_ids = tuple(object_ids)
        self.current: Mapping[str, Document | None] = {} if current is None else current
        """The latest versions of the expected objects as of the refusal (None: absent), when
        the store's answer carried them (decision 0106): a retry need not read them again."""
        super().__init__(
            f"another writer changed {', '.join(map(repr, self.object_ids)) or 'an object'} first",
            url=url,
            operation=operation,
        )


class Submission(abc.ABC):
    """A commit handed to the store by :meth:`ObjectStore.submit`, applied or still on its way."""

    @abc.abstractmethod
    def result(self) -> Receipt:
        """Wait until the commit is applied or refused. Returns what :meth:`ObjectStore.commit`
        would have returned, or raises what it would have raised (:class:`ConflictError` when a
        precondition failed, another :class:`StoreError` when its fate is unknown)."""


class Landing(Submission):
    """A submission whose outcome is worked out by :meth:`_land` on the first call of
    :meth:`result` and remembered: every later call returns or raises the same."""

    _outcome: Receipt | StoreError | None = None

    @abc.abstractmethod
    def _land(self) -> Receipt:
        """Wait for the commit and return its receipt, or raise why it did not land."""

    def result(self) -> Receipt:
        if self._outcome is None:
            try:
                self._outcome = self._land()
            except StoreError as exc:
                self._outcome = exc
        if isinstance(self._outcome, StoreError):
            raise self._outcome
        return self._outcome


@attrs.frozen
class Settled(Submission):
    """A submission whose outcome is already known: a receipt or the error that refused it."""

    receipt: Receipt | None = None
    error: StoreError | None = None

    def result(self) -> Receipt:
        if self.error is not None:
            raise self.error
        assert self.receipt is not None
        return self.receipt


class ObjectStore(abc.ABC):
    """A bitemporal document store: every commit adds versions, nothing is ever overwritten.

    Reads after a successful :meth:`commit` see that commit (read-your-writes) on the same store
    object. Transaction ids increase; ``as_of`` and ``history`` are by transaction.
    """

    reads_wait: bool = False
    """Reads wait on another process (a database server): a reader gains by making several at
    once, or by working while one is answered. False for a store in this process, whose reads
    are this process's own work (threads would only take turns)."""

    @abc.abstractmethod
    def get(self, object_id: str) -> Document | None:
        """Return the latest version of ``object_id``, or None if it was never written."""

    @abc.abstractmethod
    def get_many(self, object_ids: Iterable[str]) -> dict[str, Document]:
        """Return the latest version of each id that exists, in one round trip where the store
        allows (XTDB: one Datalog query). Missing ids are simply absent from the result."""

    @abc.abstractmethod
    def commit(self, puts: Sequence[Document], expect: Sequence[Expect] = ()) -> Receipt:
        """Write every document in ``puts`` as a new version, atomically: all or none.

        Preconditions in ``expect`` are checked against the latest versions at commit time; if any
        fails, nothing is written and :class:`ConflictError` is raised. Returns once the commit is
        durable (as durable as the store is) and visible to this store object's reads.
        A document without a non-empty string ``xt/id``, or with a value JSON cannot carry, raises
        ``selfctx.domain.errors.InvalidInput`` before anything is sent. Raises :class:`StoreError`
        subclasses for anything else; a failed commit leaves nothing half-written.
        """

    def submit(self, puts: Sequence[Document], expect: Sequence[Expect] = ()) -> Submission:
        """Hand a commit to the store without waiting until it is applied: :meth:`commit` in two
        halves, so that a caller can prepare its next commit while the store works on this one.

        Commits submitted through one store object are applied in the order they were
        submitted, each whole or not at all, each precondition checked against the state the
        earlier ones left (a commit that must not land unless its predecessor did says so with an
        :class:`Expect` on a document the predecessor writes). ``result()`` gives the outcome.
        Invalid documents raise ``InvalidInput`` here, before anything is sent. Reads see a
        submitted commit only once its ``result()`` has returned. The default commits at once.
        """
        try:
            return Settled(receipt=self.commit(puts, expect))
        except StoreError as exc:
            return Settled(error=exc)

    @abc.abstractmethod
    def history(self, object_id: str) -> list[Version]:
        """Every version of ``object_id``, oldest first; empty if it was never written."""

    @abc.abstractmethod
    def get_as_of(self, object_id: str, tx_id: int) -> Document | None:
        """The version of ``object_id`` that was latest right after transaction ``tx_id``."""

    @abc.abstractmethod
    def get_many_as_of(self, object_ids: Iterable[str], tx_id: int) -> dict[str, Document]:
        """:meth:`get_as_of` for many ids at once."""

    @abc.abstractmethod
    def session_log(self, session_id: str, after_seq: int = 0) -> list[Document]:
        """Every session-log entry of ``session_id`` with ``seq > after_seq``, in ``seq`` order.

        Session-log documents are those with ``type == "session_log"``, a string
        ``session_id`` and an integer ``seq``, whose id is ``log:{session_id}:{seq}`` with the
        seq zero-padded to 9 digits (``selfctx.application.persistence.log_entry_id``): a store
        may find a session's entries by that range of ids. A document holds one entry, or up to
        ``persistence.LOG_ENTRIES`` consecutive ones under the first one's id (decision 0134):
        each entry is given on its own, as ``persistence.log_entries`` rebuilds it.
        """

    @abc.abstractmethod
    def ids_of_type(self, doc_type: str) -> list[str]:
        """Ids of every object whose latest version has ``type == doc_type``, sorted."""

    @abc.abstractmethod
    def latest_tx(self) -> Receipt | None:
        """The latest committed transaction, or None for an empty store."""

    def changes(self, after_tx_id: int | None = None, limit: int = 500) -> list[Change]:
        """Committed transactions after ``after_tx_id`` (from the first if None), oldest first,
        at most ``limit`` of them, each with the documents it wrote: what a projection built from
        the store (the search index) reads to catch up. Transactions whose preconditions failed
        wrote nothing and are not listed. The default raises :class:`StoreError`: a store that
        cannot list its transactions cannot feed a projection."""
        raise StoreError(f"{type(self).__name__} cannot list its transactions", operation="changes")

    def get_many_fields(
        self, object_ids: Iterable[str], fields: Sequence[str]
    ) -> dict[str, Document]:
        """:meth:`get_many` with only these top-level ``fields`` of each document (and
        ``xt/id``): what a client reads of objects whose content it does not keep. The default
        reads whole documents and leaves the rest out."""
        wanted = {"xt/id", *fields}
        return {
            object_id: {k: v for k, v in doc.items() if k in wanted}
            for object_id, doc in self.get_many(object_ids).items()
        }

    def file_versions(
        self, after_tx_id: int | None, held: Mapping[str, str] | None = None
    ) -> FileVersions:
        """Which file versions the transactions after ``after_tx_id`` wrote (None: from where
        the store can say; the answer is then not ``complete`` but gives a ``position`` to ask
        from next time). Clients learn from it the versions other clients wrote of the files
        their sessions hold (decision 0066). ``held`` (file id -> the object_hash the caller
        holds) asks for the :attr:`FileVersions.documents` of the held files with a newer
        version as well (decision 0106). The default keeps no feed (``supported`` False)."""
        latest = self.latest_tx()
        return FileVersions(latest.tx_id if latest else None, False, (), supported=False)

    def versions_at_hand(
        self, after_tx_id: int | None, held: Mapping[str, str] | None = None
    ) -> FileVersions | None:
        """:meth:`file_versions`' answer when this process can give it without asking another
        (decision 0148: the node pushes its feed to each process), else None. The default can
        never."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook, most stores hold nothing
        """Release connections or other resources. The default does nothing."""
