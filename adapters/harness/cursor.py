"""The ingestion cursor: which messages of a harness's list are new (decision 0007), with every
tool call mapped to its object id (decision 0030).

The cursor remembers the harness's chat as it last saw it (its *view*, the list without its
leading system messages, which are the prompt: for each position the message's fingerprint, the
object ids it stands for and the harness's ids it carries) and every message recorded (a
multiset of fingerprints: the view's and what is beyond it, decision 0122). A list that extends
the view is new from the view's end; a list that is a prefix of it is nothing new; a list that
diverges (compaction, an edited message) is reconciled message by message. A tool result is
known by the call it answers — the latest call with its id before it in the list, or the latest
recorded one — so that a harness reusing ids (``call_0`` on every turn) gets a new tool call for
each new assistant message, whether the list grew or diverged.

A list is planned from a position on (:meth:`Cursor.plan`, ``start``): what comes before is the
view's, unchanged, and is neither parsed nor fingerprinted again, so a turn costs what is new in
it. Each position of the view also has a digest of the list up to it (:meth:`Cursor.digest`), by
which a harness names the list it appends to (the append form of ``ingest``): one every 64
positions is kept, the others are chained on from it when asked for (decision 0122).
"""

from __future__ import annotations

import collections
import hashlib
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from typing import TypeVar

import attrs

from selfctx.adapters.harness.ids import CallIds
from selfctx.adapters.harness.messages import (
    SYSTEM_MARK,
    MalformedMessage,
    Message,
    message_fingerprint,
    tool_fingerprint,
)
from selfctx.domain.chat import (
    AssistantMessage,
    ToolCallRequest,
    ToolResult,
    Turn,
    UserMessage,
)

__all__ = ["SYSTEM_MARK", "Cursor", "Plan", "Planned", "digest_position"]

_CHAIN_ROOT = hashlib.blake2b(b"selfctx message list", digest_size=16).digest()

_K = TypeVar("_K")

Unique = tuple[str, ...] | str | None
"""What the uniqueness rule needs of a position: an assistant message's call ids as the harness
sent them, a tool result's call id, or None."""


def _chain(previous: bytes, fingerprint: str) -> bytes:
    return hashlib.blake2b(previous + fingerprint.encode("ascii"), digest_size=_LINK).digest()


_LINK = 16
"""Bytes of each digest of the chain, and of each fingerprint the view holds (32 hex digits)."""

_CHECKPOINT = 64
"""The view keeps the digest of every ``_CHECKPOINT``-th prefix (and of the whole view); the
digest of another prefix is worked out from the one before it (decision 0122)."""


class _Position:
    """A position of the view whose calls are not what its entry's calls say of themselves (an
    id of ours that came back in, a call stored before decision 0030): its three tuples as
    they are."""

    __slots__ = ("named", "objects", "unique")

    def __init__(self, objects: tuple[str, ...], named: tuple[str, ...], unique: Unique) -> None:
        self.objects = objects
        self.named = named
        self.unique = unique


Entry = ToolCallRequest | tuple[ToolCallRequest, ...] | str | _Position | None
"""What the cursor keeps of a position of the harness's list (decision 0141), the chat's own
objects wherever they say it: an assistant message's call (the chat's record: its object id and
the harness's id), or its calls' tuple when it has more than one; a tool result's object id (the
call's string); None for a message without calls; a :class:`_Position` otherwise. A tuple of
object ids, one of the harness's ids and a slot in each of three lists were about 70 bytes a
message."""


def _provider(call: ToolCallRequest) -> str:
    return call.provider_id if call.provider_id is not None else call.id


def _objects(entry: Entry) -> tuple[str, ...]:
    """The object ids of an assistant message's calls, or of the call a tool result answers."""
    if entry is None:
        return ()
    if isinstance(entry, str):
        return (entry,)
    if isinstance(entry, tuple):
        return tuple(c.id for c in entry)
    if isinstance(entry, _Position):
        return entry.objects
    return (entry.id,)


def _named(entry: Entry) -> tuple[str, ...]:
    """An assistant message's calls by the harness's (canonical) ids."""
    if entry is None or isinstance(entry, str):
        return ()
    if isinstance(entry, tuple):
        return tuple(_provider(c) for c in entry)
    if isinstance(entry, _Position):
        return entry.named
    return (_provider(entry),)


def _unique(entry: Entry, ids: CallIds) -> Unique:
    """What the uniqueness rule needs of the position (:data:`Unique`)."""
    if entry is None:
        return None
    if isinstance(entry, str):
        return ids.provider_id(entry)
    if isinstance(entry, _Position):
        return entry.unique
    return _named(entry)


def _entry(
    ids: CallIds,
    held: tuple[str, ...],
    named: tuple[str, ...],
    unique: Unique,
    calls: tuple[ToolCallRequest, ...] | None = None,
) -> Entry:
    """The entry of a position whose calls are ``held`` (object ids), ``named`` (the harness's
    canonical ids) and ``unique`` (:data:`Unique`): the chat's objects when they say the same
    (``calls``: the calls' tuple, if at hand), else a :class:`_Position`."""
    if not held:
        if not named and unique is None:
            return None
    elif isinstance(unique, str):
        if len(held) == 1 and not named and ids.provider_id(held[0]) == unique:
            return held[0]
    elif unique == named:
        if calls is None or tuple(c.id for c in calls) != held:
            found = [ids.call(i) for i in held]
            calls = None if None in found else tuple(c for c in found if c is not None)
        if calls is not None and tuple(_provider(c) for c in calls) == named:
            return calls[0] if len(calls) == 1 else calls
    return _Position(held, named, unique)


class _View:
    """The fingerprints of the harness's chat as last seen, 16 bytes each in one buffer (a
    string of its own was 89 bytes a message), and the digests of its prefixes, ``digest(n)``
    of its first ``n`` messages: one every :data:`_CHECKPOINT` messages and the whole view's are
    kept (one per message was 16 bytes a message), another is chained on from the one kept
    before it, at most ``_CHECKPOINT - 1`` hashes (decision 0122)."""

    __slots__ = ("_checkpoints", "_fingerprints", "_last")

    def __init__(self) -> None:
        self._fingerprints = bytearray()
        self._checkpoints = bytearray(_CHAIN_ROOT)
        """The digest of the view's first ``k * _CHECKPOINT`` messages, for each k."""
        self._last = _CHAIN_ROOT
        """The digest of the whole view."""

    @classmethod
    def of(cls, fingerprints: Sequence[str]) -> _View:
        """The view of these fingerprints (hex), chained from their text as it is (what
        :meth:`replace` from position 0 gives, without turning each to bytes and back)."""
        view = cls()
        view._fingerprints = bytearray.fromhex("".join(fingerprints))
        digest, checkpoints = _CHAIN_ROOT, view._checkpoints
        blake2b = hashlib.blake2b
        for i, fp in enumerate(fingerprints, 1):
            digest = blake2b(digest + fp.encode("ascii"), digest_size=_LINK).digest()
            if i % _CHECKPOINT == 0:
                checkpoints += digest
        view._last = digest
        return view

    def __len__(self) -> int:
        return len(self._fingerprints) // _LINK

    def __getitem__(self, n: int) -> str:
        if not 0 <= n < len(self):
            raise IndexError(n)
        return self._fingerprints[n * _LINK : (n + 1) * _LINK].hex()

    def fingerprints(self, start: int, end: int | None = None) -> list[str]:
        """The fingerprints of positions ``start`` to ``end`` (the view's end by default)."""
        end = len(self) if end is None else min(end, len(self))
        buffer = self._fingerprints
        return [buffer[n * _LINK : (n + 1) * _LINK].hex() for n in range(start, end)]

    def common(self, start: int, fingerprints: Sequence[str]) -> int:
        """How many of ``fingerprints`` are the view's from position ``start`` on, in order
        (compared in one piece, position by position only past the first that differs)."""
        n = max(0, min(len(fingerprints), len(self) - start))
        theirs = bytes.fromhex("".join(fingerprints[:n]))
        mine = self._fingerprints[start * _LINK : (start + n) * _LINK]
        if theirs == mine:
            return n
        return next(
            k
            for k in range(n)
            if theirs[k * _LINK : (k + 1) * _LINK] != mine[k * _LINK : (k + 1) * _LINK]
        )

    def replace(self, start: int, fingerprints: Sequence[str]) -> None:
        """The view from position ``start`` on becomes ``fingerprints``; the digests follow."""
        length = len(self)
        del self._fingerprints[start * _LINK :]
        self._fingerprints += b"".join(bytes.fromhex(fp) for fp in fingerprints)
        if start >= length:  # the view grew: chained on from its last digest
            self._rechain(length, self._last)
        else:
            kept = start // _CHECKPOINT
            del self._checkpoints[(kept + 1) * _LINK :]
            self._rechain(kept * _CHECKPOINT, bytes(self._checkpoints[-_LINK:]))

    def _rechain(self, n: int, digest: bytes) -> None:
        """Chain from ``digest`` (that of the first ``n`` messages) to the view's end."""
        buffer = self._fingerprints
        for i in range(n, len(self)):
            digest = _chain(digest, buffer[i * _LINK : (i + 1) * _LINK].hex())
            if (i + 1) % _CHECKPOINT == 0:
                self._checkpoints += digest
        self._last = digest

    def digest(self, n: int) -> bytes:
        """The digest of the view's first ``n`` messages (``0 <= n <= len(self)``)."""
        if not 0 <= n <= len(self):
            raise IndexError(n)
        if n == len(self):
            return self._last
        kept = n // _CHECKPOINT
        digest = bytes(self._checkpoints[kept * _LINK : (kept + 1) * _LINK])
        buffer = self._fingerprints
        for i in range(kept * _CHECKPOINT, n):
            digest = _chain(digest, buffer[i * _LINK : (i + 1) * _LINK].hex())
        return digest


def digest_position(digest: str) -> int | None:
    """The number of messages a digest (:meth:`Cursor.digest`) covers, or None if malformed."""
    head, dot, tail = digest.partition(".")
    if not dot or not head.isascii() or not head.isdigit() or len(head) > 12 or len(tail) != 32:
        return None
    return int(head)


@attrs.frozen
class Planned:
    """A new message of the list, with its calls mapped to object ids."""

    message: Message
    position: int
    """Its index in the harness's list."""
    fingerprint: str
    calls: tuple[ToolCallRequest, ...] = ()
    """For ``assistant``: its calls, under their object ids."""
    answers: str | None = None
    """For ``tool``: the object id of the call it answers."""


@attrs.frozen
class Plan:
    """What one list holds that is new, and what the view becomes once it is recorded."""

    new: tuple[Planned, ...]
    diverged: bool
    start: int
    """The position the planned part of the list begins at (what precedes is the view's)."""
    fingerprints: tuple[str, ...]
    """For each position from ``start`` on: its fingerprint."""
    entries: tuple[Entry, ...]
    """For each position from ``start`` on: its calls (:data:`Entry`)."""
    answered: Mapping[str, bool]
    """The uniqueness rule's state at the end of the list (call id → answered)."""

    @property
    def end(self) -> int:
        """The length of the list."""
        return self.start + len(self.fingerprints)


class Cursor:
    """What one session's ingestor knows of the harness's list and of what it recorded."""

    def __init__(self, session_id: str, max_output_bytes: int) -> None:
        self.ids = CallIds(session_id)
        """The session's tool calls: the harness's ids and the object ids they are stored as."""
        self.max_output_bytes = max_output_bytes
        self.view = _View()
        """The harness's chat as last seen: each position's fingerprint, each prefix's digest."""
        self.view_entries: list[Entry] = []
        """For each position: its calls (:data:`Entry`)."""
        self._beyond: collections.Counter[str] = collections.Counter()
        """Every message recorded is the multiset of the view's fingerprints and this one: the
        messages recorded but not in the view (those a harness's compaction dropped) less the
        view's positions that were not recorded as they stand (edited copies). Empty while the
        harness's lists only grow (decision 0122)."""
        self.recorded_fingerprints = bytearray()
        self.recorded_calls: list[Entry] = []
        """Each assistant message with calls recorded, in order: its fingerprint (16 bytes in
        one buffer) and its calls (:data:`Entry`). A list that diverges looks them up by
        fingerprint or by the harness's ids in a table made for it (:class:`_Planner`); tables
        kept for the session's life were about 70 bytes a message (decision 0141)."""
        self.total = 0
        """Messages recorded over the session's life."""
        self._answered: dict[str, bool] = {}
        self._answered_at = 0
        """The uniqueness rule's state at the end of the last list planned, and that list's
        length."""

    def restore(self, turns: Iterable[Turn]) -> None:
        """Rebuild everything from the stored chat (after a resume: nothing is re-recorded when
        the harness sends the same list again, and its digest is the one the harness holds).

        Every message recorded is in the view, so nothing is counted beyond it; the view's
        fingerprints are chained as they are made, each hex text hashed once (decision 0158)."""
        view: list[str] = []
        entries: list[Entry] = []
        recorded: list[str] = []
        recorded_calls: list[Entry] = []
        ids = self.ids
        answered = ids.answered
        for turn in turns:
            for message in turn.messages:
                if isinstance(message, ToolResult):
                    # its entry is the call it answers, whose harness id its fingerprint is of
                    call_id = message.toolcall_id
                    view.append(tool_fingerprint(ids.provider_id(call_id)))
                    entries.append(call_id)
                    answered.add(call_id)
                elif isinstance(message, AssistantMessage):
                    calls = message.tool_calls
                    ids.add_all(calls)
                    fp = self._assistant_fingerprint(message.text, calls)
                    held = tuple(c.id for c in calls)
                    named = tuple(ids.provider_id(c.id) for c in calls)
                    view.append(fp)
                    entries.append(_entry(ids, held, named, named, calls))
                    if calls:
                        recorded.append(fp)
                        recorded_calls.append(calls[0] if len(calls) == 1 else calls)
                elif isinstance(message, UserMessage):
                    view.append(message_fingerprint("user", message.text))
                    entries.append(None)
        # the context manager's own notes are not the harness's messages
        self.view = _View.of(view)
        self._beyond = collections.Counter()  # each message both recorded and in the view
        self.recorded_fingerprints = bytearray.fromhex("".join(recorded))
        self.recorded_calls = recorded_calls
        self.total += len(view)
        self.view_entries = entries
        self._answered, self._answered_at = {}, 0

    def digest(self, length: int | None = None) -> str:
        """The digest of the view's first ``length`` messages (all of them by default): what a
        harness names to append to that list."""
        n = len(self.view) if length is None else length
        return f"{n}.{self.view.digest(n).hex()}"

    def position_of(self, digest: str) -> int | None:
        """The length of the list ``digest`` names, if it is the view or a prefix of it."""
        n = digest_position(digest)
        if n is None or n > len(self.view) or self.digest(n) != digest:
            return None
        return n

    def key(self, message: Message) -> str:
        """The fingerprint of a message of the harness's list (an id of ours that came back in
        counts as the harness's id of its call)."""
        canonical = self.ids.canonical
        if message.role == "tool":
            call_id = message.tool_call_id or ""
            mapped = canonical(call_id)
            return message.fingerprint if mapped == call_id else tool_fingerprint(mapped)
        calls = [(canonical(c.id), c.name, c.arguments) for c in message.tool_calls]
        if all(mapped == c.id for (mapped, _, _), c in zip(calls, message.tool_calls, strict=True)):
            return message.fingerprint  # the ids are the harness's own: the message's cached one
        return message_fingerprint(message.role, message.text, calls)

    def _assistant_fingerprint(self, text: str, calls: Sequence[ToolCallRequest]) -> str:
        harness = [(self.ids.provider_id(c.id), c.name, c.arguments) for c in calls]
        return message_fingerprint("assistant", text, harness)

    def _count(self, fp: str, calls: tuple[ToolCallRequest, ...]) -> None:
        self._beyond[fp] += 1  # until the view holds it (:meth:`_replace`)
        if calls:
            self.recorded_fingerprints += bytes.fromhex(fp)
            self.recorded_calls.append(calls[0] if len(calls) == 1 else calls)
        self.total += 1

    def recorded(self) -> tuple[dict[bytes, list[Entry]], dict[tuple[str, ...], list[Entry]]]:
        """The recorded copies of assistant messages' calls by fingerprint (16 bytes) and by the
        harness's ids of their calls, oldest first: made when a list diverges (in the time of
        the session's length, as reconciling a diverging list already is)."""
        by_fingerprint: dict[bytes, list[Entry]] = {}
        by_harness: dict[tuple[str, ...], list[Entry]] = {}
        buffer = self.recorded_fingerprints
        for n, entry in enumerate(self.recorded_calls):
            key = bytes(buffer[n * _LINK : (n + 1) * _LINK])
            by_fingerprint.setdefault(key, []).append(entry)
            by_harness.setdefault(_named(entry), []).append(entry)
        return by_fingerprint, by_harness

    # -- planning --------------------------------------------------------------------------

    def plan(self, messages: Sequence[Message], start: int = 0) -> Plan:
        """What is new in a chat whose first ``start`` messages are the view's first ``start``
        (not given again) and whose others are ``messages`` (the list's leading system messages,
        its prompt, are not the chat: the ingestor takes them apart). Every call is mapped.
        Raises :class:`MalformedMessage` (nothing recorded) when a call id is used twice in one
        message, when a result answers no call or answers a call a second time, or when it is
        too large."""
        if not 0 <= start <= len(self.view):
            raise ValueError(f"start {start} is beyond the view ({len(self.view)} messages)")
        answered = self._check_unique(messages, start)
        fps = [self.key(m) for m in messages]
        view = self.view
        prefix = start + view.common(start, fps)
        end = start + len(fps)
        if prefix == end:  # nothing beyond what was seen (a retry or a truncation)
            return Plan((), False, start, tuple(fps), tuple(self.view_entries[start:end]), answered)
        return _Planner(self, messages, start, fps, prefix, answered).run()

    def _check_unique(self, messages: Sequence[Message], start: int) -> Mapping[str, bool]:
        """The uniqueness rule (:func:`_check_unique`) over the list, from the state at
        ``start``: kept from the last list when it ended there, else rebuilt from the view."""
        if start == self._answered_at:
            base = self._answered
        else:
            base = {}
            ids = self.ids
            _replay_unique((_unique(e, ids) for e in self.view_entries[:start]), base)
        answered: collections.ChainMap[str, bool] = collections.ChainMap({}, base)
        _check_unique(messages, answered)
        return answered

    def recorded_one(self, item: Planned) -> None:
        """``item`` is now recorded."""
        if item.message.role == "assistant":
            self.ids.add_all(item.calls)
        elif item.answers is not None:
            self.ids.answered.add(item.answers)
        self._count(item.fingerprint, item.calls)

    def settle(self, plan: Plan, consumed: int) -> None:
        """Move the view on after ``consumed`` of the plan's new messages were recorded."""
        if consumed == len(plan.new):
            if plan.diverged or plan.end > len(self.view):
                self._replace(plan, plan.end)  # a prefix keeps the longer view
            self._remember_unique(plan, plan.end)
        elif not plan.diverged and consumed:
            # Part of an append was recorded: the view is the list up to the last of it.
            self._replace(plan, plan.new[consumed - 1].position + 1)
            self._answered, self._answered_at = {}, 0
        else:
            self._answered, self._answered_at = {}, 0

    def _replace(self, plan: Plan, end: int) -> None:
        """The view from the plan's start on becomes the plan's positions up to ``end``."""
        start, n = plan.start, end - plan.start
        view = self.view
        fps = plan.fingerprints
        first = start + view.common(start, fps[:n])
        beyond = self._beyond
        gone, come = view.fingerprints(first), fps[first - start : n]
        view.replace(first, come)
        for fp in gone:
            beyond[fp] += 1
        for fp in come:
            beyond[fp] -= 1
        for fp in {*gone, *come}:
            if not beyond[fp]:
                del beyond[fp]
        self.view_entries[start:] = plan.entries[:n]

    def _remember_unique(self, plan: Plan, end: int) -> None:
        answered = plan.answered
        if isinstance(answered, collections.ChainMap):
            base, own = answered.maps[1], answered.maps[0]
            if base is self._answered:
                base.update(own)  # the list went on from where the last one ended
                self._answered, self._answered_at = base, end
                return
        self._answered, self._answered_at = dict(answered), end


def _replay_unique(positions: Iterable[Unique], answered: MutableMapping[str, bool]) -> None:
    """The uniqueness rule's state after the positions of a list already checked."""
    for seen in positions:
        if isinstance(seen, tuple):
            answered.update(dict.fromkeys(seen, False))
        elif seen is not None:
            answered[seen] = True


def _check_unique(messages: Sequence[Message], answered: MutableMapping[str, bool]) -> None:
    """In one list, the calls of one assistant message have distinct ids, and a call id is
    answered at most once between two assistant messages that request it (a harness may give a
    new call an id it used before: a result answers the latest call with its id). ``answered``
    (call id → answered since the latest call with it) is the state before ``messages``; it is
    updated. Raises :class:`MalformedMessage` for the first message that breaks the rule."""
    for message in messages:
        if message.tool_calls:
            ids = [call.id for call in message.tool_calls]
            if len(set(ids)) != len(ids):
                reused = next(i for i in ids if ids.count(i) > 1)
                raise MalformedMessage(
                    message.index, f"tool call id {reused!r} is used twice in one message"
                )
            answered.update(dict.fromkeys(ids, False))
        elif message.role == "tool":
            call_id = message.tool_call_id or ""
            if answered.get(call_id):
                raise MalformedMessage(message.index, f"a second result for tool call {call_id!r}")
            answered[call_id] = True


class _Planner:
    """One pass over the part of a list after the common prefix with the view."""

    def __init__(
        self,
        cursor: Cursor,
        messages: Sequence[Message],
        start: int,
        fps: list[str],
        prefix: int,
        answered: Mapping[str, bool],
    ) -> None:
        self.cursor = cursor
        self.messages = messages
        self.start = start
        self.fps = fps
        self.prefix = prefix
        self.answered = answered
        self.ids = cursor.ids.copy()
        self.diverged = prefix < len(cursor.view)
        self.entries: list[Entry] = list(cursor.view_entries[start:prefix])
        self.current: dict[str, str] = {}
        """Harness id → the object id a result naming it answers, as of this point in the list."""
        self.claimed: set[str] = set()
        self.available: collections.Counter[str] = collections.Counter()
        self.matches: collections.Counter[str] = collections.Counter()
        """Per fingerprint: how many messages after the prefix are recorded copies."""
        self.matched: collections.Counter[str] = collections.Counter()
        self.by_fingerprint: dict[bytes, list[Entry]] = {}
        self.by_harness: dict[tuple[str, ...], list[Entry]] = {}
        if self.diverged:
            # The prefix's calls, from what the view holds of it (its messages are not given).
            for entry in cursor.view_entries[:prefix]:
                if entry is not None and not isinstance(entry, str):
                    self._point(_named(entry), _objects(entry))
            self.by_fingerprint, self.by_harness = cursor.recorded()
            # recorded, less the prefix: the view past the prefix and what is beyond the view
            self.available = collections.Counter(cursor.view.fingerprints(prefix))
            self.available.update(cursor._beyond)
            tail = collections.Counter(fps[prefix - start :])
            self.matches = collections.Counter(
                {fp: min(n, max(0, self.available[fp])) for fp, n in tail.items()}
            )

    def run(self) -> Plan:
        new: list[Planned] = []
        start = self.start
        ids = self.ids
        for index in range(self.prefix, start + len(self.messages)):
            message, fp = self.messages[index - start], self.fps[index - start]
            named = tuple(ids.canonical(c.id) for c in message.tool_calls)
            unique: Unique = None
            if message.tool_calls:
                unique = tuple(c.id for c in message.tool_calls)
            elif message.role == "tool":
                unique = message.tool_call_id or ""
            calls: tuple[ToolCallRequest, ...] | None = None
            if message.role == "tool":
                held = self._result(message, index, fp, new)
                named = ()
            elif self.diverged and self.available[fp] > 0:
                held = self._known(named, fp)
            elif self.diverged and (edited := self._edited(message)) is not None:
                held = edited  # an assistant message the harness edited
                self._point(named, held)
            elif message.role == "assistant":
                calls = tuple(ids.request(call) for call in message.tool_calls)
                new.append(Planned(message, index, fp, calls=calls))
                held = tuple(c.id for c in calls)
                named = tuple(ids.canonical(c.id) for c in message.tool_calls)
                self._point(named, held)
            else:
                new.append(Planned(message, index, fp))
                held = ()
            self.entries.append(_entry(ids, held, named, unique, calls))
        return Plan(
            tuple(new), self.diverged, start, tuple(self.fps), tuple(self.entries), self.answered
        )

    def _point(self, named: Sequence[str], held: Sequence[str]) -> None:
        """An assistant message's calls (by the harness's ids) stand for these objects."""
        for call_id, object_id in zip(named, held, strict=False):
            self.current[call_id] = object_id
            self.claimed.add(object_id)

    def _result(self, message: Message, index: int, fp: str, new: list[Planned]) -> tuple[str, ...]:
        """The result's call (as a tuple of its object id), the result planned if new."""
        call_id = self.ids.canonical(message.tool_call_id or "")
        target = self.current.get(call_id) or self.ids.answer(call_id)
        if target is None:
            raise MalformedMessage(
                message.index, f"tool result for {call_id!r}, which no assistant message requested"
            )
        if target in self.ids.answered:
            if self.diverged and target in self.cursor.ids.answered:
                return (target,)  # recorded already: a diverging list holds it again
            raise MalformedMessage(message.index, f"a second result for tool call {call_id!r}")
        limit = self.cursor.max_output_bytes
        text = message.text
        if len(text) > limit // 4 and len(text.encode("utf-8", "surrogatepass")) > limit:
            raise MalformedMessage(
                message.index, f"the tool output is over the limit of {limit} bytes"
            )
        self.ids.answered.add(target)
        new.append(Planned(message, index, fp, answers=target))
        return (target,)

    def _known(self, named: Sequence[str], fp: str) -> tuple[str, ...]:
        """A message recorded before: its calls are those of a recorded copy (the list is taken
        to hold the latest copies of identical messages, as a compaction keeps the recent ones:
        the j-th match after the prefix is copy ``len(copies) - matches + j``)."""
        self.available[fp] -= 1
        copies = self.by_fingerprint.get(bytes.fromhex(fp), ())
        j = self.matched[fp]
        self.matched[fp] += 1
        held = _objects(copies[max(0, len(copies) - self.matches[fp] + j)]) if copies else ()
        self._point(named, held)
        return held

    def _edited(self, message: Message) -> tuple[str, ...] | None:
        """The calls of the recorded assistant message that ``message`` (not recorded as it
        stands) is an edited copy of, or None. An edited copy differs in its text only: it
        carries the same calls — the same harness ids in the same order, with the same names
        and arguments (a harness that reuses ids sends new calls under known ids)."""
        if message.role != "assistant" or not message.tool_calls:
            return None
        harness = tuple(self.ids.canonical(c.id) for c in message.tool_calls)
        wanted = [(c.name, c.arguments) for c in message.tool_calls]
        for entry in reversed(self.by_harness.get(harness, ())):
            held = _objects(entry)
            if any(i in self.claimed for i in held):
                continue
            calls = [self.cursor.ids.call(i) for i in held]
            if [(c.name, c.arguments) for c in calls if c is not None] == wanted:
                return held
        return None
