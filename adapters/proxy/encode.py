"""The managed request as bytes, reusing the JSON of what the previous request of the session sent.

A managed conversation of a long session is mostly the messages of the previous request: the
render memo (``RenderMemo``) hands back the very same message objects while they do not change,
and never changes them in place. Encoding them again is most of what a request costs once the
conversation is long (about 6 ms of 1,000 tool calls' JSON here), so a :class:`BodyEncoder` keeps
each item's JSON text by the object's identity from one request to the next, holding the object
so that its identity cannot be reused, and keeping only what the last request used.

The text is exactly ``json.dumps(body, ensure_ascii=False)`` (the tests hold it to that): the
same separators, the same escapes, the same key order.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

__all__ = ["CONVERSATION_KEYS", "BodyEncoder"]

CONVERSATION_KEYS: Final = ("messages", "input", "system")
"""The fields of a request body that hold the conversation (Chat Completions and Anthropic
``messages``, Responses ``input``, Anthropic ``system`` blocks)."""


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


class BodyEncoder:
    """Encodes one session's managed requests, one after another (not thread-safe: a session's
    requests are served in turn)."""

    def __init__(self) -> None:
        self._kept: dict[int, tuple[Any, str]] = {}
        self._used: dict[int, tuple[Any, str]] = {}

    def encode(self, body: Mapping[str, Any]) -> bytes:
        """``body`` as UTF-8 JSON (lone surrogates kept, as the client sent them)."""
        parts = []
        for key, value in body.items():
            if key in CONVERSATION_KEYS and type(value) is list:
                text = "[" + ", ".join(self._item(v) for v in value) + "]"
            else:
                text = _dumps(value)
            parts.append(f"{_dumps(key)}: {text}")
        self._kept, self._used = self._used, {}
        return ("{" + ", ".join(parts) + "}").encode("utf-8", "surrogatepass")

    def _item(self, value: Any) -> str:
        """A message, item or block: its JSON of the last request if it is the same object."""
        if type(value) is not dict:
            return _dumps(value)
        hit = self._kept.get(id(value))
        if hit is None or hit[0] is not value:
            content = value.get("content")
            if type(content) is list and all(type(k) is str for k in value):
                # A message of blocks (Anthropic, Responses): its list is new with each request,
                # its blocks are the memo's.
                hit = (value, self._object(value, "content", content))
            else:
                hit = (value, _dumps(value))
        self._used[id(value)] = hit
        return hit[1]

    def _object(self, value: Mapping[str, Any], key: str, items: Sequence[Any]) -> str:
        fields = []
        for k, v in value.items():
            text = "[" + ", ".join(self._item(i) for i in items) + "]" if k == key else _dumps(v)
            fields.append(f"{_dumps(k)}: {text}")
        return "{" + ", ".join(fields) + "}"
