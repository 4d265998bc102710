"""JSON text read back: orjson, with the standard library for what orjson refuses or reads
differently.

The stores hand documents back as JSON text: the in-memory store keeps each version as text, an
XTDB node answers in JSON. A page of the inspector reads a few megabytes of it (a session's
snapshot and chat, its request records, its tool outputs), which orjson decodes several times
faster than the standard library (decision 0084). It refuses a few things the standard library
takes: lone surrogates (``"\\ud800"``), ``NaN`` and ``Infinity``; and it reads integers beyond 64
bits as floats. For those the standard library decodes the text, so every value reads exactly as
``json.loads`` reads it.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = ["loads"]


_DIGITS = bytes(48 if 48 <= b <= 57 else 32 for b in range(256))
_LONG_NUMBER = b"0" * 20
"""20 digits in a row: an integer there may be beyond 64 bits, which orjson reads as a float."""


def loads(raw: bytes | str) -> Any:
    """The value of JSON text, as ``json.loads`` gives it (raises ``ValueError``, or
    ``RecursionError`` when it is nested beyond what the decoder takes)."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if _LONG_NUMBER in data.translate(_DIGITS):
        return json.loads(raw)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(raw)
