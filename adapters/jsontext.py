"""JSON text read back: orjson, with the standard library for what orjson refuses or reads
differently.

The stores hand documents back as JSON text: the in-memory store keeps each version as text, an
XTDB node answers in JSON. A page of the inspector reads a few megabytes of it (a session's
snapshot and chat, its request records, its tool outputs), which orjson decodes several times
faster than the standard library (decision 0084). It refuses a few things the standard library
takes: lone surrogates (``"\\ud800"``), ``NaN`` and ``Infinity``; and it reads integers beyond 64
bits (from 19 digits on) as floats. For those the standard library decodes the text, so every value
reads exactly as ``json.loads`` reads it: a value holding a float outside (-2**63, 2**64) is read
again (a walk over the parsed containers, about as long as the parse; decision 0085), which is
rare in a conversation. The walk is made only where the text holds a run of 19 or more digits
that ends as a number ends (before a comma, a closing bracket or brace, white space or the end
of the text): a look over the bytes at C speed, about a tenth of the walk, that the hashes'
hex in every stored body does not set off (decision 0097). That look costs about 2.5 ms a
megabyte whatever the text holds, while the walk costs what the text holds of values: on a long
text of few values (a harness's list of long messages: thousands of bytes a comma) the walk is
a few hundredths of the look, so there the value is walked without it. Which is cheaper is told
from a few windows of the text (the commas in them), at a cost that does not grow with the text;
either way every long integer is read exactly (decision 0103). The JSON-RPC server reads its
lines with it too.
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
    if (_sparse(raw) or _long_number(raw)) and _large_float(value):  # an integer read as a float
        return json.loads(raw)
    return value


def _classes() -> bytes:
    table = bytearray(b"x" * 256)
    for byte in b"0123456789":
        table[byte] = ord("0")
    for byte in b",]} \t\n\r":
        table[byte] = ord(".")
    return bytes(table)


_CLASSES = _classes()
"""Each byte as its class: ``0`` a digit, ``.`` what may follow a number, ``x`` anything else."""
_LONG_NUMBER_END = b"0" * 19 + b"."
"""The end of a number of 19 digits or more (``_LOW``/``_HIGH``: fewer are read exactly)."""


def _long_number(raw: bytes | str) -> bool:
    """Whether ``raw`` may hold an integer of 19 digits or more: a run of that many digits
    followed by what may follow a number (or ending the text). Digits inside strings may
    match too (then the parsed value is walked); no such integer goes unseen."""
    text = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    classes = text.translate(_CLASSES)  # one copy: the end is looked at apart
    return classes.find(_LONG_NUMBER_END) >= 0 or classes.endswith(_LONG_NUMBER_END[:-1])


_SPARSE = 1024
"""Bytes a comma above which a value is walked without the look for long numbers. The look
costs about 1 ns a byte; the walk 80 to 250 ns a comma (the most when each comma starts a
container), so it costs less from about 300 bytes a comma on: at 1,024 a quarter of the look
at most (decision 0103)."""
_WINDOW = 4096
_WINDOWS = 8
"""The windows of the text whose commas tell how sparse it is; a shorter text is looked at."""


def _sparse(raw: bytes | str) -> bool:
    """Whether ``raw`` holds fewer than one comma in ``_SPARSE`` bytes in ``_WINDOWS`` windows
    of ``_WINDOW`` spread over it (then walking its value costs less than looking at it)."""
    size = len(raw)
    if size < _WINDOW * _WINDOWS * 2:
        return False
    comma: Any = b"," if isinstance(raw, bytes) else ","
    step = (size - _WINDOW) // (_WINDOWS - 1)
    commas = sum(raw.count(comma, k * step, k * step + _WINDOW) for k in range(_WINDOWS))
    return commas * _SPARSE < _WINDOW * _WINDOWS


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
