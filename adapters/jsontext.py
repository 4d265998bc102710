"""JSON text read back: orjson, with the standard library for what orjson refuses or reads
differently.

The stores hand documents back as JSON text: the in-memory store keeps each version as text, an
XTDB node answers in JSON. A page of the inspector reads a few megabytes of it (a session's
snapshot and chat, its request records, its tool outputs), which orjson decodes several times
faster than the standard library (decision 0084). It refuses a few things the standard library
takes: lone surrogates (``"\\ud800"``), ``NaN`` and ``Infinity``; and it reads integers beyond 64
bits (from 19 digits on) as floats. For those the standard library decodes the text, so every value
reads exactly as ``json.loads`` reads it: a value holding a float outside (-2**63, 2**64) is read
again (a walk over the parsed containers, only when the text holds a run of 19 digits; decisions
0085, 0094), which is rare in a conversation. The JSON-RPC server reads its lines with it too.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

__all__ = ["loads"]


_LOW = -(2.0**63)
_HIGH = 2.0**64
"""orjson reads an integer in (-2**63, 2**64) as an integer, and a larger one as a float."""

_LONG_BYTES = re.compile(rb"[0-9]{19}")
_LONG_TEXT = re.compile(r"[0-9]{19}")
"""A run of 19 digits in the text (bytes, str). Without one every integer literal has at most
18 digits, inside the range orjson reads exactly, and the walk over the parsed value (about as
long as the parse) is skipped: the text is searched in C at a fifth of the walk's cost."""


def loads(raw: bytes | str) -> Any:
    """The value of JSON text, as ``json.loads`` gives it (raises ``ValueError``, or
    ``RecursionError`` when it is nested beyond what the decoder takes)."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)
    found = _LONG_TEXT.search(raw) if isinstance(raw, str) else _LONG_BYTES.search(raw)
    if found is None:
        return value  # no integer literal of 19 digits or more: orjson read every number exactly
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
