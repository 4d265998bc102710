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


def _store(blobs: bool) -> Any:
    import httpx

    from selfctx.adapters.xtdb.client import XtdbClient
    from selfctx.adapters.xtdb.store import XtdbStore

    store = XtdbStore(XtdbClient(httpx.Client(base_url="http://127.0.0.1:9")))
    store.blobs = blobs
    return store


DOCS = st.lists(
    st.dictionaries(st.text(CHARS), JSON, max_size=4).map(lambda d: {**d, "xt/id": "x"}),
    max_size=3,
).map(lambda docs: [{**d, "xt/id": f"d{i}"} for i, d in enumerate(docs)])


@given(DOCS, st.lists(st.tuples(st.text(CHARS, min_size=1), st.none() | JSON), max_size=2))
def test_a_transaction_goes_out_as_if_every_string_were_encoded(
    docs: list[dict[str, Any]], expect: list[tuple[str, Any]]
) -> None:
    """The body skips the walk over every string when its JSON shows none needs an escape; the
    bytes are those of the walk, with and without long strings lifted out as blobs."""
    from unittest import mock

    from selfctx.adapters.xtdb import store as module
    from selfctx.application.ports.store import Expect

    matches = [Expect(i, d if isinstance(d, dict) or d is None else {"v": d}) for i, d in expect]
    for blobs in (False, True):
        store = _store(blobs)
        with mock.patch.object(module, "BLOB_CHARS", 3):  # short strings travel as blobs too
            body = store._body(docs, matches)
            walked = store._encoded(
                [text.encode(dict(d)) for d in docs],
                [
                    (
                        text.encode_str(e.object_id),
                        None if e.document is None else text.encode(dict(e.document)),
                    )
                    for e in matches
                ],
                plain=False,
            )
        assert body == walked


def test_a_transaction_with_a_surrogate_or_the_escape_is_encoded() -> None:
    import json

    store = _store(blobs=False)
    for value in ("a\ud800b", "\ufdd0", "key \udfff", "😀", "\\ud800"):
        doc = {"xt/id": "d", "v": value, value: 1}
        body, head = store._body([doc], [])
        assert head == 0
        assert json.loads(body) == {"tx-ops": [["put", text.encode(doc)]]}
