"""The search index port: a projection of the store that ranks what sessions have seen.

The store is the truth; a search index is built from its transaction log
(:meth:`~selfctx.application.ports.store.ObjectStore.changes`) and can be thrown away and rebuilt
at any time, on any machine, with the same answers (decision 0040). The application turns each
transaction's documents into :class:`SearchEntry` rows and :class:`Membership` facts
(``selfctx.application.usecases.search``); an adapter stores them and answers
:class:`SearchQuery` with ranked :class:`SearchHit` values. One adapter exists:
SQLite FTS5 (``selfctx.adapters.search``).
"""

from __future__ import annotations

import abc
from typing import Final, Literal, TypeAlias

import attrs

from selfctx.domain.errors import InvalidInput, SelfContextError

__all__ = [
    "KINDS",
    "MAX_LIMIT",
    "MAX_QUERY_CHARS",
    "ROLES",
    "Encounter",
    "IndexBatch",
    "IndexPosition",
    "Kind",
    "Membership",
    "SearchEntry",
    "SearchHit",
    "SearchIndex",
    "SearchQuery",
    "SearchUnavailable",
    "Shown",
    "terms_of",
]

Kind: TypeAlias = Literal["message", "toolcall", "file"]
KINDS: Final = ("message", "toolcall", "file")
"""What a hit can be: a chat message, a tool's output, a version of a file."""
ROLES: Final = ("user", "assistant", "tool")
"""Roles a query may filter on (``tool`` is a tool's output)."""
MAX_LIMIT: Final = 200
"""The most hits one query returns."""
MAX_QUERY_CHARS: Final = 1000
"""The longest query text accepted."""


class SearchUnavailable(SelfContextError):
    """Search cannot run here (no index configured, or SQLite built without FTS5)."""

    kind = "search_unavailable"


@attrs.frozen
class SearchQuery:
    """What to look for. Every term of ``text`` (words, or "quoted phrases") must occur in a hit,
    as a case-insensitive substring; hits are ranked by relevance (BM25)."""

    text: str
    """The query; empty (or only spaces) finds nothing."""
    session_id: str | None = None
    """Only what this session has seen (its messages, its tool outputs, the file versions of
    the files in its index); None: everything in the store (the operator's view)."""
    role: str | None = None
    """``user`` or ``assistant`` (messages), ``tool`` (tool outputs); None: any."""
    kind: str | None = None
    """One of :data:`KINDS`; None: any."""
    limit: int = 20
    """At most this many hits (1 to :data:`MAX_LIMIT`)."""

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise InvalidInput("query", self.text, "must be text")
        if "\x00" in self.text:
            # SQLite ends a string at NUL: the query would be cut short, or fail.
            raise InvalidInput("query", self.text[:40], "must not contain NUL characters")
        if len(self.text) > MAX_QUERY_CHARS:
            raise InvalidInput(
                "query", self.text[:40] + "…", f"is longer than {MAX_QUERY_CHARS} characters"
            )
        if self.role is not None and self.role not in ROLES:
            raise InvalidInput("role", self.role, f"use one of {list(ROLES)}")
        if self.kind is not None and self.kind not in KINDS:
            raise InvalidInput("type", self.kind, f"use one of {list(KINDS)}")
        limit = self.limit
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
            raise InvalidInput("limit", limit, f"must be an integer from 1 to {MAX_LIMIT}")


@attrs.frozen
class SearchEntry:
    """One searchable text: a chat message, a tool's output, or one version of a file."""

    kind: Kind
    object_id: str
    """The toolcall or file id; for a message, the session's chat id."""
    session_id: str | None
    """The session the text is private to; None for file versions (files are shared)."""
    role: str | None
    """``user``/``assistant`` for messages, ``tool`` for tool outputs, None for files."""
    title: str
    """What the text is: a file's path, a tool's name and arguments; searched too."""
    body: str | None
    """The text itself; None for a file version without content (counted, not searchable)."""
    tx_id: int
    """The transaction that wrote it."""
    seq: int | None = None
    """For a message: the log position that recorded it (``selfctx show --at-position``)."""
    turn: int | None = None
    """For messages and tool outputs: the turn it belongs to."""
    content_hash: str | None = None
    """For a file version: a version whose content equals the one before is not indexed again."""
    reported_by: str | None = None
    """For a file version: the session whose harness reported its content (decision 0031),
    which is not known to be the file's; None when it was read from the source."""


@attrs.frozen
class Membership:
    """A session has a file in its index: its versions are searchable by that session."""

    session_id: str
    object_id: str


@attrs.frozen
class Shown:
    """A session's log met an object (``met``: its first encounter), or made it active
    (``on``) or collapsed it (``off``), at log position ``seq``: what an object's page says of
    the sessions that met it, without reading their logs."""

    session_id: str
    object_id: str
    seq: int
    change: Literal["met", "on", "off"]


@attrs.frozen
class Encounter:
    """How one session met an object: the log position of its first encounter (None: not
    known to the index) and the spans ``(start, end)`` of log positions it was active (end
    None: still)."""

    session_id: str
    first_seq: int | None
    spans: tuple[tuple[int, int | None], ...]


@attrs.frozen
class IndexPosition:
    """The last transaction an index has taken in."""

    tx_id: int
    tx_time: str


@attrs.frozen
class IndexBatch:
    """What a run of transactions adds to the index, and the position after it."""

    after: int | None
    """The transaction the batch starts after: the index's position when it was read (an
    index shared by several processes takes a batch only if it is still there)."""
    entries: tuple[SearchEntry, ...]
    members: tuple[Membership, ...]
    position: IndexPosition
    shown: tuple[Shown, ...] = ()
    """Encounters, activations and collapses, in log order within each session."""


@attrs.frozen
class SearchHit:
    """One result: enough to show it and to bring it back."""

    kind: Kind
    object_id: str
    """``activate`` takes it for tool outputs and files; for a message, the chat id."""
    session_id: str | None
    role: str | None
    title: str
    snippet: str
    """A short passage around the first match (whitespace collapsed)."""
    score: float
    """Relevance: higher is better."""
    tx_id: int
    version: int
    """For a file: which version (1 = the first) holds the match; otherwise 1."""
    latest: bool
    """For a file: whether that version is still the latest (``activate`` brings the latest)."""
    seq: int | None = None
    turn: int | None = None
    reported_by: str | None = None
    """For a file: the session whose harness reported this version's content without it being
    read from the file (decision 0031). Every other session is shown it as such, as it is on
    activation (``selfctx.domain.rendering.REPORTED_NOTE``)."""

    def reported_elsewhere(self, session_id: str | None) -> bool:
        """True if the content is another session's report, not known to be the file's."""
        return self.reported_by is not None and self.reported_by != session_id


class SearchIndex(abc.ABC):
    """A ranked full-text projection of the store (see the module docstring)."""

    @abc.abstractmethod
    def position(self) -> IndexPosition | None:
        """The last transaction taken in, or None for an empty index."""

    @abc.abstractmethod
    def apply(self, batch: IndexBatch) -> bool:
        """Take in a batch atomically: its entries, memberships and the new position. Returns
        False, taking in nothing, when the index is no longer at ``batch.after`` (another process
        sharing it took those transactions in first)."""

    @abc.abstractmethod
    def reset(self) -> None:
        """Forget everything (the store behind it was replaced): the next catch-up rebuilds."""

    @abc.abstractmethod
    def last_turn(self, session_id: str) -> int:
        """The highest turn of the session's messages taken in so far (0 if none)."""

    @abc.abstractmethod
    def search(self, query: SearchQuery) -> list[SearchHit]:
        """Hits for ``query``, best first, at most ``query.limit``; one hit per file (its best
        version). An empty query finds nothing."""

    @abc.abstractmethod
    def count(self) -> int:
        """How many entries are searchable."""

    def sessions_of(self, object_id: str) -> list[str]:
        """The sessions that have met file ``object_id`` (read or discovered it), sorted: the
        index's memberships. The default knows none."""
        return []

    def encounters(self, object_id: str) -> list[Encounter] | None:
        """How each session met ``object_id`` (:class:`Encounter`), sorted by session; None
        when this index does not keep it (the logs say it then)."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the index holds open."""


def terms_of(text: str) -> list[str]:
    """The terms of a query: words, and "quoted phrases" kept whole; duplicates once."""
    out: list[str] = []
    for n, part in enumerate(text.split('"')):
        if n % 2:  # inside quotes
            phrase = " ".join(part.split())
            if phrase:
                out.append(phrase)
        else:
            out.extend(part.split())
    return list(dict.fromkeys(t.casefold() for t in out))
