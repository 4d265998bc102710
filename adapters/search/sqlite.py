"""The search index in SQLite FTS5, from Python's own ``sqlite3`` (decision 0040).

One table holds the entries (kind, owner, title, body, versions); an external-content FTS5 table
with the ``trigram`` tokenizer indexes their titles and bodies, so that every term matches as a
case-insensitive substring anywhere (``pars`` finds ``parser`` and ``ParseError``) and BM25 ranks
the hits (a title match weighs four times a body match). Terms shorter than three characters
cannot be trigram-matched: they filter with ``LIKE`` (ASCII case folding) instead.

Who may see an entry, and what it is, are tags in a third indexed column, ``scope``: one tag per
session that may see it (a file version carries one per session with the file in its index,
rewritten when another session meets the file), one for its kind and one for its role. So a
session's query is one full-text match, and BM25 scores only that session's rows. A tag is three
characters of Unicode's private use area, exactly one trigram: matching it reads one posting
list instead of intersecting the trigrams of a longer name. Scoring costs about two microseconds a
row, so a term that matches a large part of a big store is ranked among its most recent
:data:`RANK_WINDOW` matches only (decision 0040).

The file is a cache: deleting it only costs a rebuild from the store. ``:memory:`` (the default)
keeps the index in this process.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
from collections.abc import Sequence
from typing import Any, Final

import attrs

from selfctx.application.ports.search import (
    Encounter,
    IndexBatch,
    IndexPosition,
    SearchEntry,
    SearchHit,
    SearchIndex,
    SearchQuery,
    SearchUnavailable,
    terms_of,
)

__all__ = ["RANK_WINDOW", "SCHEMA_VERSION", "SqliteSearchIndex", "fts5_available"]

SCHEMA_VERSION: Final = 4
RANK_WINDOW: Final = 5_000
"""A query matching more rows than this is ranked among its most recent matches only."""
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
    content_hash TEXT,
    scope TEXT NOT NULL,
    reported_by TEXT
);
CREATE INDEX IF NOT EXISTS entries_by_session ON entries(session_id, kind);
CREATE INDEX IF NOT EXISTS entries_by_object ON entries(object_id);
CREATE TABLE IF NOT EXISTS files(
    object_id TEXT PRIMARY KEY, versions INTEGER NOT NULL, content_hash TEXT
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS tags(name TEXT PRIMARY KEY, code INTEGER NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS members(
    session_id TEXT NOT NULL, object_id TEXT NOT NULL, PRIMARY KEY(session_id, object_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS shown(
    object_id TEXT NOT NULL, session_id TEXT NOT NULL, seq INTEGER NOT NULL,
    k INTEGER NOT NULL, change TEXT NOT NULL, PRIMARY KEY(object_id, session_id, seq, k)
) WITHOUT ROWID;
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(
    title, body, scope, content='entries', content_rowid='id', tokenize='trigram'
);
"""
_TABLES: Final = ("fts", "entries", "files", "tags", "members", "shown", "meta")


def fts5_available(connection: sqlite3.Connection) -> bool:
    """Whether this SQLite has FTS5 and the trigram tokenizer (3.34 or later)."""
    options = {row[0] for row in connection.execute("PRAGMA compile_options")}
    return "ENABLE_FTS5" in options and sqlite3.sqlite_version_info >= (3, 34, 0)


_PRIVATE_USE: Final = 0xE000
_CODES: Final = 6400
"""Code points U+E000 to U+F8FF: three of them name up to 6400**3 tags."""


_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def _text(value: str | None) -> str | None:
    """``value`` as SQLite can store it: a lone surrogate code point (which has no UTF-8 form)
    becomes U+FFFD, as the project's hash rule for text reads it (decision 0029)."""
    if value is None or value.isascii():
        return value
    return _SURROGATE.sub("\ufffd", value)


def _clean(entry: SearchEntry) -> SearchEntry:
    """An entry whose every string SQLite can store (see :func:`_text`)."""
    return attrs.evolve(
        entry,
        object_id=_text(entry.object_id) or "",
        session_id=_text(entry.session_id),
        title=_text(entry.title) or "",
        body=_text(entry.body),
    )


def _tag(code: int) -> str:
    """The tag of ``code``: three private-use characters, one trigram (no folding applies)."""
    high, rest = divmod(code, _CODES * _CODES)
    middle, low = divmod(rest, _CODES)
    return "".join(chr(_PRIVATE_USE + n) for n in (high, middle, low))


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


def private_file(path: str, *, create: bool = True) -> None:
    """Make ``path`` its owner's alone (0600), creating it empty if it is absent and ``create``:
    the index holds every session's text, which no other local user may read (decision 0027's
    rule for every file the project writes). A file another user owns is left alone; SQLite
    then fails to open it or reads it, as the owner allows."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | (os.O_CREAT if create else 0), 0o600)
    except FileNotFoundError:
        return
    try:
        info = os.fstat(fd)
        if info.st_uid == os.geteuid() and info.st_mode & 0o077:
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


class SqliteSearchIndex(SearchIndex):
    """:class:`SearchIndex` in a SQLite database (a file, or ``:memory:``); thread-safe."""

    def __init__(self, path: str = ":memory:") -> None:
        self.path = path
        self._lock = threading.Lock()
        if path != ":memory:":
            private_file(path)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        if not fts5_available(self._db):
            self._db.close()
            raise SearchUnavailable(
                f"SQLite {sqlite3.sqlite_version} here lacks FTS5 or its trigram tokenizer "
                "(3.34 or later, compiled with ENABLE_FTS5); search needs both"
            )
        if path != ":memory:":
            # A cache: a crash may lose the last batches, which the next catch-up reads again.
            # SQLite gives the -wal and -shm files the database file's mode (0600).
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            for suffix in ("-wal", "-shm"):
                private_file(path + suffix, create=False)
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
                for member in batch.members:
                    self._admit(_text(member.session_id) or "", _text(member.object_id) or "")
                for entry in batch.entries:
                    self._insert(_clean(entry))
                db.executemany(
                    "INSERT OR IGNORE INTO shown VALUES (?, ?, ?, ?, ?)",
                    [
                        (_text(s.object_id), _text(s.session_id), s.seq, k, s.change)
                        for k, s in enumerate(batch.shown)
                    ],
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

    def _admit(self, session_id: str, object_id: str) -> None:
        """A session has the file in its index: tag the file's versions with it."""
        db = self._db
        added = db.execute("INSERT OR IGNORE INTO members VALUES (?, ?)", (session_id, object_id))
        if not added.rowcount:
            return
        rows = db.execute(
            "SELECT id, title, body, scope FROM entries WHERE object_id = ? AND kind = 'file'",
            (object_id,),
        ).fetchall()
        tag = self._code(f"s:{session_id}")
        for row_id, title, body, scope in rows:
            db.execute(
                "INSERT INTO fts(fts, rowid, title, body, scope) VALUES ('delete', ?, ?, ?, ?)",
                (row_id, title, body, scope),
            )
            scope = f"{scope} {tag}"
            db.execute("UPDATE entries SET scope = ? WHERE id = ?", (scope, row_id))
            db.execute(
                "INSERT INTO fts(rowid, title, body, scope) VALUES (?, ?, ?, ?)",
                (row_id, title, body, scope),
            )

    def _code(self, name: str, *, create: bool = True) -> str:
        """The tag of a session, kind or role (``s:ID``, ``k:KIND``, ``r:ROLE``); with
        ``create=False``, an empty string for a name the index has never tagged."""
        row = self._db.execute("SELECT code FROM tags WHERE name = ?", (name,)).fetchone()
        if row is None:
            if not create:
                return ""
            code = self._db.execute("SELECT count(*) FROM tags").fetchone()[0]
            self._db.execute("INSERT INTO tags VALUES (?, ?)", (name, code))
            return _tag(code)
        return _tag(int(row[0]))

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
            if previous is not None and previous == entry.content_hash:
                if entry.reported_by is None:  # the same text, now read from the source
                    db.execute(
                        "UPDATE entries SET reported_by = NULL"
                        " WHERE object_id = ? AND content_hash = ?",
                        (entry.object_id, entry.content_hash),
                    )
                return  # the same text as the version before
            if entry.body is None:
                return  # nothing to search
            sessions = [
                r[0]
                for r in db.execute(
                    "SELECT session_id FROM members WHERE object_id = ? ORDER BY session_id",
                    (entry.object_id,),
                )
            ]
        else:
            sessions = [entry.session_id] if entry.session_id is not None else []
        body = entry.body or ""
        names = [f"k:{entry.kind}"] + ([f"r:{entry.role}"] if entry.role else [])
        scope = " ".join(self._code(n) for n in [*names, *(f"s:{s}" for s in sessions)])
        cursor = db.execute(
            "INSERT INTO entries(kind, object_id, session_id, role, title, body, tx_id, seq,"
            " turn, version, content_hash, scope, reported_by)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                scope,
                entry.reported_by,
            ),
        )
        db.execute(
            "INSERT INTO fts(rowid, title, body, scope) VALUES (?, ?, ?, ?)",
            (cursor.lastrowid, entry.title, body, scope),
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

    def sessions_of(self, object_id: str) -> list[str]:
        with self._lock:
            rows = self._db.execute(
                "SELECT session_id FROM members WHERE object_id = ? ORDER BY session_id",
                (_text(object_id) or "",),
            ).fetchall()
        return [str(row[0]) for row in rows]

    def encounters(self, object_id: str) -> list[Encounter] | None:
        with self._lock:
            rows = self._db.execute(
                "SELECT session_id, seq, change FROM shown WHERE object_id = ?"
                " ORDER BY session_id, seq, k",
                (_text(object_id) or "",),
            ).fetchall()
        firsts: dict[str, int | None] = {}
        spans: dict[str, list[tuple[int, int | None]]] = {}
        for session_id, seq, change in rows:
            sid = str(session_id)
            firsts.setdefault(sid, None)
            held = spans.setdefault(sid, [])
            if change == "met" and firsts[sid] is None:
                firsts[sid] = int(seq)
            elif change == "on" and (not held or held[-1][1] is not None):
                held.append((int(seq), None))
            elif change == "off" and held and held[-1][1] is None:
                held[-1] = (held[-1][0], int(seq))
        return [Encounter(sid, first, tuple(spans[sid])) for sid, first in firsts.items()]

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM entries").fetchone()[0])

    def sample(self, row: int) -> tuple[str, str | None]:
        """The body and session of the ``row``-th entry (1-based): what a benchmark draws its
        queries from."""
        with self._lock:
            found = self._db.execute(
                "SELECT body, session_id FROM entries WHERE id = ?", (row,)
            ).fetchone()
        return ("", None) if found is None else (str(found[0]), found[1])

    def search(self, query: SearchQuery) -> list[SearchHit]:
        terms = [t for t in (_text(term) for term in terms_of(query.text)) if t]
        if not terms:
            return []
        long = [t for t in terms if len(t) >= 3]
        short = [t for t in terms if len(t) < 3]
        parts = [f"{{title body}} : {_phrase(t)}" for t in long]
        names = [
            f"{prefix}:{value}"
            for prefix, value in (
                ("s", _text(query.session_id)),
                ("k", query.kind),
                ("r", query.role),
            )
            if value is not None
        ]
        with self._lock:
            tags = [self._code(name, create=False) for name in names]
        if "" in tags:
            return []  # a session, kind or role the index has never seen
        parts += [f"scope : {_phrase(tag)}" for tag in tags]
        likes: list[str] = []
        for term in short:
            likes += [_like(term), _like(term)]
        with self._lock:
            ranked = self._best(" AND ".join(parts), bool(long), likes, query.limit)
            return self._hits(ranked, terms)

    def _best(
        self, match: str, scored: bool, likes: list[str], limit: int
    ) -> list[tuple[int, float]]:
        """The best ``limit`` rows, one per file object (its best version): rows are read in
        rank order, a few more than needed, more again if files repeat. Without a term long
        enough to score, newest first."""
        db = self._db
        rank = f"bm25(fts, {_TITLE_WEIGHT}, 1.0, 0.0)" if scored else "0.0"
        if match:
            floor = db.execute(
                "SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY rowid DESC LIMIT 1 OFFSET ?",
                (match, RANK_WINDOW - 1),
            ).fetchone()
            sql = f"SELECT fts.rowid, {rank} AS r FROM fts"
            where = ["fts MATCH ?"]
            params: list[Any] = [match]
            if floor is not None:
                where.append("fts.rowid >= ?")
                params.append(floor[0])
        else:  # only short terms and no scope: a scan
            sql = "SELECT e.id, 0.0 AS r FROM entries e"
            where, params = [], []
        if likes:
            if match:
                sql += " JOIN entries e ON e.id = fts.rowid"
            where += ["(e.title LIKE ? ESCAPE '\\' OR e.body LIKE ? ESCAPE '\\')"] * (
                len(likes) // 2
            )
            params += likes
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY r, 1 DESC LIMIT ?"
        fetch = limit * 2 + 10
        while True:
            rows = db.execute(sql, [*params, fetch]).fetchall()
            kinds = self._kinds([row[0] for row in rows])
            seen: set[str] = set()
            picked: list[tuple[int, float]] = []
            for row_id, value in rows:
                kind, object_id = kinds[row_id]
                if kind == "file":
                    if object_id in seen:
                        continue
                    seen.add(object_id)
                picked.append((row_id, -float(value)))
                if len(picked) == limit:
                    return picked
            if len(rows) < fetch:
                return picked
            fetch *= 4

    def _kinds(self, row_ids: list[int]) -> dict[int, tuple[str, str]]:
        if not row_ids:
            return {}
        marks = ",".join("?" * len(row_ids))
        rows = self._db.execute(
            f"SELECT id, kind, object_id FROM entries WHERE id IN ({marks})", row_ids
        )
        return {row_id: (kind, object_id) for row_id, kind, object_id in rows}

    def _hits(self, ranked: list[tuple[int, float]], terms: list[str]) -> list[SearchHit]:
        if not ranked:
            return []
        marks = ",".join("?" * len(ranked))
        rows = self._db.execute(
            "SELECT e.id, e.kind, e.object_id, e.session_id, e.role, e.title, e.body, e.tx_id,"
            " e.seq, e.turn, e.version, e.content_hash, f.content_hash, e.reported_by"
            " FROM entries e LEFT JOIN files f ON f.object_id = e.object_id"
            f" WHERE e.id IN ({marks})",
            [row_id for row_id, _ in ranked],
        ).fetchall()
        by_id = {row[0]: row for row in rows}
        hits = []
        for row_id, score in ranked:
            (_, kind, object_id, session_id, role, title, body, tx_id, seq, turn, version,
             content_hash, latest_hash, reported_by) = by_id[row_id]  # fmt: skip
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
                    reported_by=reported_by,
                )
            )
        return hits

    def close(self) -> None:
        with self._lock:
            self._db.close()
