"""The search index in SQLite FTS5, from Python's own ``sqlite3`` (decision 0040).

One table holds the entries (kind, owner, title, body, versions); an external-content FTS5 table
with the ``trigram`` tokenizer indexes their titles and bodies, so that every term matches as a
case-insensitive substring anywhere (``pars`` finds ``parser`` and ``ParseError``) and BM25 ranks
the hits (a title match weighs four times a body match). Terms shorter than three characters
cannot be trigram-matched: they filter with ``LIKE`` (ASCII case folding) instead.

The file is a cache: deleting it only costs a rebuild from the store. ``:memory:`` (the default)
keeps the index in this process.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Sequence
from typing import Any, Final

from selfctx.application.ports.search import (
    IndexBatch,
    IndexPosition,
    SearchEntry,
    SearchHit,
    SearchIndex,
    SearchQuery,
    SearchUnavailable,
    terms_of,
)

__all__ = ["SCHEMA_VERSION", "SqliteSearchIndex", "fts5_available"]

SCHEMA_VERSION: Final = 1
_TITLE_WEIGHT: Final = 4.0
_SNIPPET_BEFORE: Final = 60
_SNIPPET_AFTER: Final = 140

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value ANY) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS entries(
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    object_id TEXT NOT NULL,
    session_id TEXT,
    role TEXT,
    title TEXT NOT NULL,
    body TEXT NOT NULL,
    tx_id INTEGER NOT NULL,
    seq INTEGER,
    turn INTEGER,
    version INTEGER NOT NULL,
    content_hash TEXT
);
CREATE INDEX IF NOT EXISTS entries_by_session ON entries(session_id, kind);
CREATE INDEX IF NOT EXISTS entries_by_object ON entries(object_id);
CREATE TABLE IF NOT EXISTS files(
    object_id TEXT PRIMARY KEY, versions INTEGER NOT NULL, content_hash TEXT
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS members(
    session_id TEXT NOT NULL, object_id TEXT NOT NULL, PRIMARY KEY(session_id, object_id)
) WITHOUT ROWID;
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(
    title, body, content='entries', content_rowid='id', tokenize='trigram'
);
"""
_TABLES: Final = ("fts", "entries", "files", "members", "meta")


def fts5_available(connection: sqlite3.Connection) -> bool:
    """Whether this SQLite has FTS5 and the trigram tokenizer (3.34 or later)."""
    options = {row[0] for row in connection.execute("PRAGMA compile_options")}
    return "ENABLE_FTS5" in options and sqlite3.sqlite_version_info >= (3, 34, 0)


def _phrase(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def _like(term: str) -> str:
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def snippet(body: str, title: str, terms: Sequence[str]) -> str:
    """A passage around the first occurrence of any term in ``body`` (or, when only the title
    matched, the title), whitespace collapsed."""
    pattern = "|".join(re.escape(t) for t in sorted(terms, key=len, reverse=True))
    text, found = body, re.search(pattern, body, re.IGNORECASE) if pattern else None
    if found is None and pattern and re.search(pattern, title, re.IGNORECASE):
        text, found = title, re.search(pattern, title, re.IGNORECASE)
    start = 0 if found is None else found.start()
    begin = max(0, start - _SNIPPET_BEFORE)
    end = min(len(text), start + _SNIPPET_AFTER)
    passage = " ".join(text[begin:end].split())
    return ("…" if begin else "") + passage + ("…" if end < len(text) else "")


class SqliteSearchIndex(SearchIndex):
    """:class:`SearchIndex` in a SQLite database (a file, or ``:memory:``); thread-safe."""

    def __init__(self, path: str = ":memory:") -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        if not fts5_available(self._db):
            self._db.close()
            raise SearchUnavailable(
                f"SQLite {sqlite3.sqlite_version} here lacks FTS5 or its trigram tokenizer "
                "(3.34 or later, compiled with ENABLE_FTS5); search needs both"
            )
        if path != ":memory:":
            # A cache: a crash may lose the last batches, which the next catch-up reads again.
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=10000")
        with self._lock:
            self._open_schema()

    def _open_schema(self) -> None:
        db = self._db
        db.executescript(_SCHEMA)
        row = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        if row is not None and row[0] != SCHEMA_VERSION:
            for table in _TABLES:
                db.execute(f"DROP TABLE IF EXISTS {table}")
            db.executescript(_SCHEMA)
            row = None
        if row is None:
            db.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))

    # -- writing -------------------------------------------------------------------------------

    def position(self) -> IndexPosition | None:
        with self._lock:
            return self._position()

    def _position(self) -> IndexPosition | None:
        rows = dict(
            self._db.execute("SELECT key, value FROM meta WHERE key IN ('tx_id', 'tx_time')")
        )
        if "tx_id" not in rows:
            return None
        return IndexPosition(int(rows["tx_id"]), str(rows["tx_time"]))

    def apply(self, batch: IndexBatch) -> bool:
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                current = self._position()
                if (None if current is None else current.tx_id) != batch.after:
                    db.execute("ROLLBACK")
                    return False
                for entry in batch.entries:
                    self._insert(entry)
                db.executemany(
                    "INSERT OR IGNORE INTO members VALUES (?, ?)",
                    [(m.session_id, m.object_id) for m in batch.members],
                )
                db.executemany(
                    "INSERT OR REPLACE INTO meta VALUES (?, ?)",
                    [("tx_id", batch.position.tx_id), ("tx_time", batch.position.tx_time)],
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            return True

    def _insert(self, entry: SearchEntry) -> None:
        db = self._db
        version = 1
        if entry.kind == "file":
            row = db.execute(
                "SELECT versions, content_hash FROM files WHERE object_id = ?", (entry.object_id,)
            ).fetchone()
            versions, previous = (0, None) if row is None else row
            version = versions + 1
            db.execute(
                "INSERT OR REPLACE INTO files VALUES (?, ?, ?)",
                (entry.object_id, version, entry.content_hash),
            )
            if entry.body is None or (previous is not None and previous == entry.content_hash):
                return  # nothing to search, or the same text as the version before
        body = entry.body or ""
        cursor = db.execute(
            "INSERT INTO entries(kind, object_id, session_id, role, title, body, tx_id, seq,"
            " turn, version, content_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                entry.kind,
                entry.object_id,
                entry.session_id,
                entry.role,
                entry.title,
                body,
                entry.tx_id,
                entry.seq,
                entry.turn,
                version,
                entry.content_hash,
            ),
        )
        db.execute(
            "INSERT INTO fts(rowid, title, body) VALUES (?, ?, ?)",
            (cursor.lastrowid, entry.title, body),
        )

    def reset(self) -> None:
        with self._lock:
            for table in _TABLES:
                self._db.execute(f"DROP TABLE IF EXISTS {table}")
            self._open_schema()

    # -- reading -------------------------------------------------------------------------------

    def last_turn(self, session_id: str) -> int:
        with self._lock:
            row = self._db.execute(
                "SELECT max(turn) FROM entries WHERE session_id = ? AND kind = 'message'",
                (session_id,),
            ).fetchone()
        return int(row[0] or 0)

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM entries").fetchone()[0])

    def search(self, query: SearchQuery) -> list[SearchHit]:
        terms = terms_of(query.text)
        if not terms:
            return []
        long = [t for t in terms if len(t) >= 3]
        short = [t for t in terms if len(t) < 3]
        where: list[str] = []
        params: list[Any] = []
        if query.session_id is not None:
            where.append(
                "(e.session_id = ? OR (e.kind = 'file' AND e.object_id IN"
                " (SELECT object_id FROM members WHERE session_id = ?)))"
            )
            params += [query.session_id, query.session_id]
        if query.kind is not None:
            where.append("e.kind = ?")
            params.append(query.kind)
        if query.role is not None:
            where.append("e.role = ?")
            params.append(query.role)
        for term in short:
            where.append("(e.title LIKE ? ESCAPE '\\' OR e.body LIKE ? ESCAPE '\\')")
            params += [_like(term), _like(term)]
        if long:
            sql = (
                f"SELECT e.id, bm25(fts, {_TITLE_WEIGHT}, 1.0) AS rank, e.kind, e.object_id"
                " FROM fts JOIN entries e ON e.id = fts.rowid WHERE fts MATCH ?"
            )
            params.insert(0, " AND ".join(_phrase(t) for t in long))
            order = "rank, e.tx_id DESC"
        else:
            sql = "SELECT e.id, 0.0 AS rank, e.kind, e.object_id FROM entries e WHERE 1"
            order = "e.tx_id DESC"
        sql += "".join(f" AND {w}" for w in where) + f" ORDER BY {order} LIMIT ?"
        with self._lock:
            ranked = self._best(sql, params, query.limit)
            return self._hits(ranked, terms)

    def _best(self, sql: str, params: list[Any], limit: int) -> list[tuple[int, float]]:
        """The best ``limit`` rows, one per file object (its best version): rows are read in
        rank order, a few more than needed, more again if files repeat."""
        fetch = limit * 2 + 10
        while True:
            rows = self._db.execute(sql, [*params, fetch]).fetchall()
            seen: set[str] = set()
            picked: list[tuple[int, float]] = []
            for row_id, rank, kind, object_id in rows:
                if kind == "file":
                    if object_id in seen:
                        continue
                    seen.add(object_id)
                picked.append((row_id, -float(rank)))
                if len(picked) == limit:
                    return picked
            if len(rows) < fetch:
                return picked
            fetch *= 4

    def _hits(self, ranked: list[tuple[int, float]], terms: list[str]) -> list[SearchHit]:
        if not ranked:
            return []
        marks = ",".join("?" * len(ranked))
        rows = self._db.execute(
            "SELECT e.id, e.kind, e.object_id, e.session_id, e.role, e.title, e.body, e.tx_id,"
            " e.seq, e.turn, e.version, e.content_hash, f.content_hash"
            " FROM entries e LEFT JOIN files f ON f.object_id = e.object_id"
            f" WHERE e.id IN ({marks})",
            [row_id for row_id, _ in ranked],
        ).fetchall()
        by_id = {row[0]: row for row in rows}
        hits = []
        for row_id, score in ranked:
            (_, kind, object_id, session_id, role, title, body, tx_id, seq, turn, version,
             content_hash, latest_hash) = by_id[row_id]  # fmt: skip
            hits.append(
                SearchHit(
                    kind=kind,
                    object_id=object_id,
                    session_id=session_id,
                    role=role,
                    title=title,
                    snippet=snippet(body, title, terms),
                    score=score,
                    tx_id=tx_id,
                    version=version,
                    latest=kind != "file" or content_hash == latest_hash,
                    seq=seq,
                    turn=turn,
                )
            )
        return hits

    def close(self) -> None:
        with self._lock:
            self._db.close()
