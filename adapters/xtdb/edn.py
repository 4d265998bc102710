"""Just enough EDN to send Datalog query arguments to XTDB.

XTDB 1.x reads query bodies only as EDN (or transit), never JSON. The queries themselves are
constant EDN text in :mod:`selfctx.adapters.xtdb.store`; values reach them only through
``:in-args``, written by :func:`dumps`, so no value is ever spliced into query text.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

_INT64 = range(-(2**63), 2**63)


def dumps(value: Any) -> str:
    """The EDN literal of a JSON-like Python value.

    Strings use JSON's escapes (a JSON string literal is a valid EDN one, ``\\uXXXX`` included);
    map keys become keywords, as XTDB made them when it read the documents as JSON.
    """
    if value is None:
        return "nil"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        if value not in _INT64:
            raise ValueError(f"integer {value} does not fit in 64 bits")
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value} has no EDN literal")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, Mapping):
        return "{" + " ".join(f":{_keyword(k)} {dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, Sequence):
        return "[" + " ".join(dumps(v) for v in value) + "]"
    raise TypeError(f"no EDN literal for {type(value).__name__}")


def keyword(key: str) -> str:
    """``key`` as an EDN keyword literal (``:name``); raises ValueError if it cannot be one."""
    return ":" + _keyword(key)


def _keyword(key: object) -> str:
    text = str(key)
    # A keyword literal cannot hold whitespace, brackets, quotes or commas.
    if not text or any(c.isspace() or c in '()[]{}"\\,;@^`~' for c in text):
        raise ValueError(f"{text!r} cannot be written as an EDN keyword")
    return text
