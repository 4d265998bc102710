"""How transport failures and bad answers become the store port's typed errors.

The only place XTDB is simulated: ``httpx.MockTransport`` plays a node that misbehaves in ways a
real one cannot be made to on demand. Every error must carry the URL and the operation, and be
raised ``from`` the httpx error when there is one.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from selfctx.adapters.xtdb import XtdbClient, XtdbStore
from selfctx.application.ports.store import (
    ConflictError,
    Expect,
    StoreError,
    StoreProtocolError,
    StoreRejected,
    StoreUnavailable,
)
from selfctx.domain.errors import InvalidInput

URL = "http://127.0.0.1:3999"
Handler = Callable[[httpx.Request], httpx.Response]


def store_on(handler: Handler, requests: list[httpx.Request] | None = None) -> XtdbStore:
    def record(request: httpx.Request) -> httpx.Response:
        if requests is not None:
            requests.append(request)
        return handler(request)

    http = httpx.Client(base_url=URL, transport=httpx.MockTransport(record))
    return XtdbStore(XtdbClient(http), timeout=2.0, owns_http=True)


def raising(exc: type[httpx.TransportError], message: str) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc(message, request=request)

    return handler


def answering(status: int, body: bytes, content_type: str = "application/json") -> Handler:
    return lambda request: httpx.Response(
        status, content=body, headers={"Content-Type": content_type}
    )


def check(err: StoreError, operation: str) -> None:
    assert err.url == URL
    assert err.operation == operation
    assert URL in str(err) and operation in str(err)


@pytest.mark.parametrize(
    ("exc", "message"),
    [
        (httpx.ConnectError, "[Errno 111] Connection refused"),
        (httpx.ConnectTimeout, "timed out"),
        (httpx.ReadTimeout, "timed out"),
        (httpx.ReadError, "connection reset by peer"),
        (httpx.RemoteProtocolError, "Server disconnected without sending a response."),
    ],
)
def test_unreachable_node_is_store_unavailable(
    exc: type[httpx.TransportError], message: str
) -> None:
    store = store_on(raising(exc, message))
    with pytest.raises(StoreUnavailable) as info:
        store.get("a")
    check(info.value, "entity")
    assert isinstance(info.value.__cause__, exc)


def test_a_connection_closed_before_the_answer_is_complete_is_unavailable() -> None:
    """A node that is being stopped may send its status line and close before the body: the node
    went away (seen with ``received 0 bytes``, and likewise midway); an answer that arrives whole
    but is not the JSON expected is the protocol error (below)."""
    store = store_on(
        raising(
            httpx.RemoteProtocolError,
            "peer closed connection without sending complete message body: "
            "received 10 bytes, expected 90",
        )
    )
    with pytest.raises(StoreUnavailable) as info:
        store.history("a")
    check(info.value, "history")
    assert isinstance(info.value.__cause__, httpx.RemoteProtocolError)


@pytest.mark.parametrize(
    "body",
    [b'[[{"xt/id": "a"', b"", b"<html>proxy error</html>", b"\xff\xfe not utf-8", b'{"a": 1}'],
    ids=["truncated", "empty", "html", "bad-utf8", "wrong-shape"],
)
def test_malformed_query_answers_are_protocol_errors(body: bytes) -> None:
    store = store_on(answering(200, body))
    with pytest.raises(StoreProtocolError) as info:
        store.get_many(["a", "b"])
    check(info.value, "get-many")


def test_edn_instead_of_json_is_a_protocol_error() -> None:
    # What a node sends to a client that forgot Accept: application/json.
    store = store_on(answering(200, b'{:xt/id "a"}', "application/edn"))
    with pytest.raises(StoreProtocolError):
        store.get("a")


def test_every_request_asks_for_json() -> None:
    requests: list[httpx.Request] = []
    store = store_on(answering(404, b'{"error": "a entity not found"}'), requests)
    assert store.get("a") is None
    assert requests[0].headers["Accept"] == "application/json"
    assert requests[0].url.params["eid"] == "a"


@pytest.mark.parametrize("status", [400, 403, 500, 503])
def test_error_statuses_are_store_rejected_with_the_reason(status: int) -> None:
    store = store_on(answering(status, b'{"error": "Query didn\'t match expected structure"}'))
    with pytest.raises(StoreRejected) as info:
        store.ids_of_type("file")
    check(info.value, "ids-of-type")
    assert info.value.status == status
    assert "expected structure" in str(info.value)


def test_a_plain_text_error_body_is_still_reported() -> None:
    store = store_on(answering(403, b"forbidden: read-only HTTP node", "text/plain"))
    with pytest.raises(StoreRejected, match="read-only"):
        store.commit([{"xt/id": "a"}])


def test_a_server_side_await_timeout_is_store_unavailable() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/_xtdb/submit-tx":
            return httpx.Response(202, json={"txId": 7, "txTime": "2026-01-01T00:00:00Z"})
        # Upstream's body for a timed-out await (reitit's default exception handler).
        return httpx.Response(
            500, json={"type": "exception", "class": "java.util.concurrent.TimeoutException"}
        )

    store = store_on(handler)
    with pytest.raises(StoreUnavailable) as info:
        store.commit([{"xt/id": "a"}])
    check(info.value, "await-tx")


def test_a_failed_match_is_a_conflict_naming_the_changed_object() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/_xtdb/submit-tx":
            return httpx.Response(202, json={"txId": 3, "txTime": "2026-01-01T00:00:00.001Z"})
        if path == "/_xtdb/await-tx":
            return httpx.Response(200, json={"txId": 3, "txTime": "2026-01-01T00:00:00.001Z"})
        if path == "/_xtdb/tx-committed":
            return httpx.Response(200, json={"txCommitted?": False})
        # The re-read after the conflict: "a" changed, "b" did not.
        return httpx.Response(200, json=[[{"xt/id": "a", "v": 2}], [{"xt/id": "b", "v": 1}]])

    requests: list[httpx.Request] = []
    store = store_on(handler, requests)
    with pytest.raises(ConflictError) as info:
        store.commit(
            [{"xt/id": "a", "v": 3}],
            [Expect("a", {"xt/id": "a", "v": 1}), Expect("b", {"xt/id": "b", "v": 1})],
        )
    assert info.value.object_ids == ("a",)
    check(info.value, "commit")
    sent = requests[0].read()
    assert sent.startswith(b'{"tx-ops":[["match","a",{"xt/id":"a","v":1}],["match","b"')
    assert store.bytes_sent == len(sent)


def test_a_node_that_awaits_on_submit_answers_in_one_request() -> None:
    """The project's node answers ``submit-tx?await-timeout=`` with ``txCommitted?``; without
    it (upstream's server, the tests above) the store awaits and asks in two more requests."""
    answers = iter([True, False])

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/_xtdb/submit-tx":
            assert int(request.url.params["await-timeout"]) > 0
            tx = {"txId": 4, "txTime": "2026-01-01T00:00:00.001Z", "txCommitted?": next(answers)}
            return httpx.Response(200, json=tx)
        return httpx.Response(200, json=[[{"xt/id": "a", "v": 2}]])  # the re-read

    requests: list[httpx.Request] = []
    store = store_on(handler, requests)
    assert store.commit([{"xt/id": "a", "v": 1}]).tx_id == 4
    assert [r.url.path for r in requests] == ["/_xtdb/submit-tx"]
    with pytest.raises(ConflictError) as info:
        store.commit([{"xt/id": "a", "v": 3}], [Expect("a", {"xt/id": "a", "v": 1})])
    assert info.value.object_ids == ("a",)
    assert [r.url.path for r in requests[1:]] == ["/_xtdb/submit-tx", "/_xtdb/query"]


def test_a_committed_flag_that_is_not_a_boolean_is_a_protocol_error() -> None:
    tx = {"txId": 4, "txTime": "2026-01-01T00:00:00.001Z", "txCommitted?": "yes"}
    store = store_on(lambda request: httpx.Response(200, json=tx))
    with pytest.raises(StoreProtocolError) as info:
        store.commit([{"xt/id": "a"}])
    check(info.value, "submit-tx")


def test_invalid_documents_never_reach_the_node() -> None:
    requests: list[httpx.Request] = []
    store = store_on(answering(500, b""), requests)
    for bad in ({"v": 1}, {"xt/id": ""}, {"xt/id": 3}, {"xt/id": "a", "v": float("inf")}):
        with pytest.raises(InvalidInput):
            store.commit([bad])
    assert requests == []
