"""A session's assembled requests as JSON text, reusing the text of what the last one held.

An assembled conversation of a long session is mostly the messages of the previous one: the
render memo (``RenderMemo``) hands back the very same message objects while they do not change,
and never changes them in place. :class:`ItemEncoder` keeps each message's JSON text by the
object's identity from one request to the next, holding the object so that its identity cannot
be reused, and keeping only what the last request used; so does :class:`IdentityMemo` for any
other figure of a message. The text is exactly what the ``dumps`` it is given writes for the
whole body, key order and separators included (the tests hold it to that).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Generic, TypeVar

__all__ = ["CONVERSATION_KEYS", "IdentityMemo", "ItemEncoder", "ascii_dumps"]

CONVERSATION_KEYS: Final = ("messages", "input", "system")
"""The fields of a request body that hold the conversation (Chat Completions and Anthropic
``messages``, Responses ``input``, Anthropic ``system`` blocks)."""

T = TypeVar("T")


_ASCII: Final = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False)
"""One encoder for every call: ``json.dumps`` with options builds a new one each time, which
costs as much as encoding a short message."""


def ascii_dumps(value: Any) -> str:
    """Compact ASCII JSON (what the JSON-RPC server writes)."""
    return _ASCII.encode(value)


class IdentityMemo(Generic[T]):
    """A figure of each object, kept while the object is (by identity) in every call."""

    def __init__(self, make: Callable[[Any], T]) -> None:
        self._make = make
        self._kept: dict[int, tuple[Any, T]] = {}
        self._used: dict[int, tuple[Any, T]] = {}

    def __call__(self, value: Any) -> T:
        hit = self._kept.get(id(value))
        if hit is None or hit[0] is not value:
            hit = self._used.get(id(value))
            if hit is None or hit[0] is not value:
                hit = (value, self._make(value))
        self._used[id(value)] = hit
        return hit[1]

    def done(self) -> None:
        """End of one request: keep only what it used."""
        self._kept, self._used = self._used, {}


class ItemEncoder:
    """Encodes one session's bodies, one after another (not thread-safe)."""

    def __init__(
        self, dumps: Callable[[Any], str] = ascii_dumps, item_separator: str = ","
    ) -> None:
        self._dumps = dumps
        self._comma = item_separator
        self._colon = ":" if item_separator == "," else ": "
        self._items: IdentityMemo[str] = IdentityMemo(self._encode_item)

    def encode(self, body: Mapping[str, Any]) -> str:
        """``body`` as JSON text."""
        parts = []
        for key, value in body.items():
            if key in CONVERSATION_KEYS and type(value) is list:
                text = self.items(value)
            else:
                text = self._dumps(value)
            parts.append(f"{self._dumps(key)}{self._colon}{text}")
        self._items.done()
        return "{" + self._comma.join(parts) + "}"

    def items(self, values: Sequence[Any]) -> str:
        """A list of messages, items or blocks."""
        return "[" + self._comma.join(self._items(v) for v in values) + "]"

    def _encode_item(self, value: Any) -> str:
        if type(value) is not dict:
            return self._dumps(value)
        content = value.get("content")
        if type(content) is list and all(type(k) is str for k in value):
            # A message of blocks (Anthropic, Responses): its list is new with each request,
            # its blocks are the memo's.
            fields = []
            for k, v in value.items():
                text = self.items(v) if k == "content" else self._dumps(v)
                fields.append(f"{self._dumps(k)}{self._colon}{text}")
            return "{" + self._comma.join(fields) + "}"
        return self._dumps(value)
