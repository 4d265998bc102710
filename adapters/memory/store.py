"""A bitemporal in-memory store: every version kept with its transaction id and time.

Documents are kept as JSON text, exactly as a remote store would receive them, so a caller can
never mutate a stored version and anything JSON cannot carry is refused at commit time, as XTDB
would refuse it. ``bytes_received`` counts the JSON bytes of every committed document.
"""

from __future__ import annotations

import bisect
import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from selfctx.adapters.jsontext import loads
from selfctx.application.persistence import log_entries_of
from selfctx.application.ports.store import (
    Change,
    ConflictError,
    Document,
    Expect,
    FileVersions,
    ObjectStore,
    Receipt,
    Version,
)
from selfctx.domain.errors import InvalidInput

__all__ = ["MemoryStore"]

_LOG_TYPE = "session_log"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _encode(doc: Document) -> str:
    if not isinstance(doc, Mapping):
        raise InvalidInput("document", doc, "must be a JSON object")
    object_id = doc.get("xt/id")
    if not isinstance(object_id, str) or not object_id:
        raise InvalidInput("document id", object_id, "xt/id must be a non-empty string")
    try:
        return json.dumps(doc, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidInput("document", object_id, f"not representable as JSON: {exc}") from exc


class MemoryStore(ObjectStore):
    """The in-memory implementation of :class:`ObjectStore` (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # id -> versions as (tx_id, tx_time, json text), oldest first
        self._versions: dict[str, list[tuple[int, str, str]]] = {}
        self._types: dict[str, str] = {}
        self._logs: dict[str, list[tuple[int, str]]] = {}  # session id -> [(seq, entry id)]
        self._tx: list[tuple[int, str]] = []
        self._tx_docs: list[tuple[str, ...]] = []
        """The JSON text of each transaction's documents (the same strings ``_versions`` holds)."""
        self._files: list[tuple[int, str, str]] = []
        """``(tx_id, id, object_hash)`` of every file version, oldest first."""
        self.bytes_received = 0
        """JSON bytes of every document committed so far."""

    # -- reads -----------------------------------------------------------------------------

    def get(self, object_id: str) -> Document | None:
        versions = self._versions.get(object_id)
        return loads(versions[-1][2]) if versions else None

    def get_many(self, object_ids: Iterable[str]) -> dict[str, Document]:
        out = {}
        for object_id in object_ids:
            versions = self._versions.get(object_id)
            if versions:
                out[object_id] = loads(versions[-1][2])
        return out

    def history(self, object_id: str) -> list[Version]:
        return [
            Version(tx_id=tx_id, tx_time=tx_time, document=loads(text))
            for tx_id, tx_time, text in self._versions.get(object_id, ())
        ]

    def _as_of(self, object_id: str, tx_id: int) -> Document | None:
        versions = self._versions.get(object_id, ())
        position = bisect.bisect_right([v[0] for v in versions], tx_id)
        return loads(versions[position - 1][2]) if position else None

    def get_as_of(self, object_id: str, tx_id: int) -> Document | None:
        return self._as_of(object_id, tx_id)

    def get_many_as_of(self, object_ids: Iterable[str], tx_id: int) -> dict[str, Document]:
        out = {}
        for object_id in object_ids:
            doc = self._as_of(object_id, tx_id)
            if doc is not None:
                out[object_id] = doc
        return out

    def session_log(self, session_id: str, after_seq: int = 0) -> list[Document]:
        # Indexed by each document's last entry (decision 0134: one document may hold several)
        held = self._logs.get(session_id, [])
        start = bisect.bisect_right(held, (after_seq, "\U0010ffff"))
        docs = [loads(self._versions[doc_id][-1][2]) for _, doc_id in held[start:]]
        entries = log_entries_of(docs, session_id)
        return [entries[seq] for seq in sorted(entries) if seq > after_seq]

    def ids_of_type(self, doc_type: str) -> list[str]:
        return sorted(i for i, t in self._types.items() if t == doc_type)

    def latest_tx(self) -> Receipt | None:
        return Receipt(*self._tx[-1]) if self._tx else None

    def changes(self, after_tx_id: int | None = None, limit: int = 500) -> list[Change]:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise InvalidInput("limit", limit, "must be a positive integer")
        with self._lock:
            start = 0 if after_tx_id is None else bisect.bisect_right(self._tx, (after_tx_id, "~"))
            end = start + limit
            picked = list(zip(self._tx[start:end], self._tx_docs[start:end], strict=True))
        return [
            Change(tx_id, tx_time, tuple(loads(text) for text in texts))
            for (tx_id, tx_time), texts in picked
        ]

    # -- writes ----------------------------------------------------------------------------

    def file_versions(
        self, after_tx_id: int | None, held: Mapping[str, str] | None = None
    ) -> FileVersions:
        with self._lock:
            position = self._tx[-1][0] if self._tx else None
            if after_tx_id is None:
                return FileVersions(position, False)
            start = bisect.bisect_right(self._files, after_tx_id, key=lambda entry: entry[0])
            found = tuple(self._files[start:])
            documents: dict[str, Document] = {}
            if held:
                latest = {object_id: object_hash for _, object_id, object_hash in found}
                for object_id, object_hash in latest.items():
                    if held.get(object_id, object_hash) != object_hash:
                        documents[object_id] = loads(self._versions[object_id][-1][2])
            return FileVersions(position, True, found, documents=documents)

    def commit(self, puts: Sequence[Document], expect: Sequence[Expect] = ()) -> Receipt:
        encoded = [(_encode(doc), doc) for doc in puts]
        ids = [doc["xt/id"] for _, doc in encoded]
        if len(set(ids)) != len(ids):
            raise InvalidInput("commit", sorted(ids), "names the same document twice")
        with self._lock:
            current = {cond.object_id: self.get(cond.object_id) for cond in expect}
            failed = [
                cond.object_id
                for cond in expect
                if current[cond.object_id] != (dict(cond.document) if cond.document else None)
            ]
            if failed:
                raise ConflictError(failed, url="memory:", operation="commit", current=current)
            tx_id = (self._tx[-1][0] + 1) if self._tx else 1
            tx_time = _now()
            for text, doc in encoded:
                object_id = doc["xt/id"]
                self._versions.setdefault(object_id, []).append((tx_id, tx_time, text))
                self._types[object_id] = str(doc.get("type"))
                if doc.get("type") == _LOG_TYPE:
                    self._index_log_entry(doc)
                elif doc.get("type") == "file":
                    self._files.append((tx_id, object_id, str(doc.get("object_hash"))))
                self.bytes_received += len(text.encode("utf-8", "surrogatepass"))
            self._tx.append((tx_id, tx_time))
            self._tx_docs.append(tuple(text for text, _ in encoded))
            return Receipt(tx_id=tx_id, tx_time=tx_time)

    def _index_log_entry(self, doc: Mapping[str, Any]) -> None:
        entries = self._logs.setdefault(str(doc["session_id"]), [])
        last = doc.get("last")  # a document of several entries (decision 0134)
        key = (int(last if isinstance(last, int) else doc["seq"]), str(doc["xt/id"]))
        if not entries or entries[-1] < key:
            entries.append(key)  # the usual case: positions arrive in order
            return
        position = bisect.bisect_left(entries, key)
        if position == len(entries) or entries[position] != key:
            entries.insert(position, key)
