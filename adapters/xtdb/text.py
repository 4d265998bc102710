"""Strings with surrogate code points, carried through XTDB unchanged (decision 0026).

A Python string can hold a surrogate code point on its own (JSON's ``"\\ud800"`` reads as one),
or a surrogate pair as two code points. XTDB keeps strings as UTF-8 (in documents, in index keys),
which has no form for either: Java writes ``?`` for a lone surrogate and joins a pair into one
character, so a message came back changed and a resume recorded it a second time (decision
0026). The in-memory store keeps every string as it is, and both stores must agree.

So every string the adapter sends (values, map keys, ids, query arguments) is written with each
surrogate code point, and each U+FDD0, as U+FDD0 followed by the code point's four lowercase hex
digits; every string it reads back is decoded again. U+FDD0 is a Unicode noncharacter, reserved
for uses such as this one, so text almost never holds it and nearly every string is sent as it is.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["ESCAPE", "ESCAPE_UTF8", "decode", "encode", "encode_str"]

ESCAPE = "\ufdd0"
"""The character that starts an escape."""

ESCAPE_UTF8 = ESCAPE.encode("utf-8")
"""How an escape looks in a JSON answer. Our node writes every character but controls, quotes,
U+2028/U+2029 and surrogates as UTF-8 (so does upstream's server, by default), so one search of an
answer's bytes tells whether it holds any escape."""

_TO_ESCAPE = re.compile("[\ud800-\udfff\ufdd0]")
_ESCAPED = re.compile("\ufdd0([0-9a-f]{4})")


def _escape(match: re.Match[str]) -> str:
    return f"{ESCAPE}{ord(match.group()):04x}"


def _unescape(match: re.Match[str]) -> str:
    return chr(int(match.group(1), 16))


def encode_str(text: str) -> str:
    """``text`` with every surrogate code point and every U+FDD0 escaped."""
    if text.isascii() or _TO_ESCAPE.search(text) is None:
        return text
    return _TO_ESCAPE.sub(_escape, text)


def _decode_str(text: str) -> str:
    return _ESCAPED.sub(_unescape, text) if ESCAPE in text else text


def encode(value: Any) -> Any:
    """A JSON-like value with every string in it (map keys too) encoded; the same object when
    nothing needed to change."""
    return _map(value, encode_str)


def decode(value: Any) -> Any:
    """The inverse of :func:`encode`."""
    return _map(value, _decode_str)


def _map(value: Any, fn: Any) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        changed = False
        out = {}
        for key, item in value.items():
            new_key = fn(key) if isinstance(key, str) else key
            new_item = _map(item, fn)
            changed = changed or new_key is not key or new_item is not item
            out[new_key] = new_item
        return out if changed else value
    if isinstance(value, list | tuple):
        items = [_map(item, fn) for item in value]
        if any(new is not old for new, old in zip(items, value, strict=True)):
            return items
        return value
    return value
