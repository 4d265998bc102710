"""The object store port over an XTDB 1.x node.

One :meth:`XtdbStore.commit` is one XTDB transaction: a ``match`` op per precondition (a document,
or null for "must not exist"), then a ``put`` per document. XTDB applies a transaction whole or
not at all when it indexes it; the store awaits the transaction by id, then asks whether it was
committed, and raises :class:`ConflictError` if a ``match`` failed. On the project's own node
that is one request (``submit-tx?await-timeout=``); on upstream's HTTP server, three. Nothing
ever sleeps, and no read depends on a clock: every read is pinned to a far-future valid time, so
it returns the latest version as of the node's latest transaction (or as of ``tx_id``), whatever
the clocks of the node, PostgreSQL and this machine say.

:meth:`XtdbStore.submit` is the same transaction sent from a background thread without waiting
for it (decision 0014), and on our node long string values go as raw UTF-8 after the JSON
(decision 0015).

Commits made at the same moment by several threads of one process (the proxy's sessions) go to
the node together (decision 0114): while one transaction is on its way, the commits that arrive
wait, and the next sender takes those of them that touch none of each other's documents as one
transaction. Each keeps its own outcome: a member whose preconditions hold when a merged
transaction is refused for another's is sent again, and a member that fails alone fails alone.

Documents go out as JSON and come back as JSON, every string in them with its surrogate code
points escaped on the way out and restored on the way back (:mod:`selfctx.adapters.xtdb.text`,
decision 0026), since XTDB keeps strings as UTF-8, which has no form for them. The node
(``xtdb/src/selfctx/http_server.clj``) reads JSON integers as 64-bit longs and keeps every map,
list, string and null as sent, so a document read back and given as an :class:`Expect` hashes
the same and its ``match`` passes.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx

from selfctx.adapters.xtdb import edn, secret, text
from selfctx.adapters.xtdb.client import Connections, XtdbClient
from selfctx.adapters.xtdb.stream import VersionsStream
from selfctx.application.persistence import LOG_ENTRIES, log_entries_of
from selfctx.application.ports.store import (
    LOGGED,
    Change,
    ConflictError,
    Document,
    Expect,
    FileVersions,
    Landing,
    ObjectStore,
    Receipt,
    StoreError,
    StoreUnavailable,
    Submission,
    Version,
)
from selfctx.domain.errors import InvalidInput, SelfContextError

__all__ = ["XtdbStore", "open_store"]

log = logging.getLogger("selfctx.xtdb")

# Later than any transaction time, earlier than the dates XTDB mishandles (Long/MAX_VALUE).
_VALID_TIME = "9999-12-31T00:00:00Z"

_PULL_BY_ID = "{:find [(pull ?e [*])] :in [[?e ...]] :where [[?e :xt/id]]}"
"""Documents by id: the ids bind the entities themselves, and the clause keeps those that exist
(as of the query's transaction). Binding them to a separate ``?id`` joined on ``:xt/id`` gave
the same answers, but a batch of 8 to 15 ids cost the node 120-180 ms of CPU (as a scan would),
where any other size from 1 to 40 costs it 0-20 ms (decision 0109)."""
_SESSION_LOG = (
    "{:find [(pull ?e [*]) ?id] :in [?low ?high]"
    " :where [[?e :xt/id ?id] [(> ?id ?low)] [(< ?id ?high)]] :order-by [[?id :asc]]}"
)
"""A session's log entries are ``log:{session}:{seq, 9 digits}``: the ids after a position are
one range of the id index, which the node scans from there. A query by ``session_id`` and ``seq``
visited every entry of the session first (6 s for a tail of 100 among 12,000 entries, against
0.12 s by range, on a 2-core machine)."""
_IDS_OF_TYPE = "{:find [?e] :in [?type] :where [[?e :type ?type]]}"


_MAY_ESCAPE = re.compile(r"\\u(?:d[89a-f]|fdd0)")
"""Where ASCII JSON may hold a string that :func:`text.encode` changes: a surrogate code point
(written ``\\udXXX``; a character beyond U+FFFF is written as a pair of them too) or U+FDD0.
JSON without a match holds none (a match may be a false alarm: an escaped backslash followed by
such letters, or a character beyond U+FFFF; the strings are then encoded one by one)."""


GROUP_MEMBERS = 16
"""The most commits one transaction carries when commits made at the same moment are sent
together (decision 0114; the proxy's 8-client benchmark groups 1 to 4)."""


class _Escapes(Exception):
    """A string of a transaction may need :mod:`selfctx.adapters.xtdb.text`'s escapes."""


def _json_bytes(value: Any, what: str, plain: bool = False) -> bytes:
    """``value`` as JSON; ``plain``: raises :class:`_Escapes` if a string in it may need the
    node's escapes (:data:`_MAY_ESCAPE`)."""
    try:
        text = json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidInput("document", what, f"not representable as JSON: {exc}") from exc
    if plain and _MAY_ESCAPE.search(text) is not None:
        raise _Escapes()
    # CPython writes ASCII JSON about 2.5 times as fast as UTF-8 JSON, and for text that is
    # nearly all ASCII (source files) it is as compact. When the \u escapes are more than a
    # twentieth of the body, UTF-8 is worth its time: up to 3 times smaller.
    # No string holds a surrogate by now (selfctx.adapters.xtdb.text), so UTF-8 always works.
    if text.count("\\u") * 6 > len(text) // 20:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return text.encode("ascii")


BLOB_CHARS = 4096
"""String values at least this long go as raw UTF-8 after the JSON head (decision 0015)."""


def _lift_blobs(
    doc: dict[str, Any], index: int, blobs: list[list[Any]], raw: list[bytes], plain: bool = False
) -> dict[str, Any]:
    """``doc`` with each long top-level string value lifted out into ``raw`` (and listed in
    ``blobs`` as ``[op, key, length]``), null in its place; other values stay where they are.
    ``plain``: raises :class:`_Escapes` if a lifted string needs the node's escapes."""
    lifted: dict[str, Any] | None = None
    for key, value in doc.items():
        if not isinstance(value, str) or len(value) < BLOB_CHARS:
            continue
        if plain and not value.isascii() and text.encode_str(value) is not value:
            raise _Escapes()
        data = value.encode("utf-8")  # encoded by text.encode (or needing none): no surrogate
        if lifted is None:
            lifted = dict(doc)
        lifted[key] = None
        blobs.append([index, key, len(data)])
        raw.append(data)
    return doc if lifted is None else lifted


def _check(doc: Document) -> dict[str, Any]:
    if not isinstance(doc, Mapping):
        raise InvalidInput("document", doc, "must be a JSON object")
    object_id = doc.get("xt/id")
    if not isinstance(object_id, str) or not object_id:
        raise InvalidInput("document id", object_id, "xt/id must be a non-empty string")
    return dict(doc)


class XtdbStore(ObjectStore):
    reads_wait = True
    """:class:`ObjectStore` on an XTDB 1.x node reached through ``client``.

    ``timeout`` (seconds) bounds every method: a stopped or hung node makes the call raise
    :class:`StoreUnavailable` within it. ``bytes_sent`` counts the request bodies of commits.
    """

    def __init__(self, client: XtdbClient, *, timeout: float = 10.0, owns_http: bool = False):
        self.client = client
        self.timeout = timeout
        self.url = client.url
        self._owns_http = owns_http
        self._lock = threading.Lock()
        self.bytes_sent = 0
        """Bytes of every submit-tx request body sent so far (the benchmarks report it)."""
        self._sender: ThreadPoolExecutor | None = None
        """The thread :meth:`submit` sends from, started on first use."""
        self._turns = threading.Condition(threading.Lock())
        """Guards :attr:`_waiting` and :attr:`_sending` (:meth:`commit`'s groups)."""
        self._waiting: list[_Member] = []
        """Commits that arrived while a transaction was on its way, oldest first."""
        self._sending = False
        """A thread of this store is sending a transaction of :meth:`commit`'s."""
        self.blobs = False
        """Send long strings as raw UTF-8 after a JSON head (decision 0015): only our node reads
        that, so :func:`open_store` turns it on when the node's status says it does."""
        self.feed = False
        """The node keeps the file versions feed (decision 0066; our node's status says so)."""
        self.feed_documents = False
        """The feed also answers with the documents of the files a client holds (decision
        0106; our node's status says so)."""
        self.feed_stream = False
        """The node pushes the feed to a stream each process holds (decision 0148; our node's
        status says so): :meth:`file_versions` then asks the node only when the stream cannot
        answer."""
        self._stream: VersionsStream | None = None
        self.logged = False
        """A commit's answer comes in two lines, the first once the transaction is in the
        node's log (decision 0138; our node's status says so): callers' ``LOGGED`` hooks are
        called then."""

    # -- helpers ---------------------------------------------------------------------------

    def _deadline(self) -> float:
        return time.monotonic() + self.timeout

    @staticmethod
    def _left(deadline: float) -> float:
        # Never hand httpx a zero or negative timeout: it would mean "no limit" or fail oddly.
        return max(0.05, deadline - time.monotonic())

    def _pull(self, ids: Iterable[str], tx_id: int | None, operation: str) -> dict[str, Document]:
        wanted = list(dict.fromkeys(text.encode_str(i) for i in ids))
        if not wanted:
            return {}
        body = f"{{:query {_PULL_BY_ID} :in-args [{edn.dumps(wanted)}]}}"
        rows = self.client.query(
            body, operation=operation, valid_time=_VALID_TIME, timeout=self.timeout, tx_id=tx_id
        )
        # Results are a bag: the same document may come back more than once.
        return {row[0]["xt/id"]: row[0] for row in rows if row and isinstance(row[0], dict)}

    # -- reads -----------------------------------------------------------------------------

    def get(self, object_id: str) -> Document | None:
        return self.client.entity(
            text.encode_str(object_id), valid_time=_VALID_TIME, timeout=self.timeout
        )

    def get_many(self, object_ids: Iterable[str]) -> dict[str, Document]:
        return self._pull(object_ids, None, "get-many")

    def get_many_fields(
        self, object_ids: Iterable[str], fields: Sequence[str]
    ) -> dict[str, Document]:
        # A pull of named attributes: the node reads the documents but sends only these.
        names = " ".join(edn.keyword(f) for f in dict.fromkeys(["xt/id", *fields]))
        query = _PULL_BY_ID.replace("(pull ?e [*])", f"(pull ?e [{names}])")
        wanted = list(dict.fromkeys(text.encode_str(i) for i in object_ids))
        if not wanted:
            return {}
        body = f"{{:query {query} :in-args [{edn.dumps(wanted)}]}}"
        rows = self.client.query(
            body, operation="get-many-fields", valid_time=_VALID_TIME, timeout=self.timeout
        )
        return {row[0]["xt/id"]: row[0] for row in rows if row and isinstance(row[0], dict)}

    def get_as_of(self, object_id: str, tx_id: int) -> Document | None:
        # A query, not /entity: upstream's /entity ignores tx-id, /query honours it.
        return self._pull([object_id], tx_id, "get-as-of").get(object_id)

    def get_many_as_of(self, object_ids: Iterable[str], tx_id: int) -> dict[str, Document]:
        return self._pull(object_ids, tx_id, "get-many-as-of")

    def history(self, object_id: str) -> list[Version]:
        entries = self.client.entity_history(
            text.encode_str(object_id), valid_time=_VALID_TIME, timeout=self.timeout
        )
        versions = [
            Version(tx_id=e["txId"], tx_time=str(e.get("txTime")), document=e["doc"])
            for e in entries
            if isinstance(e.get("doc"), dict)  # a delete has no document
        ]
        return sorted(versions, key=lambda v: v.tx_id)

    def session_log(self, session_id: str, after_seq: int = 0) -> list[Document]:
        after = max(0, int(after_seq))
        sid = text.encode_str(session_id)
        # A document holds up to LOG_ENTRIES entries under its first one's id (decision 0134):
        # the one holding entry after + 1 begins at most LOG_ENTRIES - 1 before it.
        start = max(0, after + 1 - LOG_ENTRIES)
        low, high = edn.dumps(f"log:{sid}:{start:09d}"), edn.dumps(f"log:{sid}:~")
        body = f"{{:query {_SESSION_LOG} :in-args [{low} {high}]}}"
        rows = self.client.query(
            body, operation="session-log", valid_time=_VALID_TIME, timeout=self.timeout
        )
        # The range may hold other documents (a session whose id begins with this one's and a
        # colon): each document is checked for what a session's log document is.
        docs = [
            row[0]
            for row in rows
            if row
            and isinstance(row[0], dict)
            and row[0].get("type") == "session_log"
            and row[0].get("session_id") == session_id
            and isinstance(row[0].get("seq"), int)
        ]
        entries = {
            seq: entry for seq, entry in log_entries_of(docs, session_id).items() if seq > after_seq
        }
        return [entries[seq] for seq in sorted(entries)]

    def ids_of_type(self, doc_type: str) -> list[str]:
        body = f"{{:query {_IDS_OF_TYPE} :in-args [{edn.dumps(text.encode_str(doc_type))}]}}"
        rows = self.client.query(
            body, operation="ids-of-type", valid_time=_VALID_TIME, timeout=self.timeout
        )
        return sorted({row[0] for row in rows if row and isinstance(row[0], str)})

    def latest_tx(self) -> Receipt | None:
        deadline = self._deadline()
        latest = self.client.latest_completed_tx(timeout=self._left(deadline))
        if latest is None:
            return None
        if self.client.tx_committed(latest["txId"], timeout=self._left(deadline)):
            return Receipt(tx_id=latest["txId"], tx_time=latest["txTime"])
        # The latest transaction failed a precondition; the tx-log lists committed ones only.
        window = 16
        while True:
            after = latest["txId"] - window
            entries = self.client.tx_log(
                after if after >= 0 else None, timeout=self._left(deadline)
            )
            entries = [e for e in entries if e["txId"] <= latest["txId"]]
            if entries:
                last = max(entries, key=lambda e: e["txId"])
                return Receipt(tx_id=last["txId"], tx_time=last["txTime"])
            if after < 0:
                return None
            window *= 8

    def changes(self, after_tx_id: int | None = None, limit: int = 500) -> list[Change]:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise InvalidInput("limit", limit, "must be a positive integer")
        entries = self.client.tx_log(after_tx_id, timeout=self.timeout, with_ops=True, limit=limit)
        return [
            Change(
                tx_id=entry["txId"],
                tx_time=entry["txTime"],
                documents=tuple(
                    op[1]
                    for op in entry["txOps"]
                    if isinstance(op, list)
                    and len(op) > 1
                    and op[0] == "put"
                    and isinstance(op[1], dict)
                ),
            )
            for entry in entries
        ]

    def versions_at_hand(
        self, after_tx_id: int | None, held: Mapping[str, str] | None = None
    ) -> FileVersions | None:
        stream = self._versions_stream()
        return None if stream is None else stream.answer(after_tx_id, held)

    def _versions_stream(self) -> VersionsStream | None:
        """This process's stream of the node's feed, opened on first use (decision 0148)."""
        if not self.feed_stream or self.client.connections is None:
            return None
        stream = self._stream
        if stream is None or not stream.usable:
            with self._lock:
                stream = self._stream
                if stream is None or not stream.usable:
                    connections = self.client.connections
                    stream = self._stream = VersionsStream(
                        connections.host,
                        connections.port,
                        lambda: self.client.http.headers.get("Authorization"),
                        timeout=self.timeout,
                    )
        return stream

    def file_versions(
        self, after_tx_id: int | None, held: Mapping[str, str] | None = None
    ) -> FileVersions:
        known = self.versions_at_hand(after_tx_id, held)
        if known is not None:
            return known
        body = None
        if held and self.feed_documents and after_tx_id is not None:
            pairs = [[text.encode_str(i), text.encode_str(h)] for i, h in held.items()]
            body = _json_bytes({"held": pairs}, "held files")
        answer = (
            self.client.versions(after_tx_id, timeout=self.timeout, held=body)
            if self.feed
            else None
        )
        if answer is None:  # a node without the feed
            return super().file_versions(after_tx_id)
        position = answer.get("position")
        position = position if isinstance(position, int) and position >= 0 else None
        versions = tuple((int(v[0]), str(v[1]), str(v[2])) for v in answer["versions"])
        documents = {str(doc["xt/id"]): doc for doc in answer.get("documents", ())}
        return FileVersions(position, answer["complete"], versions, documents=documents)

    # -- writes ----------------------------------------------------------------------------

    def _body(self, puts: Sequence[Document], expect: Sequence[Expect]) -> tuple[bytes, int]:
        """The transaction's request body, and the length of its JSON head when long strings
        follow it as raw UTF-8 (0: the body is all JSON).

        Every string goes out as :mod:`selfctx.adapters.xtdb.text` encodes it. Nearly every
        transaction holds no string that encoding changes, and its JSON says so in one search
        (:data:`_MAY_ESCAPE`): it is sent as it is. Only a transaction the search cannot clear
        has every string encoded one by one (a walk over every value: about a tenth of a
        millisecond for one turn's documents) and is written again."""
        docs = [_check(doc) for doc in puts]
        matches = [(e.object_id, None if e.document is None else dict(e.document)) for e in expect]
        try:
            body, head = self._encoded(docs, matches, plain=True)
        except _Escapes:
            body, head = self._encoded(
                [text.encode(doc) for doc in docs],
                [(text.encode_str(i), None if d is None else text.encode(d)) for i, d in matches],
                plain=False,
            )
        with self._lock:
            self.bytes_sent += len(body)
        return body, head

    def _encoded(
        self,
        docs: list[dict[str, Any]],
        matches: list[tuple[str, dict[str, Any] | None]],
        *,
        plain: bool,
    ) -> tuple[bytes, int]:
        """The body of a transaction whose strings are encoded already, or (``plain``) need no
        encoding: :class:`_Escapes` is raised where one may."""
        ids = [doc["xt/id"] for doc in docs]
        if len(set(ids)) != len(ids):
            raise InvalidInput("commit", sorted(ids), "names the same document twice")
        # Preconditions first: each match sees the state before this transaction's puts.
        ops: list[list[Any]] = [["match", object_id, doc] for object_id, doc in matches]
        ops += [["put", doc] for doc in docs]
        what = ", ".join(ids) or "commit"
        blobs: list[list[Any]] = []
        raw: list[bytes] = []
        if self.blobs:
            for index, op in enumerate(ops):
                slot = 1 if op[0] == "put" else 2
                if op[slot] is not None:
                    op[slot] = _lift_blobs(op[slot], index, blobs, raw, plain)
        if blobs:
            head = _json_bytes({"tx-ops": ops, "blobs": blobs}, what, plain)
            return b"".join([head, *raw]), len(head)
        return _json_bytes({"tx-ops": ops}, what, plain), 0

    def commit(self, puts: Sequence[Document], expect: Sequence[Expect] = ()) -> Receipt:
        """One transaction of ``puts`` and ``expect`` (the port's contract). A commit made while
        another thread's is on its way waits for it, and then goes with the others that waited
        and touch none of its documents, in one transaction (decision 0114)."""
        member = _Member.of(puts, expect, self._deadline())
        with self._turns:
            self._waiting.append(member)
        while True:  # each round sends the oldest waiting commit at least: bounded
            with self._turns:
                while self._sending and not member.done:
                    left = member.deadline - time.monotonic()
                    if left <= 0 and member in self._waiting:
                        self._waiting.remove(member)
                        raise StoreUnavailable(
                            f"no turn to send within {self.timeout:.2f} s",
                            url=self.url,
                            operation="commit",
                        )
                    # one taken into a group is answered within the group's deadline
                    self._turns.wait(max(left, 0.05))
                if member.done:
                    return member.result()
                group = _take(self._waiting)
                self._sending = True
            try:
                self._send_group(group)
            finally:
                with self._turns:
                    self._sending = False
                    for taken in group:
                        taken.done = True
                    self._turns.notify_all()

    def _send_group(self, group: list[_Member]) -> None:
        """Send ``group`` as one transaction and give each member its outcome (never raises):
        the receipt, or the error that is its own. A refused merged transaction wrote nothing:
        a member whose preconditions the refusal shows unchanged is sent again alone, as is
        every member when the refusal does not say (or a document could not be encoded)."""
        # The latest of the members' deadlines: one that waited long for its turn does not cut
        # the others' time short (a member's commit ends within twice the timeout at most).
        deadline = max(m.deadline for m in group)
        if len(group) == 1:
            only = group[0]
            only.settle(
                functools.partial(
                    self._commit_once, only.puts, only.expect, deadline, _hooks(group)
                )
            )
            return
        puts = [doc for m in group for doc in m.puts]
        expect = [e for m in group for e in m.expect]
        try:
            receipt = self._commit_once(puts, expect, deadline, _hooks(group))
        except ConflictError as exc:
            again = []
            for m in group:
                ids = [e.object_id for e in m.expect]
                changed = _changed(m.expect, exc.current)
                if exc.current and all(i in exc.current for i in ids) and changed:
                    current = {i: exc.current[i] for i in ids}
                    m.outcome = ConflictError(
                        changed, url=self.url, operation="commit", current=current
                    )
                else:
                    again.append(m)
            for m in again:
                hooks = _hooks([m])
                m.settle(functools.partial(self._commit_once, m.puts, m.expect, m.deadline, hooks))
        except InvalidInput:
            for m in group:
                hooks = _hooks([m])
                m.settle(functools.partial(self._commit_once, m.puts, m.expect, m.deadline, hooks))
        except Exception as exc:  # the same fate for each (a store's error: unknown whether
            for m in group:  # it landed, as for a commit alone), each raising its own copy
                m.outcome = _own(exc)
        else:
            for m in group:
                m.outcome = receipt

    def _commit_once(
        self,
        puts: Sequence[Document],
        expect: Sequence[Expect],
        deadline: float,
        hooks: Sequence[Callable[[], None]] = (),
    ) -> Receipt:
        """One transaction, sent now; ``hooks`` are called once it is in the node's log (on a
        node that says so, decision 0138), before it is decided."""
        body, head = self._body(puts, expect)
        left = self._left(deadline)

        def logged(_tx: Mapping[str, Any]) -> None:
            for hook in hooks:
                try:
                    hook()
                except Exception:  # a caller's bug: its commit goes on
                    log.exception("a hook for a logged transaction failed")

        # The server gives up a little before the HTTP timeout, so its answer still arrives.
        tx = self.client.submit_tx(
            body,
            timeout=left,
            wait=max(0.001, left - 0.25),
            blob_head=head,
            logged=logged if hooks and self.logged else None,
        )
        committed = tx.get("txCommitted?")
        if committed is None:  # upstream's server: await and ask, two more round trips
            return self._settle(tx, expect, deadline)
        if not committed:
            current = _current(tx.get("current"))
            if current is None:  # a node that does not say: read them
                raise ConflictError(self._stale(expect), url=self.url, operation="commit")
            raise ConflictError(
                _changed(expect, current) or [e.object_id for e in expect],
                url=self.url,
                operation="commit",
                current=current,
            )
        return Receipt(tx_id=tx["txId"], tx_time=tx["txTime"])

    def submit(self, puts: Sequence[Document], expect: Sequence[Expect] = ()) -> Submission:
        """Send the transaction from one background thread, in submission order, and return at
        once. The node answers a plain ``submit-tx`` as soon as the transaction is in its log, so
        it takes in the next while it indexes this one; ``result()`` awaits the transaction and
        asks whether it committed. Each request is bounded by ``timeout``: sending (after those
        submitted earlier) and then awaiting."""
        body, head = self._body(puts, expect)
        with self._lock:
            if self._sender is None:
                self._sender = ThreadPoolExecutor(1, thread_name_prefix="xtdb-submit")
            sent = self._sender.submit(
                self.client.submit_tx, body, timeout=self.timeout, blob_head=head
            )
        return _Submitted(self, sent, tuple(expect))

    def _settle(
        self, tx: Mapping[str, Any], expect: Sequence[Expect], deadline: float | None = None
    ) -> Receipt:
        """Await a submitted transaction and ask whether it committed."""
        deadline = deadline or self._deadline()
        self.await_tx(tx["txId"], deadline=deadline)
        if not self.client.tx_committed(tx["txId"], timeout=self._left(deadline)):
            raise ConflictError(self._stale(expect), url=self.url, operation="commit")
        return Receipt(tx_id=tx["txId"], tx_time=tx["txTime"])

    def await_tx(self, tx_id: int, *, deadline: float | None = None) -> None:
        """Block until this node has indexed transaction ``tx_id`` (written through any node of
        the cluster), so that reads here see it. Raises :class:`StoreUnavailable` on timeout."""
        deadline = deadline or self._deadline()
        left = self._left(deadline)
        # The server gives up a little before the HTTP timeout, so its answer still arrives.
        self.client.await_tx(tx_id, wait=max(0.001, left - 0.25), timeout=left)

    def _stale(self, expect: Sequence[Expect]) -> list[str]:
        """The expected ids whose latest version now differs (all of them if that fails)."""
        try:
            current = self.get_many(e.object_id for e in expect)
        except StoreError:
            return [e.object_id for e in expect]
        return _changed(expect, current) or [e.object_id for e in expect]

    def close(self) -> None:
        """Finish sending what was submitted, then close the HTTP connections if this store
        opened them (see :func:`open_store`)."""
        with self._lock:
            sender, self._sender = self._sender, None
            stream, self._stream = self._stream, None
        if sender is not None:
            sender.shutdown(wait=True)
        if stream is not None and stream.usable:
            stream.close()
        if self._owns_http:
            self.client.http.close()
            if self.client.connections is not None:
                self.client.connections.close()


def _changed(expect: Sequence[Expect], current: Mapping[str, Document | None]) -> list[str]:
    """The expected ids whose version in ``current`` is not the one expected."""
    return [
        e.object_id
        for e in expect
        if current.get(e.object_id) != (None if e.document is None else dict(e.document))
    ]


def _current(answer: Any) -> dict[str, Document | None] | None:
    """The ``current`` of a refused commit's answer (decision 0106): by id, the document each
    ``match`` named as of the refused transaction (None: it does not exist); None when the
    answer has none, or not in that shape."""
    if not isinstance(answer, list):
        return None
    out: dict[str, Document | None] = {}
    for pair in answer:
        if not (
            isinstance(pair, list)
            and len(pair) == 2
            and isinstance(pair[0], str)
            and (pair[1] is None or isinstance(pair[1], dict))
        ):
            return None
        out[pair[0]] = pair[1]
    return out


class _Member:
    """A commit waiting for its turn (:meth:`XtdbStore.commit`): its checked documents, its
    preconditions, the ids it writes and matches, and, once sent, its outcome."""

    __slots__ = ("deadline", "done", "expect", "logged", "matched", "outcome", "puts", "written")

    def __init__(
        self, puts: list[dict[str, Any]], expect: tuple[Expect, ...], deadline: float
    ) -> None:
        self.puts = puts
        self.expect = expect
        self.deadline = deadline
        self.written = frozenset(doc["xt/id"] for doc in puts)
        self.matched = frozenset(e.object_id for e in expect)
        self.done = False
        self.outcome: Receipt | BaseException | None = None
        self.logged = LOGGED.get()
        """The caller's hook for the moment its transaction is in the log (decision 0138),
        taken in the caller's thread."""

    @classmethod
    def of(cls, puts: Sequence[Document], expect: Sequence[Expect], deadline: float) -> _Member:
        """Checked here, in the caller's thread: a bad document is its caller's error alone."""
        docs = [_check(doc) for doc in puts]
        ids = [doc["xt/id"] for doc in docs]
        if len(set(ids)) != len(ids):
            raise InvalidInput("commit", sorted(ids), "names the same document twice")
        return cls(docs, tuple(expect), deadline)

    def settle(self, send: Callable[[], Receipt]) -> None:
        try:
            self.outcome = send()
        except Exception as exc:  # handed to the member's own thread, which raises it
            self.outcome = exc

    def result(self) -> Receipt:
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        if self.outcome is None:  # its sender was interrupted: the fate is unknown
            raise StoreUnavailable("the commit's transaction was not answered", operation="commit")
        return self.outcome


def _hooks(group: Sequence[_Member]) -> list[Callable[[], None]]:
    """The members' hooks for their transaction being in the log (decision 0138)."""
    return [m.logged for m in group if m.logged is not None]


def _own(exc: Exception) -> Exception:
    """A copy of ``exc`` for one more thread to raise (``exc`` itself if it cannot be copied)."""
    try:
        return copy.copy(exc)
    except Exception:  # an exception class whose arguments do not rebuild it
        return exc


def _take(waiting: list[_Member]) -> list[_Member]:
    """The next transaction's members, taken out of ``waiting``: the oldest, then each later
    one (at most :data:`GROUP_MEMBERS`) that writes no document another member writes or
    matches, and matches none another writes. Such commits give the same result in any order,
    so sending them as one transaction (every ``match`` first, then every ``put``) is what
    sending them one after the other would give."""
    group = [waiting[0]]
    written = set(waiting[0].written)
    touched = written | waiting[0].matched
    for member in waiting[1:]:
        if len(group) == GROUP_MEMBERS:
            break
        if member.written.isdisjoint(touched) and member.matched.isdisjoint(written):
            group.append(member)
            written |= member.written
            touched |= member.written | member.matched
    taken = {id(m) for m in group}
    waiting[:] = [m for m in waiting if id(m) not in taken]
    return group


class _Submitted(Landing):
    def __init__(
        self, store: XtdbStore, sent: Future[dict[str, Any]], expect: tuple[Expect, ...]
    ) -> None:
        self._store = store
        self._sent = sent
        self._expect = expect

    def _land(self) -> Receipt:
        return self._store._settle(self._sent.result(), self._expect)


def open_store(url: str, *, timeout: float = 10.0, key: str | None = None) -> XtdbStore:
    """An :class:`XtdbStore` on the node at ``url`` (``xtdb://host:port`` or ``http://...``).

    ``key`` is the node's secret; by default it is read from the node's key file
    (:mod:`selfctx.adapters.xtdb.secret`), which every node this user started has. Checks that
    the node answers and lets it index everything already in its tx-log, so the store's first
    reads see every commit made before it was opened (through any node).
    """
    base = url.rstrip("/")
    if base.startswith("xtdb://"):
        base = "http://" + base.removeprefix("xtdb://")
    http = httpx.Client(base_url=base, headers={"Accept": "application/json"}, timeout=timeout)
    parsed = urllib.parse.urlsplit(base)
    connections = None
    if parsed.scheme == "http" and parsed.hostname:
        connections = Connections(parsed.hostname, parsed.port or 80)
    client = XtdbClient(
        http,
        key=(lambda: key) if key is not None else (lambda: secret.read_key(base)),
        key_hint="the key argument" if key is not None else str(_key_path(base)),
        connections=connections,
    )
    store = XtdbStore(client, timeout=timeout, owns_http=True)
    try:
        status = store.client.status(timeout=timeout)
        store.blobs = status.get("selfctxBlobs") == 1
        store.feed = status.get("selfctxVersions") == 1
        store.feed_documents = status.get("selfctxVersionDocuments") == 1
        store.logged = status.get("selfctxLogged") == 1
        store.feed_stream = store.feed and status.get("selfctxVersionStream") == 1
        store.client.sync(wait=max(0.001, timeout - 0.25), timeout=timeout)
    except BaseException:
        http.close()
        if connections is not None:
            connections.close()
        raise
    return store


def _key_path(url: str) -> str:
    try:
        return str(secret.key_file(url))
    except SelfContextError as exc:
        return f"(no key file: {exc})"
