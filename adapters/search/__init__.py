"""Search index adapters: SQLite FTS5 (``SqliteSearchIndex``)."""

from selfctx.adapters.search.sqlite import SqliteSearchIndex, fts5_available

__all__ = ["SqliteSearchIndex", "fts5_available"]
