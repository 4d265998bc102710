"""The JSON-RPC server's decoder gives the standard library's value for every text, errors
included (decision 0085): orjson reads what it reads the same, the standard library the rest."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from selfctx.adapters.jsontext import loads

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=20,
)


def _same(a: Any, b: Any) -> bool:
    """Equal values of equal types throughout (1 and 1.0 differ; -0.0 and 0.0 differ)."""
    return repr(a) == repr(b)


@given(_VALUES, st.booleans())
def test_every_value_reads_as_the_standard_library_reads_it(value: Any, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert _same(loads(text), json.loads(text))
    encoded = text.encode("utf-8", "surrogatepass")
    if not any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        assert _same(loads(encoded), json.loads(encoded))


@pytest.mark.parametrize(
    "text",
    [
        "-9223372036854775809",  # 19 digits below -2**63: orjson reads a float
        "-9223372036854775808",
        "9223372036854775808",
        "18446744073709551615",
        "18446744073709551616",  # 2**64
        '{"id": 123456789012345678901234567890, "x": [1e19, 2.5]}',
        "[1e19]",  # a float that large: read again, the same value
        "[NaN, Infinity, -Infinity]",
        "1e400",
        '"\\ud800"',
        '"a\ud800b"',  # a lone surrogate in the text itself, not escaped
        '{"a": 1, "a": 2}',
        "-0",
        "-0.0",
    ],
)
def test_what_orjson_reads_otherwise_is_read_by_the_standard_library(text: str) -> None:
    assert _same(loads(text), json.loads(text))


@pytest.mark.parametrize("text", ["", "[1,", "{'a': 1}", "[1] x", '"\x01"', "\ufeff[1]"])
def test_bad_text_raises_what_the_standard_library_raises(text: str) -> None:
    with pytest.raises(ValueError) as ours:
        loads(text)
    with pytest.raises(ValueError) as theirs:
        json.loads(text)
    assert type(ours.value) is type(theirs.value)
    assert str(ours.value) == str(theirs.value)


def test_nesting_past_orjsons_limit_is_the_standard_librarys_to_refuse() -> None:
    text = "[" * 5000 + "]" * 5000
    with pytest.raises(RecursionError):
        json.loads(text)
    with pytest.raises(RecursionError):
        loads(text)
    deep = "[" * 1100 + "]" * 1100  # past orjson's 1,024: whatever the standard library does
    try:
        expected: Any = json.loads(deep)
    except RecursionError:
        with pytest.raises(RecursionError):
            loads(deep)
    else:
        assert loads(deep) == expected
