"""Hash rules (SSOT §2.4), written so that any other implementation can be checked against them.

Every hash is SHA-256 over UTF-8 bytes, as lowercase hex. Structured inputs go through
:func:`stable_stringify`, which yields exactly what JavaScript's ``JSON.stringify`` yields for the
same value once every object's keys are sorted; a TypeScript client therefore computes the same ids
and hashes as this module. ``docs/specification.md`` states the rules in prose and
``tests/golden/hash_vectors.json`` pins them with vectors checked against Node.js.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from typing import Final

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

# Characters JSON.stringify escapes: '"', '\', C0 controls, and UTF-16 surrogates that are not
# part of a pair. A Python str holds code points, so an astral character is one code point and
# never matches; a surrogate code point is lone unless a high one is directly followed by a low one.
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f\ud800-\udfff]')
_SURROGATE_PAIR = re.compile(r"[\ud800-\udbff][\udc00-\udfff]")
_SHORT_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}


def _escape_char(match: re.Match[str]) -> str:
    ch = match.group()
    return _SHORT_ESCAPES.get(ch) or f"\\u{ord(ch):04x}"


def _join_pair(match: re.Match[str]) -> str:
    high, low = (ord(c) for c in match.group())
    return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))


def _string(value: str) -> str:
    if _NEEDS_ESCAPE.search(value) is None:
        return f'"{value}"'
    # Two surrogate code points in a row are one astral character to JavaScript: join them
    # first so that only truly lone surrogates are escaped.
    value = _SURROGATE_PAIR.sub(_join_pair, value)
    return '"' + _NEEDS_ESCAPE.sub(_escape_char, value) + '"'


def _float(value: float) -> str:
    """ECMAScript ``Number::toString`` for a finite double (non-finite values are ``null``)."""
    if not math.isfinite(value):
        return "null"
    if value == 0:
        return "0"  # also -0
    if value < 0:
        return "-" + _float(-value)
    # repr gives the shortest digit string that round-trips, as ECMAScript requires.
    mantissa, _, exp_text = repr(value).partition("e")
    int_part, _, frac_part = mantissa.partition(".")
    digits = int_part + frac_part
    n = len(int_part) + (int(exp_text) if exp_text else 0)
    stripped = digits.lstrip("0")
    n -= len(digits) - len(stripped)
    digits = stripped.rstrip("0")
    k = len(digits)
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return "0." + "0" * (-n) + digits
    exponent = n - 1
    sign = "+" if exponent >= 0 else "-"
    head = digits[0] if k == 1 else digits[0] + "." + digits[1:]
    return f"{head}e{sign}{abs(exponent)}"


def _int(value: int) -> str:
    if -_MAX_SAFE <= value <= _MAX_SAFE:
        return str(value)
    as_float = float(value)
    if as_float != value:
        raise ValueError(
            f"integer {value} is not exactly representable as a JavaScript number; "
            "hashes would differ between implementations"
        )
    return _float(as_float)


def _utf16_key(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def _stringify(value: object, in_array: bool) -> str | None:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, int):
        return _int(value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, Absent):
        return "null" if in_array else None
    if isinstance(value, Mapping):
        parts = []
        for key in sorted(value, key=_check_key_then_utf16):
            text = _stringify(value[key], in_array=False)
            if text is not None:
                parts.append(_string(key) + ":" + text)
        return "{" + ",".join(parts) + "}"
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        return "[" + ",".join(_stringify(item, in_array=True) or "null" for item in value) + "]"
    raise TypeError(
        f"stable_stringify cannot serialise a {type(value).__name__}: use dicts, lists, strings, "
        "numbers, booleans and None"
    )


def _check_key_then_utf16(key: object) -> bytes:
    if not isinstance(key, str):
        raise TypeError(f"object keys must be strings, got {type(key).__name__} {key!r}")
    return _utf16_key(key)


def stable_stringify(value: object) -> str:
    """Return ``JSON.stringify(value)`` with every object's keys sorted by UTF-16 code units.

    No whitespace; non-ASCII characters are written raw; ``"``, ``\\``, control characters and lone
    surrogates are escaped as ``JSON.stringify`` escapes them; numbers are formatted as ECMAScript
    formats them (``2.0`` gives ``2``, ``1e21`` gives ``1e+21``, ``-0`` gives ``0``); ``None`` is
    ``null``; :data:`ABSENT` values are left out of objects. A top-level :data:`ABSENT` is an error
    (``JSON.stringify(undefined)`` is not a string).
    """
    text = _stringify(value, in_array=False)
    if text is None:
        raise TypeError("stable_stringify of ABSENT has no text (JSON.stringify(undefined))")
    return text


def _utf8(text: str) -> bytes:
    """UTF-8 bytes of ``text`` as JavaScript's ``TextEncoder`` (and Node's ``Buffer``) produce
    them: a surrogate pair is one character and a lone surrogate becomes U+FFFD."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        joined = _SURROGATE_PAIR.sub(_join_pair, text)
        return re.sub(r"[\ud800-\udfff]", "\ufffd", joined).encode("utf-8")


def sha256_hex(text: str) -> str:
    """SHA-256 of the UTF-8 bytes of ``text``, as lowercase hex."""
    return hashlib.sha256(_utf8(text)).hexdigest()


def identity_hash(
    type: str,  # noqa: A002 - the SSOT's own name for the field
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


def content_hash(content: str | None) -> str | None:
    """SHA-256 of the stored ``content``; ``None`` when content is null."""
    if content is None:
        return None
    return hashlib.sha256(_utf8(content)).hexdigest()


def metadata_hash(fields: Mapping[str, object]) -> str:
    """SHA-256 of the stable serialisation of an object's type-specific fields (§2.6)."""
    return sha256_hex(stable_stringify(fields))


def object_hash(
    file_hash: str | None | Absent,
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
