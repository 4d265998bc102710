"""JSON text read back by the stores (selfctx.adapters.jsontext): every value as the standard
library reads it, whichever decoder read it (decision 0084)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from selfctx.adapters.jsontext import loads
from selfctx.adapters.memory import MemoryStore

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**63 - 2, max_value=2**70)
    | st.integers(min_value=-(2**70), max_value=-(2**63) + 2)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()  # lone surrogates included
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def _same(a: Any, b: Any) -> bool:
    """Equal, NaN included, and of the same types (1 is not 1.0 here)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


@given(_VALUES, st.booleans())
def test_every_value_reads_as_the_standard_library_reads_it(value: Any, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    expected = json.loads(text)
    assert _same(loads(text), expected)
    assert _same(loads(text.encode("utf-8", "surrogatepass")), expected)


def test_what_the_fast_decoder_refuses_or_misreads() -> None:
    assert math.isnan(loads('{"n": NaN}')["n"])
    assert loads('{"i": -Infinity}') == {"i": -math.inf}
    assert loads('{"big": 1' + "0" * 30 + "}") == {"big": 10**30}
    assert loads('["a\\ud800b"]') == ["a\ud800b"]
    lone = "a\ud800b"  # the character itself in the text, as the memory store keeps it
    assert loads(f'["{lone}"]') == [lone]


def test_the_memory_store_gives_back_integers_beyond_64_bits() -> None:
    store = MemoryStore()
    doc = {"xt/id": "n", "type": "t", "big": 2**70, "small": -(2**64) - 1, "f": 2.0**70}
    store.commit([doc])
    read = store.get("n")
    assert read == doc and isinstance(read["big"], int) and isinstance(read["f"], float)
    assert [v.document for v in store.history("n")] == [doc]


@given(
    st.integers(min_value=10**18, max_value=2**80) | st.integers(max_value=-(10**18)),
    st.sampled_from([None, 0, 2, "\t"]),
)
def test_a_long_integer_is_read_exactly_however_the_text_is_laid_out(
    number: int, indent: int | str | None
) -> None:
    value = {"a": [number, {"b": number}], "c": number}
    for text in (json.dumps(value, indent=indent), json.dumps(number), json.dumps([number])):
        assert _same(loads(text), json.loads(text))
        assert _same(loads(text.encode()), json.loads(text))


def test_digits_in_strings_alone_leave_the_parsed_value_unwalked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Hashes' hex holds runs of 19 digits and more; inside a string they do not end as a
    number does, so the parsed value is taken as orjson read it, without the walk."""
    from selfctx.adapters import jsontext

    walks: list[object] = []
    walk = jsontext._large_float

    def counted(value: object) -> bool:
        walks.append(value)
        return walk(value)

    monkeypatch.setattr(jsontext, "_large_float", counted)
    hexes = ["12345678901234567890123abc", "a" + "9" * 40, "x1234567890123456789012345"]
    assert loads(json.dumps({"h": hexes, "n": 12345678901234567})) == {
        "h": hexes,
        "n": 12345678901234567,
    }
    assert walks == []
    assert loads('{"s": "1234567890123456789012 in a sentence"}') == {
        "s": "1234567890123456789012 in a sentence"
    }
    assert len(walks) == 1  # digits that end as a number ends: walked, read as orjson read it
    assert loads("[12345678901234567890123]") == [12345678901234567890123] and len(walks) == 2


def test_a_long_text_of_few_values_is_walked_without_the_look(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A harness's list of long messages: walking its few values costs a few hundredths of
    looking at every byte for long numbers, so the value is walked instead (decision 0103);
    a text of many values is looked at first, as before. Long integers read exactly either way."""
    from selfctx.adapters import jsontext

    looks: list[int] = []
    look = jsontext._long_number

    def counted(raw: bytes | str) -> bool:
        looks.append(len(raw))
        return look(raw)

    monkeypatch.setattr(jsontext, "_long_number", counted)
    prose = "the tests pass now; " * 1000  # 20,000 bytes, no comma
    sparse = [{"role": "tool", "content": prose + str(k)} for k in range(40)]
    for number in (7, 2**70, -(2**66)):
        text = json.dumps([*sparse, {"n": number}])
        assert _same(loads(text), json.loads(text)) and _same(
            loads(text.encode()), json.loads(text)
        )
    assert looks == []
    dense = [{"h": f"{k:064x}", "n": k, "seq": [k, k + 1]} for k in range(2000)]
    text = json.dumps([*dense, {"n": 2**70}])
    assert _same(loads(text), json.loads(text))
    assert looks == [len(text)]
