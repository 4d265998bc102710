"""The chat: canonical conversation state (docs/specification.md §2, the chat), kept as turns of
messages.

A turn begins at each user message; messages before the first user message belong to turn 0.
Tool outputs are never stored in the chat: a :class:`ToolResult` only names the toolcall object,
whose version holds the output. This is what lets the chat stay small while outputs collapse.
"""

from __future__ import annotations

import json
import threading
import zlib
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import Any, Final, TypeAlias

import attrs
from pyrsistent import PMap, PVector, freeze, pvector, thaw

from selfctx.domain.errors import InvalidInput
from selfctx.domain.identifiers import interned, interned_or_none

__all__ = [
    "AssistantMessage",
    "ChatMessage",
    "ContextNote",
    "FlatMap",
    "ToolCallRequest",
    "ToolResult",
    "Turn",
    "UserMessage",
    "close_turns",
    "closed",
    "closed_from_stored",
    "freeze_json",
    "held_messages",
    "json_from_stored",
    "message_from_json",
    "message_to_json",
    "packed_stored",
    "packed_turns",
    "stored_json",
    "turn_from_json",
    "turn_to_json",
    "whole_chat_read",
    "with_turn",
]


_SCALARS = (str, int, float, bool, type(None))

FLAT_KEYS: Final = 8
"""The most keys a :class:`FlatMap` finds by a scan of its keys; a larger one keeps its keys'
positions in a dict (docs/decisions/0127-the-chats-arguments-as-flat-maps.md,
docs/decisions/0132-json-objects-keep-the-clients-order.md)."""

_KEY_TUPLES: dict[tuple[str, ...], tuple[str, ...]] = {}
"""One tuple per list of keys in one order (a tool's parameter names as a client sends them),
shared by every map that has them; at most :data:`_KEY_TUPLES_HELD` (beyond it, a map keeps a
tuple of its own)."""

_KEY_TUPLES_HELD: Final = 4096


class FlatMap(Mapping[str, Any]):
    """An immutable JSON object (a tool call's arguments, an image or reasoning block, and every
    object nested in one): its keys, in the order they were given (the client's, as its JSON
    had them), and its values, frozen. Everything written from it (a request's arguments, a
    stored document) has the client's order whatever the interpreter's hash seed
    (docs/decisions/0132-json-objects-keep-the-clients-order.md). Up to :data:`FLAT_KEYS` keys,
    the keys are a tuple shared by every map with the same keys in the same order and a lookup
    scans them; a larger map keeps its keys' positions in a dict. About 100 bytes with one key,
    where a persistent map is about 290 (docs/decisions/0127-the-chats-arguments-as-flat-maps.md).

    Equal to, and hashed as, any mapping of the same pairs, in whatever order (JSON's and
    ``dict``'s equality): the order is kept for the bytes written, never part of identity."""

    __slots__ = ("_keys", "_values")

    _keys: tuple[str, ...] | dict[str, int]
    _values: tuple[Any, ...]

    def __init__(self, keys: tuple[str, ...] | dict[str, int], values: tuple[Any, ...]) -> None:
        object.__setattr__(self, "_keys", keys)
        object.__setattr__(self, "_values", values)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"FlatMap is immutable: cannot set {name!r}")

    def __getitem__(self, key: str) -> Any:
        keys = self._keys
        if isinstance(keys, dict):
            return self._values[keys[key]]
        for i in range(len(keys)):
            if keys[i] == key:
                return self._values[i]
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def pairs(self) -> Iterator[tuple[str, Any]]:
        """The pairs, in order, without a view."""
        return zip(self._keys, self._values, strict=True)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(other) is FlatMap:
            if self._keys is other._keys:
                return self._values == other._values
            return dict(self.pairs()) == dict(other.pairs())
        if not isinstance(other, Mapping):
            return NotImplemented
        return len(other) == len(self._keys) and dict(self.pairs()) == dict(other.items())

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return hash(frozenset(self.pairs()))  # as a persistent map's hash: the order is not in it

    def __repr__(self) -> str:
        return f"FlatMap({dict(self.pairs())!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (FlatMap, (self._keys, self._values))


def _keys_of(keys: tuple[str, ...]) -> tuple[str, ...] | dict[str, int]:
    if len(keys) > FLAT_KEYS:
        return {k: i for i, k in enumerate(keys)}
    shared = _KEY_TUPLES.get(keys)
    if shared is None and len(_KEY_TUPLES) < _KEY_TUPLES_HELD:
        shared = _KEY_TUPLES.setdefault(keys, keys)
    return shared if shared is not None else keys


def _frozen_object(value: Mapping[str, Any]) -> FlatMap:
    if type(value) is FlatMap:
        return value
    keys = tuple([interned(k) for k in value])
    values = tuple(value.values())  # a persistent map (stored before 0132): the order it has
    if not all(type(v) in _PLAIN for v in values):
        values = tuple([v if type(v) in _PLAIN else _frozen(v) for v in values])
    return FlatMap(_keys_of(keys), values)


def _frozen(value: Any) -> Any:
    if type(value) in _PLAIN:
        return value
    if isinstance(value, Mapping):
        return _frozen_object(value)
    if isinstance(value, list | tuple | PVector):
        # tuples are JSON arrays too: vectors, as they would be after a trip through the store
        return pvector([_frozen(v) for v in value])
    return freeze(value)  # nothing JSON holds: as pyrsistent freezes it


def freeze_json(value: Mapping[str, Any]) -> Mapping[str, Any]:
    """A JSON object made immutable, its keys interned and kept in the order they came: a
    :class:`FlatMap`, every object nested in it one too, every array a persistent vector
    (docs/decisions/0132-json-objects-keep-the-clients-order.md).

    The keys are a tool's few parameter names, each read from its own JSON: one shared string
    for each name, not a copy per call (decision 0121), as ids and tool names are (decision
    0092). A frozen map is returned as it is."""
    if type(value) is FlatMap:
        return value
    if not isinstance(value, Mapping):  # not an object: frozen as it was before 0132, for
        return _frozen(value)  # the validation that refuses it (a tool call's args)
    return _frozen_object(value)


_PLAIN: frozenset[type] = frozenset(_SCALARS)
_VECTOR: type = type(pvector())


def thaw_json(value: Any) -> Any:
    """A frozen JSON value as plain dicts and lists again, each object's keys in the order it
    has them: what pyrsistent's ``thaw`` gives, at a third of its cost (the type of each value
    is looked up, not tested against abstract classes; scalars are not visited), and a
    :class:`FlatMap` as a dict. Tuples stay tuples and sets become sets, as there."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is FlatMap:
        for v in value._values:
            if type(v) not in _PLAIN:
                return {k: v if type(v) in _PLAIN else thaw_json(v) for k, v in value.pairs()}
        return dict(value.pairs())  # scalars only (most arguments): no walk
    if kind is PMap or kind is dict:
        return {
            k: v if type(v) in _PLAIN else thaw_json(v)
            for k, v in (value.iteritems() if kind is PMap else value.items())
        }
    if kind is _VECTOR or kind is list:
        return [v if type(v) in _PLAIN else thaw_json(v) for v in value]
    return thaw(value)  # vectors, tuples, sets and subclasses, as pyrsistent thaws them


STORED_ORDER_KEYS: Final = 8
"""The most keys of a JSON object that a store is trusted to give back in the order it was
written: XTDB 1.x reads every object of a document as a Clojure map, which keeps its order up to
8 keys (an array map) and not beyond (a hash map, in the order of its keys' hashes). A frozen
object holding a larger one is stored as its JSON text (:func:`stored_json`)."""


def _holds_large_object(value: Any) -> bool:
    kind = type(value)
    if kind is FlatMap:
        if len(value) > STORED_ORDER_KEYS:
            return True
        return any(type(v) not in _PLAIN and _holds_large_object(v) for v in value._values)
    if kind is _VECTOR:
        return any(_holds_large_object(v) for v in value if type(v) not in _PLAIN)
    if isinstance(value, Mapping):
        return len(value) > STORED_ORDER_KEYS or any(_holds_large_object(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_holds_large_object(v) for v in value)
    return False


def stored_json(value: Mapping[str, Any]) -> Any:
    """The stored form of a frozen JSON object (a call's arguments, a block, a tool call's
    ``args``): the object itself, or, when an object in it has more than
    :data:`STORED_ORDER_KEYS` keys, its JSON text, so that every store gives back the client's
    order (docs/decisions/0132-json-objects-keep-the-clients-order.md). Where these objects are
    stored a string never was one: :func:`json_from_stored` tells the two apart."""
    plain = thaw_json(value)
    if _holds_large_object(value):
        return json.dumps(plain, ensure_ascii=False, separators=(",", ":"))
    return plain


def json_from_stored(value: Any) -> Any:
    """Inverse of :func:`stored_json` (anything stored before it, an object, as it is); raises
    :class:`InvalidInput` for a text that is not a JSON object."""
    if not isinstance(value, str):
        return value
    try:
        plain = json.loads(value)
    except ValueError as exc:
        raise InvalidInput("stored JSON object", value[:80], str(exc)) from exc
    if not isinstance(plain, dict):
        raise InvalidInput("stored JSON object", value[:80], "is not a JSON object")
    return plain


def _stored_blocks(items: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(json_from_stored(item) for item in items)


@attrs.frozen(weakref_slot=False)
class ToolCallRequest:
    """A tool call the assistant asked for, as the provider reported it."""

    id: str = attrs.field(converter=interned)
    """The toolcall object's id (docs/decisions/0030-tool-call-ids.md)."""
    name: str = attrs.field(converter=interned)
    """The tool's name."""
    arguments: Mapping[str, Any] = attrs.field(converter=freeze_json, factory=dict)
    """The call's arguments as a JSON object."""
    provider_id: str | None = attrs.field(default=None, converter=interned_or_none)
    """The id the harness gave the call, when it is not ``id`` (a harness's ids are mapped)."""


def _blocks(items: Iterable[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    return tuple(freeze_json(item) for item in items)


def _tool_calls(items: Iterable[ToolCallRequest]) -> tuple[ToolCallRequest, ...]:
    return tuple(items)


@attrs.frozen(weakref_slot=False)
class UserMessage:
    """A message from the user; it begins a new turn."""

    text: str
    """The message text."""
    images: tuple[Mapping[str, Any], ...] = attrs.field(converter=_blocks, default=())
    """Images that came with the text (``{"type": "image", "url": ...}``, see
    ``selfctx.adapters.harness.messages``), shown after it."""


@attrs.frozen(weakref_slot=False)
class AssistantMessage:
    """A message from the model: text and the tool calls it requested."""

    text: str
    """The message text (may be empty when the message only calls tools)."""
    tool_calls: tuple[ToolCallRequest, ...] = attrs.field(converter=_tool_calls, default=())
    """Tool calls requested, in the provider's order."""
    reasoning: tuple[Mapping[str, Any], ...] = attrs.field(converter=_blocks, default=())
    """The provider's reasoning blocks, opaque and exactly as it sent them (Anthropic
    ``thinking``/``redacted_thinking`` blocks with their signatures, OpenAI Responses
    ``reasoning`` items): a provider requires some of them back unchanged."""


@attrs.frozen(weakref_slot=False)
class ToolResult:
    """The place of a tool's output in the chat: a reference to the toolcall object."""

    toolcall_id: str = attrs.field(converter=interned)
    """Id of the toolcall object holding the output."""
    images: tuple[Mapping[str, Any], ...] = attrs.field(converter=_blocks, default=())
    """Images the tool returned with its output: shown with it while it is active."""


@attrs.frozen(weakref_slot=False)
class ContextNote:
    """A line the context manager itself adds to the chat (what a budget collapse did)."""

    text: str
    """The note."""


ChatMessage: TypeAlias = UserMessage | AssistantMessage | ToolResult | ContextNote


OPEN_TURNS: Final = 4
"""The last this many turns of a chat hold their messages as objects; every turn before them is
packed (:func:`closed`): one compressed text of its messages' stored forms, read back on demand
(docs/decisions/0144-the-chats-closed-turns-packed-from-their-stored-form.md)."""

UNPACKED_HELD: Final = 16
"""The most packed turns whose messages are held read back at once (for the whole process):
the ones read last."""

_unpacked: OrderedDict[int, tuple[bytes, PVector[ChatMessage]]] = OrderedDict()
"""A packed turn's messages as last read back, by the identity of its packed text (the entry
holds the text, so the identity is not reused while it is there), the most recently read last;
at most :data:`UNPACKED_HELD`. A turn packed leaves its messages here, so that the passes that
read the last turns read the same objects for a while (the memos keyed by a message's
identity)."""


def _messages(items: Iterable[ChatMessage] | bytes) -> PVector[ChatMessage] | bytes:
    # A vector is immutable: taken as it is, not copied (a turn's ``append`` hands over its
    # messages with one more, and copying them all made appending to a long turn cost its length)
    if type(items) is _VECTOR or isinstance(items, bytes):
        return items  # type: ignore[return-value]
    return pvector(items)


def _packed_text(messages: Iterable[ChatMessage]) -> bytes:
    text = json.dumps(
        [message_to_json(m) for m in messages], ensure_ascii=False, separators=(",", ":")
    )
    return zlib.compress(text.encode("utf-8", "surrogatepass"), 6)


def packed_stored(packed: bytes) -> list[dict[str, Any]]:
    """The stored forms (:func:`message_to_json`) of a packed turn's messages, in order."""
    data: list[dict[str, Any]] = json.loads(
        zlib.decompress(packed).decode("utf-8", "surrogatepass")
    )
    return data


def _unpack(packed: bytes) -> PVector[ChatMessage]:
    key = id(packed)
    hit = _unpacked.get(key)
    if hit is not None and hit[0] is packed:
        with suppress(KeyError):  # another thread's read may have let it go meanwhile
            _unpacked.move_to_end(key)
        return hit[1]
    messages: PVector[ChatMessage] = pvector([message_from_json(d) for d in packed_stored(packed)])
    _hold(packed, messages)
    return messages


_reading_whole = [0]
"""How many :func:`whole_chat_read` blocks are running (in any thread)."""
_reading_lock = threading.Lock()


def _hold(packed: bytes, messages: PVector[ChatMessage]) -> None:
    _unpacked[id(packed)] = (packed, messages)
    with suppress(KeyError):  # the threads that read turns share the cache: no step may fail
        _unpacked.move_to_end(id(packed))
        while len(_unpacked) > UNPACKED_HELD and not _reading_whole[0]:
            _unpacked.popitem(last=False)


@contextmanager
def whole_chat_read() -> Iterator[None]:
    """While this block runs, every packed turn read back stays held (then the cache is cut to
    :data:`UNPACKED_HELD` again): a resume's passes over the whole chat (the harness's cursor
    rebuilt, the first rendering) read each closed turn back once, not once a pass, and hold
    at most what the chat held before it was packed (decision 0144)."""
    with _reading_lock:
        _reading_whole[0] += 1
    try:
        yield
    finally:
        with _reading_lock:
            _reading_whole[0] -= 1
            with suppress(KeyError):
                while len(_unpacked) > UNPACKED_HELD and not _reading_whole[0]:
                    _unpacked.popitem(last=False)


@attrs.frozen(weakref_slot=False, eq=False)
class Turn:
    """One turn: a user message (absent in turn 0) and everything up to the next one. A closed
    turn (all but a chat's last :data:`OPEN_TURNS`) holds its messages packed (:func:`closed`);
    ``messages`` reads them back, the same messages (equal, written byte for byte the same)."""

    number: int
    """0 for the preamble before the first user message, then 1, 2, ..."""
    _messages: PVector[ChatMessage] | bytes = attrs.field(
        converter=_messages, factory=pvector, alias="messages"
    )
    """The turn's messages in order, or their packed text."""

    @property
    def messages(self) -> PVector[ChatMessage]:
        """The turn's messages in order."""
        held = self._messages
        if type(held) is bytes:
            return _unpack(held)
        return held  # type: ignore[return-value]

    @property
    def packed(self) -> bytes | None:
        """The packed text of a closed turn's messages; None for an open one."""
        held = self._messages
        return held if type(held) is bytes else None

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Turn):
            return NotImplemented
        if self.number != other.number:
            return False
        mine, theirs = self._messages, other._messages
        if mine is theirs or (type(mine) is bytes and type(theirs) is bytes and mine == theirs):
            return True
        return self.messages == other.messages

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return hash((self.number, self.messages))

    def append(self, message: ChatMessage) -> Turn:
        return attrs.evolve(self, messages=self.messages.append(message))

    @property
    def toolcall_ids(self) -> tuple[str, ...]:
        held = self._messages
        if type(held) is bytes:  # read from the stored forms: no message objects made
            return tuple(
                interned(d["toolcall_ref"]) for d in packed_stored(held) if d["role"] == "tool"
            )
        return tuple(m.toolcall_id for m in self.messages if isinstance(m, ToolResult))

    def last_toolcall_ids(self, count: int) -> tuple[str, ...]:
        """The ids of the last ``count`` tool results of the turn (scans from the end)."""
        found: list[str] = []
        for message in reversed(self.messages):
            if isinstance(message, ToolResult):
                found.append(message.toolcall_id)
                if len(found) == count:
                    break
        return tuple(reversed(found))


def closed(turn: Turn) -> Turn:
    """``turn`` with its messages packed: their stored forms as one compressed text (equal to
    ``turn``, its messages read back on demand). A packed turn is returned as it is."""
    held = turn._messages
    if type(held) is bytes:
        return turn
    packed = _packed_text(held)  # type: ignore[arg-type]
    _hold(packed, held)  # type: ignore[arg-type]
    return Turn(number=turn.number, messages=packed)


def close_turns(turns: Any) -> None:
    """Pack the turns before the last :data:`OPEN_TURNS` of ``turns`` (a list or a persistent
    vector's evolver, after a turn was appended to it) back to the last one packed: the turn
    that has just left them, and any a restored chat brought."""
    last = len(turns) - 1 - OPEN_TURNS
    while last >= 0 and turns[last].packed is None:
        turns[last] = closed(turns[last])
        last -= 1


def _stored_object(value: Any) -> bool:
    """Whether ``value`` (a call's arguments, a block) is what :func:`stored_json` writes for
    the object :func:`json_from_stored` reads from it."""
    if type(value) is dict:
        return not _holds_large_object(value)
    if type(value) is not str:
        return False
    try:
        plain = json.loads(value)
    except ValueError:
        return False
    return (
        type(plain) is dict
        and _holds_large_object(plain)
        and json.dumps(plain, ensure_ascii=False, separators=(",", ":")) == value
    )


def _stored_blocks_as_written(data: Mapping[str, Any], key: str) -> bool:
    items = data[key]
    return type(items) is list and bool(items) and all(_stored_object(i) for i in items)


_USER_KEYS: Final = (["role", "text"], ["role", "text", "images"])
_ASSISTANT_KEYS: Final = (
    ["role", "text", "tool_calls"],
    ["role", "text", "tool_calls", "reasoning"],
)
_CALL_KEYS: Final = (["id", "name", "arguments"], ["id", "name", "arguments", "provider_id"])
_TOOL_KEYS: Final = (["role", "toolcall_ref"], ["role", "toolcall_ref", "images"])


def _as_written(data: Any) -> bool:
    """Whether ``data``, a message's stored form read back, is exactly what
    :func:`message_to_json` writes for the message :func:`message_from_json` reads from it
    (keys, their order and the values' forms), so that a turn packed from it writes it back
    byte for byte as one packed from its messages would (decision 0144)."""
    if type(data) is not dict:
        return False
    keys = list(data)
    role = data.get("role")
    if role == "tool":
        return (
            keys in _TOOL_KEYS
            and type(data["toolcall_ref"]) is str
            and (len(keys) == 2 or _stored_blocks_as_written(data, "images"))
        )
    if role == "user" or role == "note":
        return (
            (keys == _USER_KEYS[0] or (role == "user" and keys == _USER_KEYS[1]))
            and type(data["text"]) is str
            and (len(keys) == 2 or _stored_blocks_as_written(data, "images"))
        )
    if role == "assistant":
        calls = data["tool_calls"] if keys in _ASSISTANT_KEYS else None
        return (
            type(calls) is list
            and type(data["text"]) is str
            and (len(keys) == 3 or _stored_blocks_as_written(data, "reasoning"))
            and all(_call_as_written(c) for c in calls)
        )
    return False


def _call_as_written(call: Any) -> bool:
    if type(call) is not dict:
        return False
    keys = list(call)
    return (
        keys in _CALL_KEYS
        and type(call["id"]) is str
        and type(call["name"]) is str
        and (len(keys) == 3 or type(call["provider_id"]) is str)
        and _stored_object(call["arguments"])
    )


def closed_from_stored(data: Mapping[str, Any]) -> Turn:
    """The closed turn of ``data``, a turn's stored form (:func:`turn_to_json`), packed
    straight from it when every message is stored as :func:`message_to_json` writes it (no
    message object made); otherwise read as :func:`turn_from_json` reads it, then packed. Either
    way equal to ``closed(turn_from_json(data))``, its packed text the same bytes."""
    messages = data["messages"]
    if type(messages) is list and all(_as_written(m) for m in messages):
        text = json.dumps(messages, ensure_ascii=False, separators=(",", ":"))
        packed = zlib.compress(text.encode("utf-8", "surrogatepass"), 6)
        if _reading_whole[0]:  # a resume's passes read it next: its messages made once, held
            _hold(packed, pvector([message_from_json(m) for m in messages]))
        return Turn(number=data["number"], messages=packed)
    return closed(turn_from_json(data))


def held_messages(packed: bytes) -> PVector[ChatMessage] | None:
    """A packed turn's messages if they are held read back (none read back for it)."""
    hit = _unpacked.get(id(packed))
    return hit[1] if hit is not None and hit[0] is packed else None


def packed_turns(turns: Iterable[Turn]) -> PVector[Turn]:
    """``turns`` (a whole chat, read back from its stored form) with every turn before the last
    :data:`OPEN_TURNS` packed."""
    listed = list(turns)
    last = len(listed) - OPEN_TURNS
    return pvector([closed(t) if n < last else t for n, t in enumerate(listed)])


def with_turn(turns: PVector[Turn], turn: Turn) -> PVector[Turn]:
    """``turns`` with ``turn`` appended, the turn that leaves the last :data:`OPEN_TURNS`
    packed."""
    out = turns.evolver()
    out.append(turn)
    close_turns(out)
    return out.persistent()


def _call_to_json(call: ToolCallRequest) -> dict[str, Any]:
    out = {"id": call.id, "name": call.name, "arguments": stored_json(call.arguments)}
    if call.provider_id is not None:  # absent otherwise, as in chats written before it existed
        out["provider_id"] = call.provider_id
    return out


def message_to_json(message: ChatMessage) -> dict[str, Any]:
    """The stored form of a chat message (used in the chat document and the session log)."""
    if isinstance(message, UserMessage):
        user: dict[str, Any] = {"role": "user", "text": message.text}
        if message.images:  # absent when empty, as in messages stored before images were kept
            user["images"] = [stored_json(image) for image in message.images]
        return user
    if isinstance(message, AssistantMessage):
        data = {
            "role": "assistant",
            "text": message.text,
            "tool_calls": [_call_to_json(c) for c in message.tool_calls],
        }
        if message.reasoning:  # absent when empty: messages stored before it read the same
            data["reasoning"] = [stored_json(block) for block in message.reasoning]
        return data
    if isinstance(message, ContextNote):
        return {"role": "note", "text": message.text}
    tool: dict[str, Any] = {"role": "tool", "toolcall_ref": message.toolcall_id}
    if message.images:
        tool["images"] = [stored_json(image) for image in message.images]
    return tool


def message_from_json(data: Mapping[str, Any]) -> ChatMessage:
    """Inverse of :func:`message_to_json`."""
    role = data["role"]
    if role == "user":
        return UserMessage(text=data["text"], images=_stored_blocks(data.get("images", ())))
    if role == "assistant":
        return AssistantMessage(
            text=data["text"],
            tool_calls=tuple(
                ToolCallRequest(
                    id=c["id"],
                    name=c["name"],
                    arguments=json_from_stored(c["arguments"]),
                    provider_id=c.get("provider_id"),
                )
                for c in data["tool_calls"]
            ),
            reasoning=_stored_blocks(data.get("reasoning", ())),
        )
    if role == "tool":
        return ToolResult(
            toolcall_id=data["toolcall_ref"], images=_stored_blocks(data.get("images", ()))
        )
    if role == "note":
        return ContextNote(text=data["text"])
    raise ValueError(f"unknown chat message role {role!r}")


def turn_to_json(turn: Turn) -> dict[str, Any]:
    """The stored form of a turn: ``{"number", "messages": [...]}``."""
    packed = turn.packed
    if packed is not None:
        return {"number": turn.number, "messages": packed_stored(packed)}
    return {"number": turn.number, "messages": [message_to_json(m) for m in turn.messages]}


def turn_from_json(data: Mapping[str, Any]) -> Turn:
    """Inverse of :func:`turn_to_json`."""
    return Turn(number=data["number"], messages=[message_from_json(m) for m in data["messages"]])
