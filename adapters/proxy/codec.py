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
from typing import Any

import orjson

from selfctx.adapters.harness.request import Pieces
from selfctx.adapters.jsontext import loads

__all__ = ["dumps", "dumps_with", "loads"]


def dumps(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON."""
    try:
        return orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError):
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        return text.encode("utf-8", "surrogatepass")


def dumps_with(value: dict[str, Any], key: str, pieces: Pieces | None) -> bytes:
    """``dumps(value)``, byte for byte, the items of its list ``value[key]`` that ``pieces``
    holds (the very values, at their positions: ``RequestCache(pieces=True)`` keeps them)
    not encoded again, each run of them copied as one piece of JSON. A managed request of a
    long session is mostly items sent before, unchanged (decisions 0095, 0135)."""
    listed = value.get(key)
    if pieces and isinstance(listed, list):
        try:
            return orjson.dumps({**value, key: pieces.listed(listed)})
        except (TypeError, orjson.JSONEncodeError):
            pass  # as the whole body would: the standard library's, below
    return dumps(value)
