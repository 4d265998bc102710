"""The one place a harness's tool-call ids are mapped to toolcall object ids, and back.

A harness names its tool calls as it likes: ``call_0`` on every turn (llama.cpp, Kimi), ids another
session uses too, ``functions.bash:0``, ``toolu_01#2``, a store's own ``log:...``. None of them is
ever an object id. The n-th call a session's harness gives the id ``h`` is stored as
:func:`~selfctx.domain.identifiers.toolcall_object_id` ``(session, h, n)`` (``tc_`` and 24 hex
digits), which is valid for every provider format and which no other session can produce. That id
is what the model is shown (metadata lines, the calls in the assembled chat), so it is also what
comes back:

* a tool result from the harness names the harness's id: it answers the latest call with that id
  (:meth:`CallIds.answer`); a result naming the object id itself (a harness that echoes the
  assembled request) is understood too;
* a context tool the model calls names an object id, a ``#n`` handle or a harness id
  (:meth:`CallIds.resolve`).

Ids stored before this scheme (the harness's own id as the object id) are kept; one that is not
valid for a provider is sent under :func:`emitted_id`, which :meth:`CallIds.resolve` maps back.
docs/decisions/0030-tool-call-ids.md records the design. The Responses format, a proxy, and any
other harness front build on :class:`CallIds` rather than mapping ids themselves.
"""

from __future__ import annotations

from collections.abc import Iterable

from selfctx.domain.chat import ToolCallRequest
from selfctx.domain.hashing import sha256_hex, stable_stringify
from selfctx.domain.identifiers import is_valid_toolcall_id, toolcall_object_id

__all__ = ["CallIds", "emitted_id"]


def emitted_id(object_id: str) -> str:
    """The id a toolcall object is sent to providers under: its own id, which is valid for every
    format, except for ids stored before decision 0030 that are not (those get a stable alias)."""
    if is_valid_toolcall_id(object_id):
        return object_id
    return "tc_x" + sha256_hex(stable_stringify(["stored toolcall", object_id]))[:24]


class CallIds:
    """One session's tool calls: the harness's id of each, its object id, and which have a
    recorded result. :meth:`copy` gives a scratch map to plan a list on before recording it."""

    def __init__(self, session_id: str, parent: CallIds | None = None) -> None:
        self.session_id = session_id
        self._parent = parent
        """The map a scratch copy reads through (None: this map holds everything)."""
        self._by_provider: dict[str, str | tuple[str, ...]] = {}
        """Harness id → the object ids of its calls, oldest first: the one id while there is one
        (a tuple of one was 48 bytes more a call; decision 0141)."""
        self._calls: dict[str, ToolCallRequest] = {}
        """Object id → the call as recorded (object id, harness id in ``provider_id``)."""
        self._aliases: dict[str, str] = {}
        """Emitted id → object id, for stored ids that are sent under an alias."""
        self.answered: _Answered = _Answered(parent.answered if parent is not None else None)
        """Object ids of the calls whose result is recorded."""

    def copy(self) -> CallIds:
        """A scratch map with the same contents: it reads through this one and keeps what is
        added to it apart, so that making it costs nothing however many calls the session has
        (this map must not change while the copy is in use)."""
        return CallIds(self.session_id, self)

    def _provider_ids(self, provider_id: str) -> tuple[str, ...]:
        found = self._by_provider.get(provider_id)
        if found is None:
            return self._parent._provider_ids(provider_id) if self._parent is not None else ()
        return (found,) if isinstance(found, str) else found

    def _known_provider(self, provider_id: str) -> bool:
        if provider_id in self._by_provider:
            return True
        return self._parent is not None and self._parent._known_provider(provider_id)

    def _call(self, object_id: str) -> ToolCallRequest | None:
        found = self._calls.get(object_id)
        if found is None and self._parent is not None:
            return self._parent._call(object_id)
        return found

    def _alias(self, ref: str) -> str | None:
        found = self._aliases.get(ref)
        if found is None and self._parent is not None:
            return self._parent._alias(ref)
        return found

    # -- calls ----------------------------------------------------------------------------

    def request(self, call: ToolCallRequest) -> ToolCallRequest:
        """A call of a new assistant message, as the harness named it: the same call under its
        object id (a new one, also when the harness used the id before), now known to the map."""
        provider_id = call.id
        occurrence = len(self._provider_ids(provider_id)) + 1
        object_id = toolcall_object_id(self.session_id, provider_id, occurrence)
        mapped = ToolCallRequest(object_id, call.name, call.arguments, provider_id=provider_id)
        self.add(mapped)
        return mapped

    def add(self, call: ToolCallRequest) -> None:
        """A call as the stored chat holds it (``provider_id`` None: stored under the harness's
        own id, before decision 0030)."""
        provider_id = call.provider_id if call.provider_id is not None else call.id
        known = self._provider_ids(provider_id)
        self._by_provider[provider_id] = (*known, call.id) if known else call.id
        self._calls[call.id] = call
        alias = emitted_id(call.id)
        if alias != call.id:
            self._aliases[alias] = call.id

    def add_all(self, calls: Iterable[ToolCallRequest]) -> None:
        for call in calls:
            self.add(call)

    def call(self, object_id: str) -> ToolCallRequest | None:
        """The recorded call with this object id."""
        return self._call(object_id)

    def calls_of(self, provider_id: str) -> list[ToolCallRequest]:
        """The calls the harness gave this id, oldest first."""
        out = []
        for object_id in self._provider_ids(provider_id):
            call = self._call(object_id)
            assert call is not None
            out.append(call)
        return out

    def known(self, object_id: str) -> bool:
        return self._call(object_id) is not None

    def occurrences(self, provider_id: str) -> int:
        """How many calls the harness has given this id."""
        return len(self._provider_ids(provider_id))

    def provider_id(self, object_id: str) -> str:
        """The harness's id of a call (the object id itself for an unknown one)."""
        call = self._call(object_id)
        if call is None or call.provider_id is None:
            return object_id
        return call.provider_id

    # -- the way back in ------------------------------------------------------------------

    def answer(self, provider_id: str) -> str | None:
        """The object id of the call a tool result naming ``provider_id`` answers: the latest
        call the harness gave that id, or the call whose emitted id it is; None if none."""
        latest = self._provider_ids(provider_id)
        if latest:
            return latest[-1]
        return self._emitted(provider_id)

    def canonical(self, provider_id: str) -> str:
        """The harness's own id for an id that came back in (an emitted id becomes the harness's
        id of its call), so that a message is known by one form whichever id it carries."""
        if self._known_provider(provider_id):
            return provider_id
        object_id = self._emitted(provider_id)
        return provider_id if object_id is None else self.provider_id(object_id)

    def resolve(self, ref: str) -> str:
        """The object id a context tool's ``id`` argument means: an object id (or the alias it
        was sent under) as the model was shown, else the latest call of a harness id; anything
        else (``#n``, a file's id, a stranger) is left for the service to resolve or refuse."""
        if not isinstance(ref, str):
            return ref
        object_id = self._emitted(ref)
        if object_id is not None:
            return object_id
        latest = self._provider_ids(ref)
        return latest[-1] if latest else ref

    def _emitted(self, ref: str) -> str | None:
        if self._call(ref) is not None:
            return ref
        return self._alias(ref)


class _Answered:
    """A set of object ids, read through to a parent set (a scratch copy's answered calls)."""

    def __init__(self, parent: _Answered | None = None) -> None:
        self._parent = parent
        self._own: set[str] = set()

    def __contains__(self, object_id: object) -> bool:
        if object_id in self._own:
            return True
        return self._parent is not None and object_id in self._parent

    def add(self, object_id: str) -> None:
        self._own.add(object_id)
