"""JSON text read back: orjson, with the standard library for what orjson refuses or reads
differently.

The stores hand documents back as JSON text: the in-memory store keeps each version as text, an
XTDB node answers in JSON. A page of the inspector reads a few megabytes of it (a session's
snapshot and chat, its request records, its tool outputs), which orjson decodes several times
faster than the standard library (decision 0084). It refuses a few things the standard library
takes: lone surrogates (``"\\ud800"``), ``NaN`` and ``Infinity``; and it reads integers beyond 64
bits (from 19 digits on) as floats. For those the standard library decodes the text, so every value
reads exactly as ``json.loads`` reads it: a value holding a float outside (-2**63, 2**64) is read
again (a walk over the parsed containers, about a tenth of the parse; decision 0085), which is
rare in a conversation. The JSON-RPC server reads its lines with it too.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = ["loads"]


_LOW = -(2.0**63)
_HIGH = 2.0**64
"""orjson reads an integer in (-2**63, 2**64) as an integer, and a larger one as a float."""


def loads(raw: bytes | str) -> Any:
    """The value of JSON text, as ``json.loads`` gives it (raises ``ValueError``, or
    ``RecursionError`` when it is nested beyond what the decoder takes)."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)
    if _large_float(value):  # an integer orjson may have read as a float
        return json.loads(raw)
    return value


def _large_float(value: Any) -> bool:
    """Whether ``value`` holds a float outside (-2**63, 2**64)."""
    stack = [value]
    pop, push = stack.pop, stack.extend
    while stack:
        item = pop()
        kind = type(item)
        if kind is dict:
            push(item.values())
        elif kind is list:
            push(item)
        elif kind is float and not _LOW < item < _HIGH:
            return True
    return False
