"""What the node reads of every request before a route runs, and the transaction answers it
writes, kept exactly as they were when they stopped going through regular expressions
(decision 0151): query parameters in either spelling and with escapes, the body's content type
with or without parameters, and the keys and order of ``{"txId", "txTime", ...}``."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from selfctx.adapters.xtdb import XtdbNode

pytestmark = pytest.mark.xtdb

JSON = "application/json"
_TX = re.compile(rb'^\{"txId":\d+,"txTime":"[0-9T:.\-]+Z"')


def _submit(
    node: XtdbNode, doc: dict[str, object], query: str, content_type: str = JSON
) -> httpx.Response:
    return httpx.post(
        node.url + "/_xtdb/submit-tx" + query,
        content=json.dumps({"tx-ops": [["put", doc]]}),
        headers={**node.headers, "Content-Type": content_type},
    )


@pytest.mark.parametrize(
    "query",
    [
        "?await-timeout=10000",
        "?awaitTimeout=10000",
        "?AwaitTimeout=10000",  # no lower-case letter before the first capital: no dash there
        "?await%2Dtimeout=10000",  # an escaped name
        "?await-timeout=%31%30000",  # an escaped value
        "?&await-timeout=10000&&",  # empty pairs are skipped
        "?await-timeout=1&await-timeout=10000",  # the last one counts
    ],
)
def test_await_timeout_is_read_in_every_spelling(xtdb_node: XtdbNode, query: str) -> None:
    answer = _submit(xtdb_node, {"xt/id": "reading-await" + query}, query)
    assert answer.status_code == 200, (query, answer.text)
    # keys and their order, byte for byte: what the adapter and upstream's clients read
    assert _TX.match(answer.content), answer.content
    assert answer.content.endswith(b',"txCommitted?":true}')


@pytest.mark.parametrize("query", ["", "?awaittimeout=10000", "?await_timeout=10000"])
def test_other_names_are_not_the_await_timeout(xtdb_node: XtdbNode, query: str) -> None:
    """``awaittimeout`` has no capital to split on and ``await_timeout`` no dash: neither is
    the parameter, so the node answers at once, as upstream does (202, no verdict)."""
    answer = _submit(xtdb_node, {"xt/id": "reading-other" + query}, query)
    assert answer.status_code == 202, answer.text
    assert _TX.match(answer.content) and answer.content.endswith(b'"}'), answer.content
    assert set(answer.json()) == {"txId", "txTime"}


def test_the_logged_answer_keeps_its_two_lines(xtdb_node: XtdbNode) -> None:
    answer = _submit(xtdb_node, {"xt/id": "reading-logged"}, "?awaitTimeout=10000&logged=true")
    assert answer.status_code == 200, answer.text
    first, second, end = answer.content.split(b"\n")
    assert end == b"" and _TX.match(first) and first.endswith(b'"}'), first
    assert second.startswith(first[:-1]) and second.endswith(b',"txCommitted?":true}')
    tx_id = json.loads(first)["txId"]
    awaited = httpx.get(
        xtdb_node.url + "/_xtdb/await-tx",
        params={"txId": tx_id, "timeout": 10000},
        headers=xtdb_node.headers,
    )
    assert awaited.status_code == 200 and awaited.content == first


def test_a_value_with_a_plus_is_decoded(xtdb_node: XtdbNode) -> None:
    """``+`` in a query is a space (``application/x-www-form-urlencoded``), ``%2B`` a plus."""
    for eid in ("reading a b", "reading+c"):
        assert _submit(xtdb_node, {"xt/id": eid, "n": 1}, "?await-timeout=10000").status_code == 200
    for raw, eid in (("reading+a+b", "reading a b"), ("reading%2Bc", "reading+c")):
        answer = httpx.get(xtdb_node.url + "/_xtdb/entity?eid=" + raw, headers=xtdb_node.headers)
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"xt/id": eid, "n": 1}


@pytest.mark.parametrize(
    "content_type",
    ["application/json", "application/json; charset=utf-8", "Application/JSON ;charset=UTF-8"],
)
def test_a_json_body_is_taken_with_or_without_parameters(
    xtdb_node: XtdbNode, content_type: str
) -> None:
    answer = _submit(
        xtdb_node, {"xt/id": "reading-type" + content_type}, "?await-timeout=10000", content_type
    )
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize(
    ("content_type", "named"),
    [
        (";", "a body without a Content-Type"),  # all separators: no media type at all
        ("", ""),
        ("text/plain; charset=utf-8", "text/plain"),
    ],
)
def test_a_body_of_no_or_another_type_is_refused_and_named(
    xtdb_node: XtdbNode, content_type: str, named: str
) -> None:
    answer = _submit(xtdb_node, {"xt/id": "reading-refused"}, "", content_type)
    assert answer.status_code == 415
    assert answer.json()["error"] == f"/_xtdb/submit-tx reads application/json, not {named}"


def test_a_get_is_not_asked_for_its_content_type(xtdb_node: XtdbNode) -> None:
    answer = httpx.get(
        xtdb_node.url + "/_xtdb/status",
        headers={**xtdb_node.headers, "Content-Type": "text/plain"},
    )
    assert answer.status_code == 200
