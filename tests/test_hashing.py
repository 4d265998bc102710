"""The hash rules (docs/hashing.md) agree with JavaScript: golden vectors computed by Node.js, a
property test against a live Node.js process, and the errors for values JavaScript would hash
differently.

``tests/golden/make_hash_vectors.mjs`` generated ``tests/golden/hash_vectors.json`` once;
``tests/golden/oracle.mjs`` answers the property tests.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
import shutil
import subprocess
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from selfctx.domain import hashing
from selfctx.domain.errors import InvalidInput
from selfctx.domain.hashing import ABSENT, stable_stringify

GOLDEN = Path(__file__).parent / "golden"
TAGS = frozenset({"$absent", "$float", "$int"})


def _untag(obj: dict[str, Any]) -> Any:
    """Undo the input tags of make_hash_vectors.mjs (json object_hook)."""
    if len(obj) == 1:
        ((tag, payload),) = obj.items()
        if tag == "$absent":
            return ABSENT
        if tag == "$float":
            return float(payload)
        if tag == "$int":
            return int(payload)
    return obj


VECTORS: dict[str, Any] = json.loads(
    (GOLDEN / "hash_vectors.json").read_text(encoding="utf-8"), object_hook=_untag
)


def _cases(section: str) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("v", VECTORS[section], ids=[v["name"] for v in VECTORS[section]])


def test_public_names_are_pinned() -> None:
    # Other implementations are checked against these names (docs/hashing.md): renaming one
    # breaks them.
    assert sorted(hashing.__all__) == [
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


# --- golden vectors ------------------------------------------------------------------------------


def test_vectors_cover_every_section() -> None:
    sections = ["identity_hash", "content_hash", "file_hash", "metadata_hash", "object_hash"]
    assert all(len(VECTORS[name]) >= 3 for name in [*sections, "char_count"])
    assert len(VECTORS["stringify"]) >= 80


@_cases("stringify")
def test_stable_stringify_matches_javascript(v: dict[str, Any]) -> None:
    text = stable_stringify(v["input"])
    assert text == v["text"]
    assert hashing.sha256_hex(text) == v["sha256"]


@_cases("identity_hash")
def test_identity_hash_matches_javascript(v: dict[str, Any]) -> None:
    if "source" in v:
        assert hashing.identity_hash(v["type"], source=v["source"]) == v["sha256"]
    else:
        assert hashing.identity_hash(v["type"], xt_id=v["xt_id"]) == v["sha256"]
    assert hashing.sha256_hex(v["text"]) == v["sha256"]


@_cases("content_hash")
def test_content_hash_matches_javascript(v: dict[str, Any]) -> None:
    assert hashing.content_hash(v["content"]) == v["sha256"]


@_cases("file_hash")
def test_file_hash_matches_javascript(v: dict[str, Any]) -> None:
    assert hashing.file_hash(bytes.fromhex(v["hex"])) == v["sha256"]


@_cases("metadata_hash")
def test_metadata_hash_matches_javascript(v: dict[str, Any]) -> None:
    assert stable_stringify(v["fields"]) == v["text"]
    assert hashing.metadata_hash(v["fields"]) == v["sha256"]


@_cases("object_hash")
def test_object_hash_matches_javascript(v: dict[str, Any]) -> None:
    got = hashing.object_hash(v["file_hash"], v["content_hash"], v["metadata_hash"])
    assert got == v["sha256"]


@_cases("char_count")
def test_char_count_matches_javascript_length(v: dict[str, Any]) -> None:
    assert hashing.char_count(v["content"]) == v["count"]


# --- Python-side forms of the same values ---------------------------------------------------------


def test_surrogate_code_point_pair_is_the_astral_character() -> None:
    # JavaScript cannot tell "\ud83d\ude00" from "😀"; Python can, and must not.
    assert stable_stringify("\ud83d\ude00") == stable_stringify("😀") == '"😀"'
    assert stable_stringify({"\ud83d\ude00": 1, "\ue000": 2}) == '{"😀":1,"\ue000":2}'
    assert hashing.content_hash("a\ud83d\ude00") == hashing.content_hash("a😀")
    assert hashing.char_count("\ud83d\ude00") == hashing.char_count("😀") == 2


def test_ints_and_integral_floats_are_the_same_number() -> None:
    text = stable_stringify([2, 2.0, -0.0, 0, 10**20, 1e20, 10**21, 1e21])
    assert text == "[2,2,0,0,100000000000000000000,100000000000000000000,1e+21,1e+21]"


def test_tuples_and_other_mappings_serialise_like_lists_and_dicts() -> None:
    assert stable_stringify((1, ("a",))) == stable_stringify([1, ["a"]]) == '[1,["a"]]'
    assert stable_stringify(MappingProxyType({"b": 1, "a": 2})) == '{"a":2,"b":1}'


class _Colour(str, enum.Enum):  # noqa: UP042 - the very pattern that formats as "_Colour.RED"
    RED = "red"


class _Level(enum.IntEnum):
    HIGH = 3


class _LoudFloat(float):
    def __repr__(self) -> str:
        return "LOUD"


def test_subclasses_are_written_as_their_plain_value() -> None:
    # A (str, Enum) member formats as "_Colour.RED"; JavaScript only ever sees "red".
    value = {_Colour.RED: [_Colour.RED, _Level.HIGH, _LoudFloat(1.5), _LoudFloat(1e300)]}
    assert stable_stringify(value) == '{"red":["red",3,1.5,1e+300]}'


def test_file_hash_of_utf8_text_is_content_hash_of_the_text() -> None:
    text = "héllo 日本 😀\n"
    assert hashing.file_hash(text.encode("utf-8")) == hashing.content_hash(text)


def test_absent_and_null_file_hash_are_different_versions() -> None:
    meta = hashing.metadata_hash({})
    assert hashing.object_hash(ABSENT, None, meta) != hashing.object_hash(None, None, meta)


def test_absent_key_equals_missing_key() -> None:
    assert stable_stringify({"a": 1, "b": ABSENT}) == stable_stringify({"a": 1})


def test_content_hash_of_none_is_none() -> None:
    assert hashing.content_hash(None) is None
    assert hashing.char_count(None) == 0


# --- values JavaScript would serialise differently are refused --------------------------------


@pytest.mark.parametrize("key", [1, None, 1.5, ("a",), b"k"], ids=repr)
def test_non_string_keys_are_refused(key: object) -> None:
    with pytest.raises(TypeError) as info:
        stable_stringify({"a": 1, key: 2})
    assert type(info.value) is TypeError
    assert repr(key) in str(info.value)


@pytest.mark.parametrize(
    "value",
    [
        b"raw",
        bytearray(b"raw"),
        memoryview(b"raw"),
        {"a", "b"},
        frozenset({1}),
        object(),
        Decimal("1.5"),
        1j,
    ],
    ids=lambda v: type(v).__name__,
)
def test_unsupported_types_are_refused(value: object) -> None:
    with pytest.raises(TypeError) as info:
        stable_stringify({"nested": [value]})
    assert type(info.value) is TypeError
    assert repr(value) in str(info.value)


@pytest.mark.parametrize(
    "value", [2**53 + 1, -(2**53) - 1, 2**64 + 1, 10**21 + 1, 3**400], ids=lambda v: f"{v:.3g}"
)
def test_ints_that_are_not_doubles_are_refused(value: int) -> None:
    with pytest.raises(InvalidInput) as info:
        stable_stringify({"n": value})
    assert type(info.value) is InvalidInput
    assert str(value) in str(info.value)


def test_huge_ints_are_refused_without_printing_all_their_digits() -> None:
    value = 10**5000  # more digits than int -> str allows by default
    with pytest.raises(InvalidInput) as info:
        stable_stringify([value])
    assert type(info.value) is InvalidInput
    assert "5001 digits" in str(info.value)


def test_top_level_absent_is_refused() -> None:
    with pytest.raises(TypeError) as info:
        stable_stringify(ABSENT)
    assert type(info.value) is TypeError
    assert "ABSENT" in str(info.value)


def test_keys_that_are_one_key_in_javascript_are_refused() -> None:
    with pytest.raises(InvalidInput) as info:
        stable_stringify({"😀": 1, "\ud83d\ude00": 2})
    assert type(info.value) is InvalidInput
    assert "'😀'" in str(info.value)


@pytest.mark.parametrize("kwargs", [{}, {"source": {"type": "x"}, "xt_id": "id"}], ids=str)
def test_identity_hash_needs_exactly_one_of_source_and_id(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="exactly one of source= and xt_id="):
        hashing.identity_hash("file", **kwargs)


# --- property tests against a live Node.js ---------------------------------------------------


class NodeOracle:
    """One ``node tests/golden/oracle.mjs`` process, asked one JSON line per Hypothesis example."""

    def __init__(self, node: str) -> None:
        self._proc = subprocess.Popen(
            [node, str(GOLDEN / "oracle.mjs")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )

    def ask(self, op: str, values: list[Any]) -> list[dict[str, Any]]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        # ensure_ascii keeps lone surrogates as \\udxxx escapes, which JSON.parse reads back as
        # the same lone code units.
        line = json.dumps({"op": op, "values": [_wire(v) for v in values]}, ensure_ascii=True)
        self._proc.stdin.write(line + "\n")
        self._proc.stdin.flush()
        reply = json.loads(self._proc.stdout.readline())
        assert "error" not in reply, reply
        results: list[dict[str, Any]] = reply["results"]
        return results

    def close(self) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        self._proc.wait(timeout=10)


def _wire(value: Any) -> Any:
    """The tagged JSON form of a Python value: floats travel as their repr so that -0, NaN and
    every bit of the double arrive intact; ABSENT travels as a tag."""
    if value is ABSENT:
        return {"$absent": True}
    if isinstance(value, float):
        if math.isnan(value):
            return {"$float": "NaN"}
        if math.isinf(value):
            return {"$float": "Infinity" if value > 0 else "-Infinity"}
        return {"$float": repr(value)}
    if isinstance(value, dict):
        assert not (len(value) == 1 and next(iter(value)) in TAGS)
        return {k: _wire(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_wire(v) for v in value]
    return value


@pytest.fixture(scope="module")
def node_oracle() -> Iterator[NodeOracle]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node (Node.js) is not on PATH: the property tests compare with JavaScript")
    oracle = NodeOracle(node)
    yield oracle
    oracle.close()


_INTERESTING = '\x00\x1f"\\\x7f\u2028\ud7ff\ud800\udbff\udc00\udfff\ue000\uffff😀\U00010000é'
_chars = st.one_of(
    st.characters(exclude_categories=()),
    st.characters(categories=["Cs"]),
    st.sampled_from(_INTERESTING),
)
_text = st.one_of(
    st.text(_chars, max_size=12),
    st.sampled_from(["", "\ud83d\ude00", "x\udbff\udfff", "\ude00\ud83d", "10", "9", "__proto__"]),
)
_keys = st.one_of(
    st.text(_chars, max_size=6),
    st.text(st.sampled_from("0123456789-.a"), max_size=4),  # integer-like keys
    st.sampled_from(["", "__proto__", "\ue000", "😀", "\ud800", "xt/id"]),
).filter(lambda k: k not in TAGS)
_floats = st.one_of(
    st.floats(),
    st.sampled_from([-0.0, 1e21, 1e-7, 1e-6, 5e-324, 1.7976931348623157e308, 1e20, 2.0**53]),
    st.integers(-(2**53), 2**53).map(float),
)


def _one_key_each_in_javascript(d: dict[str, Any]) -> bool:
    return len({k.encode("utf-16-le", "surrogatepass") for k in d}) == len(d)


_json_like = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(-(2**53), 2**53), _floats, _text, st.just(ABSENT)
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(_keys, children, max_size=5).filter(_one_key_each_in_javascript),
    ),
    max_leaves=25,
)
_values = _json_like.filter(lambda v: v is not ABSENT)
_oracle_settings = settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@_oracle_settings
@given(values=st.lists(_values, min_size=1, max_size=8))
def test_stable_stringify_agrees_with_node(node_oracle: NodeOracle, values: list[Any]) -> None:
    expected = node_oracle.ask("stringify", values)
    for value, want in zip(values, expected, strict=True):
        text = stable_stringify(value)
        assert text == want["text"], value
        assert hashing.sha256_hex(text) == want["sha256"], value


@_oracle_settings
@given(strings=st.lists(_text, min_size=1, max_size=8))
def test_content_hash_and_char_count_agree_with_node(
    node_oracle: NodeOracle, strings: list[str]
) -> None:
    expected = node_oracle.ask("strings", strings)
    for s, want in zip(strings, expected, strict=True):
        assert hashing.content_hash(s) == want["sha256"], s
        assert hashing.char_count(s) == want["length"], s


# --- files the reader leaves unread, text handed over ------------------------------------------


def test_a_file_over_the_cap_hashes_its_size_and_modification_time() -> None:
    """Decision 0025: the text hashed, spelled out for other implementations."""
    text = b'{"kind":"stat","mtime_ns":"1700000000123456789","size":13000000000}'
    assert hashing.stat_file_hash(13_000_000_000, 1_700_000_000_123_456_789) == (
        hashlib.sha256(text).hexdigest()
    )
    assert hashing.stat_file_hash(1, 2) != hashing.stat_file_hash(1, 3)


def test_text_bytes_are_what_javascript_encodes() -> None:
    assert hashing.text_bytes("a\ud800b") == "a\ufffdb".encode()
    assert hashing.text_bytes("\ud83d\ude00") == "\U0001f600".encode()
    assert hashing.text_bytes("plain") == b"plain"
