"""The EDN literals query arguments are written as."""

from __future__ import annotations

import pytest

from selfctx.adapters.xtdb import edn


def test_scalars() -> None:
    assert edn.dumps(None) == "nil"
    assert edn.dumps(True) == "true"
    assert edn.dumps(False) == "false"
    assert edn.dumps(-42) == "-42"
    assert edn.dumps(0.1) == "0.1"
    assert edn.dumps(1e300) == "1e+300"


def test_strings_are_escaped_like_json() -> None:
    assert edn.dumps('a "q" \\ \n\t é 😀') == '"a \\"q\\" \\\\ \\n\\t \\u00e9 \\ud83d\\ude00"'


def test_collections() -> None:
    assert edn.dumps(["a", 1, [None]]) == '["a" 1 [nil]]'
    assert edn.dumps({"xt/id": "a", "n": [1]}) == '{:xt/id "a" :n [1]}'


@pytest.mark.parametrize(
    "value", [float("nan"), float("inf"), 2**63, {"has space": 1}, {"": 1}, object()]
)
def test_values_without_a_literal_are_refused(value: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        edn.dumps(value)
