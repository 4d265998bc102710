"""JSON in, read by orjson wherever it reads exactly what the standard library reads.

A harness that resends its whole list sends most of a megabyte of JSON a turn in a long session;
the standard library's decoder takes about 1.8 ms for 1.1 MB where orjson takes 0.7 (decision
0085). orjson refuses a few things the standard library takes (``NaN`` and ``Infinity``, lone
surrogates such as ``"\\ud800"``, a number beyond a double, nesting past 1,024 levels): for
those the standard library reads the text, errors included. And it reads an integer beyond 64
bits (from 19 digits on) as a float, silently: a float of that size in what it read means the
standard library reads the text again, so such an integer keeps every digit. A float that large
is rare in a conversation, and a walk over the values costs about a tenth of the parse.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = ["loads"]

_LOW = -(2.0**63)
_HIGH = 2.0**64
"""orjson reads an integer in (-2**63, 2**64) as an integer, and a larger one as a float."""


def loads(text: str | bytes) -> Any:
    """The value of a JSON text, the very value ``json.loads`` gives (raises ``ValueError``, or
    ``RecursionError`` when it is nested beyond what the standard library's decoder takes)."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)
    if _large_float(value):  # an integer orjson may have read as a float
        return json.loads(text)
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
