"""The escape that carries surrogate code points through XTDB (decision 0026), without a node."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from selfctx.adapters.xtdb import text

# Every code point, surrogates and U+FDD0 included, and a bias towards the ones that matter.
CHARS = st.one_of(
    st.characters(codec=None, categories=None),
    st.sampled_from(["\ud800", "\udfff", "\ufdd0", "d", "8", "0"]),
)
JSON = st.recursive(
    st.none() | st.integers() | st.text(CHARS),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(CHARS), inner, max_size=4),
    max_leaves=12,
)


@given(JSON)
def test_decode_inverts_encode(value: Any) -> None:
    encoded = text.encode(value)
    assert text.decode(encoded) == value


@given(st.text(CHARS))
def test_an_encoded_string_has_a_utf8_form(value: str) -> None:
    text.encode_str(value).encode("utf-8")


def test_strings_without_surrogates_or_the_escape_are_sent_as_they_are() -> None:
    doc = {"xt/id": "a", "content": "naïve 😀 日本", "list": ["x", {"k": "v"}]}
    assert text.encode(doc) is doc
    assert text.encode_str("a\ud800") == "a\ufdd0d800"
    assert text.encode_str("\ufdd0") == "\ufdd0fdd0"
