"""JSON in and out of the proxy: orjson, with the standard library for what orjson refuses.

A request of a long session is most of a megabyte of JSON, decoded once and encoded again (the
managed request) on every model call. orjson does both several times faster than the standard
library (decision 0058 has the figures); it refuses a few things the standard library takes,
which a client may send: lone surrogates (``"\\ud800"``), the standard library's extensions
``NaN`` and ``Infinity``, integers beyond 64 bits. For those, the standard library is used, so any
body the proxy took before it takes still, and reads the same.

The managed request is compact JSON (no spaces after separators), UTF-8, lone surrogates and large
integers kept as the client sent them; ``NaN`` and ``Infinity``, which JSON has not, are written
as ``null``.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import orjson

__all__ = ["ListEncoder", "dumps", "loads"]


_DIGITS = bytes(48 if 48 <= b <= 57 else 32 for b in range(256))
_LONG_NUMBER = b"0" * 20
"""20 digits in a row: an integer there may be beyond 64 bits, which orjson reads as a float."""


def loads(raw: bytes) -> Any:
    """The value of a JSON body (raises ``ValueError``, or ``RecursionError`` when it is nested
    beyond what the decoder takes)."""
    if _LONG_NUMBER in raw.translate(_DIGITS):
        return json.loads(raw)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


def dumps(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON."""
    try:
        return orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError):
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        return text.encode("utf-8", "surrogatepass")


class ListEncoder:
    """:func:`dumps` for the successive bodies of one conversation, whose long list (``key``)
    mostly holds the very item objects of the body before: the items are encoded one by one and
    an item that is the same object as one of the last body's is not encoded again, so that a
    body costs what changed in it, not its length. The items must not be changed in place
    between two bodies (the managed requests' renderings never are). The bytes are always
    those of ``dumps(value)``: compact JSON joins a list's items with commas, and anything
    orjson refuses is encoded whole by :func:`dumps`. Not thread-safe: one conversation's
    bodies are encoded in turn."""

    _MARK = f"selfctx-list-{uuid.uuid4().hex}"
    _MARK_BYTES = orjson.dumps(_MARK)

    def __init__(self) -> None:
        self._items: list[Any] = []
        """The last body's items: held, so that no other object can take the id of one."""
        self._encoded: dict[int, bytes] = {}
        """Each of those items' bytes, by its id."""

    def dumps(self, value: dict[str, Any], key: str) -> bytes:
        """``dumps(value)``."""
        items = value.get(key)
        if not isinstance(items, list):
            return dumps(value)
        known = self._encoded.get
        encode = orjson.dumps
        try:
            parts = [known(id(item)) or encode(item) for item in items]
            rest = orjson.dumps({**value, key: self._MARK})
        except (TypeError, orjson.JSONEncodeError):
            self._items, self._encoded = [], {}
            return dumps(value)
        if rest.count(self._MARK_BYTES) != 1:  # the mark's text in the body itself
            return dumps(value)
        self._items, self._encoded = list(items), dict(zip(map(id, items), parts, strict=True))
        return rest.replace(self._MARK_BYTES, b"[" + b",".join(parts) + b"]", 1)
