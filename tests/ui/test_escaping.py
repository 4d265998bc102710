"""The pages' escaping (``h``) and quoting (``q``) give what ``html.escape`` and ``quote`` give
for any text; the values that need neither are handed back as they are (decision 0103)."""

from __future__ import annotations

import html
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from selfctx.adapters.ui.pages import h, q

_TEXT = st.text() | st.text(alphabet="abcXYZ019_.-~:@+=&<>\"'/ %é\u2028\ud800", max_size=40)


@given(_TEXT)
def test_escaping_is_html_escape(text: str) -> None:
    assert h(text) == html.escape(text, quote=True)


@given(_TEXT)
def test_quoting_is_quote(text: str) -> None:
    try:
        expected = quote(text, safe=":@+=")
    except UnicodeEncodeError:  # a lone surrogate: refused as before
        with pytest.raises(UnicodeEncodeError):
            q(text)
    else:
        assert q(text) == expected


def test_values_that_need_nothing_and_values_that_do() -> None:
    assert (
        h(12) == "12"
        and h("tc_0a1b") == "tc_0a1b"
        and h('<a href="x">') == ("&lt;a href=&quot;x&quot;&gt;")
    )
    assert q("tc_0a1b:2@x+y=z~.-") == "tc_0a1b:2@x+y=z~.-" and q("a b/é") == "a%20b%2F%C3%A9"
