"""Hash rules (docs/hashing.md), written so that any other implementation can be checked against
them.

Every hash is SHA-256 over UTF-8 bytes, as lowercase hex. Structured inputs go through
:func:`stable_stringify`, which yields exactly what JavaScript's ``JSON.stringify`` yields for the
same value once every object's keys are sorted; a TypeScript client therefore computes the same ids
and hashes as this module. ``docs/hashing.md`` states the rules in prose and
``tests/golden/hash_vectors.json`` pins them with vectors computed by Node.js.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from json.encoder import encode_basestring
from typing import Any, Final

from selfctx.domain.errors import InvalidInput

__all__ = [
    "ABSENT",
    "Absent",
    "char_count",
    "content_hash",
    "file_hash",
    "identity_hash",
    "metadata_hash",
    "object_hash",
    "sha256_hex",
    "stable_stringify",
    "stat_file_hash",
    "text_bytes",
]


class Absent:
    """JavaScript's ``undefined``: a key whose value is absent is left out of its object
    (and, like ``undefined``, is written as ``null`` inside an array)."""

    _instance: Absent | None = None

    def __new__(cls) -> Absent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False


ABSENT: Final = Absent()

_MAX_SAFE = 2**53
# Beyond this many bits an int has too many digits for repr() (sys.int_info.default_max_str_digits)
_PRINTABLE_INT_BITS = 10_000
_NOT_A_DOUBLE = "not exactly a JavaScript number (an IEEE 754 double), so hashes would differ"

_SURROGATE = re.compile(r"[\ud800-\udfff]")
_SURROGATE_PAIR = re.compile(r"[\ud800-\udbff][\udc00-\udfff]")


def _join_pair(match: re.Match[str]) -> str:
    high, low = (ord(c) for c in match.group())
    return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))


def _escape_lone(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def _string(value: str) -> str:
    # json's encode_basestring escapes '"', '\' and C0 controls exactly as JSON.stringify does
    # (short forms, else \u00xx in lowercase) and leaves all else raw. It does not know about
    # UTF-16, so strings holding surrogate code points take the slow path below.
    if value.isascii() or _SURROGATE.search(value) is None:
        return encode_basestring(value)
    # Two surrogate code points in a row are one astral character to JavaScript: join them first
    # so that only truly lone surrogates are escaped, as \udxxx.
    joined = _SURROGATE_PAIR.sub(_join_pair, value)
    return _SURROGATE.sub(_escape_lone, encode_basestring(joined))


def _float(value: float) -> str:
    """ECMAScript ``Number::toString`` for a double; non-finite values are ``null``."""
    if value == 0:
        return "0"  # also -0
    # repr gives the shortest digit string that round-trips, as ECMAScript requires; only the
    # layout differs.
    text = float.__repr__(value)
    if "e" not in text:
        if text[-1] == "0" and text[-2] == ".":
            return text[:-2]
        if text[-1] in "fn":  # inf, -inf, nan
            return "null"
        return text  # positional in both languages here (1e-4 <= |value| < 1e16)
    if value < 0:
        return "-" + _float(-value)
    mantissa, _, exp_text = text.partition("e")
    digits = mantissa.replace(".", "")  # one non-zero digit before the point
    k = len(digits)
    n = int(exp_text) + 1  # the decimal point sits after n digits
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return "0." + "0" * (-n) + digits
    exponent = n - 1
    head = digits if k == 1 else digits[0] + "." + digits[1:]
    return f"{head}e{'+' if exponent >= 0 else '-'}{abs(exponent)}"


def _int(value: int) -> str:
    if -_MAX_SAFE <= value <= _MAX_SAFE:
        return int.__repr__(value)
    try:
        as_float = float(value)
    except OverflowError:
        as_float = math.inf
    if as_float != value:  # Python compares int and float exactly
        if value.bit_length() > _PRINTABLE_INT_BITS:
            digits = math.floor(math.log10(abs(value))) + 1
            raise InvalidInput("JSON number", f"<integer of {digits} digits>", _NOT_A_DOUBLE)
        written = "" if as_float == math.inf else f"; JavaScript would write {_float(as_float)}"
        raise InvalidInput("JSON number", value, _NOT_A_DOUBLE + written)
    return _float(as_float)


def _null(_: object) -> str:
    return "null"


def _bool(value: bool) -> str:
    return "true" if value else "false"


_STRINGS = {str}


def _array(value: Sequence[object]) -> str:
    if value and set(map(type, value)) == _STRINGS and "".join(value).isascii():  # type: ignore[arg-type]
        # ASCII strings only (a session's ids): written in C, as _string writes each
        return "[" + ",".join(map(encode_basestring, value)) + "]"  # type: ignore[arg-type]
    return "[" + ",".join([_value(item) for item in value]) + "]"


def _object(value: Mapping[Any, object]) -> str:
    for key in value:
        if type(key) is not str or not key.isascii():
            return _object_by_utf16(value)
    # For ASCII keys, code point order is UTF-16 code unit order.
    parts = []
    for key in sorted(value):
        item = value[key]
        if item is not ABSENT:
            parts.append(_string(key) + ":" + _value(item))
    return "{" + ",".join(parts) + "}"


def _object_by_utf16(value: Mapping[Any, object]) -> str:
    """Keys sorted by UTF-16 code units, as JavaScript's ``sort`` orders strings: an astral
    character (a surrogate pair, 0xD800-0xDBFF first) sorts before U+E000-U+FFFF, unlike code
    point order."""
    by_units: dict[bytes, tuple[str, object]] = {}
    for key in value:
        if not isinstance(key, str):
            raise TypeError(f"object keys must be strings, got {_show(key)} ({type(key).__name__})")
        text = str.__str__(key)
        units = text.encode("utf-16-be", "surrogatepass")
        if units in by_units:
            raise InvalidInput(
                "object key", key, f"JavaScript reads it as the same key as {by_units[units][0]!r}"
            )
        by_units[units] = (text, value[key])
    parts = [
        _string(text) + ":" + _value(item)
        for text, item in (by_units[units] for units in sorted(by_units))
        if item is not ABSENT
    ]
    return "{" + ",".join(parts) + "}"


_WRITERS: Final[dict[type, Callable[[Any], str]]] = {
    str: _string,
    dict: _object,
    int: _int,
    float: _float,
    list: _array,
    tuple: _array,
    type(None): _null,
    bool: _bool,
}


def _value(value: object) -> str:
    """The text of ``value`` where JSON.stringify writes undefined as null (arrays)."""
    writer = _WRITERS.get(type(value))
    if writer is not None:
        return writer(value)
    if value is ABSENT:
        return "null"
    # Subclasses (str-based enums, IntEnum, ...) are written as the plain value they hold, never
    # through their own __str__, __format__ or __repr__.
    if isinstance(value, str):
        return _string(str.__str__(value))
    if isinstance(value, int):
        return _int(int.__int__(value))
    if isinstance(value, float):
        return _float(float.__float__(value))
    if isinstance(value, Mapping):
        return _object(value)
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray | memoryview):
        return _array(value)
    raise TypeError(
        f"stable_stringify cannot serialise {_show(value)} ({type(value).__name__}): use dicts, "
        "lists, strings, numbers, booleans and None (sets as lists in first-encounter order)"
    )


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def stable_stringify(value: object) -> str:
    """Return ``JSON.stringify(value)`` with every object's keys sorted by UTF-16 code units.

    No whitespace; non-ASCII characters are written raw; ``"``, ``\\``, control characters and lone
    surrogates are escaped as ``JSON.stringify`` escapes them; numbers are formatted as ECMAScript
    formats them (``2.0`` gives ``2``, ``1e21`` gives ``1e+21``, ``-0`` gives ``0``, NaN and
    infinities give ``null``); ``None`` is ``null``; :data:`ABSENT` values are left out of objects
    and are ``null`` in arrays.

    Raises :class:`TypeError` for a top-level :data:`ABSENT` (``JSON.stringify(undefined)`` is
    not a string), a non-string key or a value of another type, and
    :class:`~selfctx.domain.errors.InvalidInput` for an int that is not exactly a double or for two
    keys that JavaScript would read as one.
    """
    if value is ABSENT:
        raise TypeError("stable_stringify(ABSENT) has no text, as JSON.stringify(undefined)")
    return _value(value)


def text_bytes(text: str) -> bytes:
    """UTF-8 bytes of ``text`` as JavaScript's ``TextEncoder`` (and Node's ``Buffer``) produce
    them: a surrogate pair is one character and a lone surrogate becomes U+FFFD. Every hash of
    text hashes these bytes: ``content_hash`` of content, and ``file_hash`` of text a harness
    handed over (decision 0029)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        joined = _SURROGATE_PAIR.sub(_join_pair, text)
        return _SURROGATE.sub("\ufffd", joined).encode("utf-8")


def sha256_hex(text: str) -> str:
    """SHA-256 of the UTF-8 bytes of ``text``, as lowercase hex."""
    return hashlib.sha256(text_bytes(text)).hexdigest()


def identity_hash(
    type: str,  # the design's own name for the field, though it shadows the builtin
    *,
    source: Mapping[str, object] | None = None,
    xt_id: str | None = None,
) -> str:
    """Identity of an object: ``SHA-256(stable_stringify({type, source}))`` for a sourced object,
    ``SHA-256(stable_stringify({type, "xt/id": xt_id}))`` for an unsourced one.

    Exactly one of ``source`` (the source binding's JSON form) and ``xt_id`` must be given.
    """
    if (source is None) == (xt_id is None):
        raise ValueError("identity_hash needs exactly one of source= and xt_id=")
    if source is not None:
        return sha256_hex(stable_stringify({"type": type, "source": source}))
    return sha256_hex(stable_stringify({"type": type, "xt/id": xt_id}))


def file_hash(raw: bytes) -> str:
    """SHA-256 of the raw bytes on disk (for a text file, the same as hashing its UTF-8 text)."""
    return hashlib.sha256(raw).hexdigest()


def stat_file_hash(size: int, mtime_ns: int) -> str:
    """``file_hash`` of a file over the size cap, which is never read (decision 0025):
    ``SHA-256(stable_stringify({"kind": "stat", "mtime_ns": "<decimal>", "size": size}))``. The
    nanoseconds are text: they are beyond what a JavaScript number holds exactly."""
    return sha256_hex(stable_stringify({"kind": "stat", "mtime_ns": str(mtime_ns), "size": size}))


def content_hash(content: str | None) -> str | None:
    """SHA-256 of the stored ``content``; ``None`` when content is null."""
    if content is None:
        return None
    return hashlib.sha256(text_bytes(content)).hexdigest()


def object_text(fields: Mapping[str, str]) -> str:
    """:func:`stable_stringify` of an object whose values are given as their own
    :func:`stable_stringify` text (so that a caller may reuse the text of parts it wrote
    before)."""
    order = sorted(fields, key=lambda key: key.encode("utf-16-be", "surrogatepass"))
    return "{" + ",".join([_string(key) + ":" + fields[key] for key in order]) + "}"


def metadata_hash(fields: Mapping[str, object]) -> str:
    """SHA-256 of the stable serialisation of an object's type-specific fields (§2.6)."""
    return sha256_hex(stable_stringify(fields))


def object_hash(
    file_hash: str | Absent | None,
    content_hash: str | None,
    metadata_hash: str,
) -> str:
    """Fingerprint of one version: ``SHA-256(stable_stringify({file_hash, content_hash,
    metadata_hash}))``. Pass :data:`ABSENT` as ``file_hash`` for an unsourced object, which has no
    such field; a discovery stub has the field, with value ``None``."""
    return sha256_hex(
        stable_stringify(
            {"file_hash": file_hash, "content_hash": content_hash, "metadata_hash": metadata_hash}
        )
    )


def char_count(content: str | None) -> int:
    """Length of ``content`` in UTF-16 code units (JavaScript's ``length``); 0 for null."""
    if content is None:
        return 0
    if content.isascii():
        return len(content)
    return len(content.encode("utf-16-le", "surrogatepass")) // 2
