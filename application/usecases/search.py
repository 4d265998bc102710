"""SearchHistory: keep the search projection caught up with the store, and query it.

The projection is built from the store's transaction log alone (decision 0040), so any client on
any machine builds the same one, and it can be rebuilt from scratch at any time. What each kind of
document contributes:

* a ``session_log`` entry: its user and assistant messages (private to the session; the turn is
  the count of user messages the session has recorded, as ``selfctx show --at-turn`` counts), and
  the files the session encountered (which makes their versions searchable by it);
* a ``toolcall``: its output, private to the session that recorded it (its ``chat_ref``);
* a ``file`` version: its content, shared: any session with the file in its index finds it.

Nothing else (system prompts, session and chat snapshots) is searchable.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from typing import Any, Final

from selfctx.application.persistence import LOG_TYPE, entry_events, log_entries
from selfctx.application.ports.search import (
    Encounter,
    IndexBatch,
    IndexPosition,
    Membership,
    SearchEntry,
    SearchHit,
    SearchIndex,
    SearchQuery,
    Shown,
)
from selfctx.application.ports.store import Change, ObjectStore
from selfctx.domain.chat import json_from_stored
from selfctx.domain.errors import InvalidInput

__all__ = ["PAGE", "SearchHistory", "batch_of"]

PAGE: Final = 200
"""Transactions read from the store per request while catching up."""
_MAX_TITLE: Final = 300


def _text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _session_of_chat(chat_ref: object) -> str | None:
    if isinstance(chat_ref, str) and chat_ref.startswith("chat:"):
        return chat_ref[len("chat:") :]
    return None


def _toolcall_title(doc: Mapping[str, Any]) -> str:
    tool = str(doc.get("tool") or "")
    shown = doc.get("args_display")
    if not isinstance(shown, str):
        shown = json.dumps(
            json_from_stored(doc.get("args") or {}), ensure_ascii=False, sort_keys=True
        )
    return f"{tool} {shown}"[:_MAX_TITLE]


class _Turns:
    """Each session's turn count while a batch is read (seeded from the index)."""

    def __init__(self, index: SearchIndex) -> None:
        self._index = index
        self._turns: dict[str, int] = {}

    def current(self, session_id: str) -> int:
        if session_id not in self._turns:
            self._turns[session_id] = self._index.last_turn(session_id)
        return self._turns[session_id]

    def begin(self, session_id: str) -> int:
        self._turns[session_id] = self.current(session_id) + 1
        return self._turns[session_id]


_SHOWN: Final = {"ObjectEncountered": "met", "ObjectActivated": "on", "ObjectDeactivated": "off"}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _log_entries(
    doc: Mapping[str, Any], tx_id: int, turns: _Turns, out: list[SearchEntry], shown: list[Shown]
) -> tuple[list[Membership], dict[str, int]]:
    """A session-log entry's messages (appended to ``out``), file encounters, encounters,
    activations and collapses (appended to ``shown``), and the turn each tool call it recorded
    belongs to."""
    session_id = doc.get("session_id")
    seq = doc.get("seq")
    if not isinstance(session_id, str) or not isinstance(seq, int):
        return [], {}
    try:
        events = entry_events(doc)
    except InvalidInput:  # damaged: its own session says so when opened; the others stay found
        return [], {}
    chat_id = f"chat:{session_id}"
    members: list[Membership] = []
    toolcall_turns: dict[str, int] = {}
    for event in events:
        if not isinstance(event, Mapping):
            continue
        name = event.get("event")
        change = _SHOWN.get(str(name))
        if change is not None and isinstance(event.get("object_id"), str):
            shown.append(Shown(session_id, event["object_id"], seq, change))  # type: ignore[arg-type]
        if name == "UserMessageRecorded":
            turn = turns.begin(session_id)
            out.append(
                SearchEntry(
                    "message",
                    chat_id,
                    session_id,
                    "user",
                    f"turn {turn}",
                    str(event.get("text", "")),
                    tx_id,
                    seq=seq,
                    turn=turn,
                )
            )
        elif name == "AssistantMessageRecorded":
            message = event.get("message")
            message = message if isinstance(message, Mapping) else {}
            text = str(message.get("text", ""))
            calls = " ".join(
                str(c.get("name", ""))
                for c in _list(message.get("tool_calls"))
                if isinstance(c, Mapping)
            )
            turn = turns.current(session_id)
            if text or calls:
                out.append(
                    SearchEntry(
                        "message",
                        chat_id,
                        session_id,
                        "assistant",
                        f"turn {turn}" + (f" calls {calls}" if calls else ""),
                        text,
                        tx_id,
                        seq=seq,
                        turn=turn,
                    )
                )
        elif name == "ToolCallRecorded":
            toolcall_turns[str(event.get("object_id"))] = turns.current(session_id)
        elif name == "ObjectEncountered" and event.get("kind") == "file":
            members.append(Membership(session_id, str(event.get("object_id"))))
    return members, toolcall_turns


def batch_of(changes: Iterable[Change], index: SearchIndex, after: int | None) -> IndexBatch | None:
    """What ``changes`` (the transactions after ``after``) add to ``index`` (None if there are
    none)."""
    entries: list[SearchEntry] = []
    members: list[Membership] = []
    shown: list[Shown] = []
    last: Change | None = None
    turns = _Turns(index)
    for change in changes:
        last = change
        toolcall_turns: dict[str, int] = {}
        # Log entries first: they say which turn the tool calls of the same commit belong to.
        for doc in change.documents:
            if doc.get("type") != LOG_TYPE:
                continue
            try:  # one document may hold several entries (decision 0134)
                held = log_entries(doc)
            except InvalidInput:  # damaged: its own session says so when opened
                continue
            for entry in held:
                found, turned = _log_entries(entry, change.tx_id, turns, entries, shown)
                members += found
                toolcall_turns.update(turned)
        for doc in change.documents:
            kind = doc.get("type")
            object_id = str(doc.get("xt/id"))
            if kind == "toolcall":
                content = doc.get("content")
                entries.append(
                    SearchEntry(
                        "toolcall",
                        object_id,
                        _session_of_chat(doc.get("chat_ref")),
                        "tool",
                        _toolcall_title(doc),
                        content if isinstance(content, str) else "",
                        change.tx_id,
                        turn=toolcall_turns.get(object_id),
                    )
                )
            elif kind == "file":
                source = doc.get("source")
                source = source if isinstance(source, Mapping) else {}
                content = doc.get("content")
                entries.append(
                    SearchEntry(
                        "file",
                        object_id,
                        None,
                        None,
                        str(source.get("path", ""))[:_MAX_TITLE],
                        content if isinstance(content, str) else None,
                        change.tx_id,
                        content_hash=doc.get("content_hash"),
                        reported_by=_text_or_none(doc.get("reported_by")),
                    )
                )
    if last is None:
        return None
    position = IndexPosition(last.tx_id, last.tx_time)
    return IndexBatch(after, tuple(entries), tuple(members), position, tuple(shown))


class SearchHistory:
    """Catch the index up with the store, then answer a query (thread-safe)."""

    def __init__(self, store: ObjectStore, index: SearchIndex, *, page: int = PAGE) -> None:
        self._store = store
        self.index = index
        self._page = page
        self._lock = threading.Lock()
        self._checked = False
        self._closed = False

    def close(self) -> None:
        """Close the index once the page being taken in (if any) is in: a catch-up running on
        another thread (the inspector's, ahead of its first search) stops there."""
        self._closed = True
        with self._lock:
            self.index.close()

    def catch_up(self) -> int:
        """Take in every transaction the index has not seen; returns how many (none once
        closed)."""
        with self._lock:
            if self._closed:
                return 0
            if not self._checked:
                self._check_position()
                self._checked = True
            taken = 0
            while not self._closed:
                position = self.index.position()
                after = None if position is None else position.tx_id
                changes = self._store.changes(after, self._page)
                batch = batch_of(changes, self.index, after)
                if batch is None:
                    return taken
                if self.index.apply(batch):
                    taken += len(changes)
            return taken

    def _check_position(self) -> None:
        """An index kept on disk may have been built from another store (a node reset, another
        database at the same address): if the transaction it ends on is not this store's, start
        again."""
        position = self.index.position()
        if position is None:
            return
        before = position.tx_id - 1 if position.tx_id > 0 else None
        found = self._store.changes(before, 1)
        if not found or (found[0].tx_id, found[0].tx_time) != (position.tx_id, position.tx_time):
            self.index.reset()

    def __call__(self, query: SearchQuery) -> list[SearchHit]:
        self.catch_up()
        return self.index.search(query)

    def sessions_of(self, object_id: str) -> list[str]:
        """The sessions that have met file ``object_id``, once the index has caught up."""
        self.catch_up()
        return self.index.sessions_of(object_id)

    def encounters(self, object_id: str) -> list[Encounter] | None:
        """How each session met ``object_id``, once the index has caught up (None: the index
        does not keep it)."""
        self.catch_up()
        return self.index.encounters(object_id)
