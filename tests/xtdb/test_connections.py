"""The store's keep-alive connections (``Connections``): reused while the node keeps them open,
replaced when it closed one while idle, and every failure the same typed error as through httpx.
A local HTTP server plays the node's transport (the real node: tests/xtdb/test_store_node.py)."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from selfctx.adapters.xtdb.client import Connections, XtdbClient
from selfctx.application.ports.store import StoreProtocolError, StoreUnavailable


class _Node(http.server.ThreadingHTTPServer):
    daemon_threads = True
    connections = 0
    close_after = False
    delay = 0.0


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Node

    def setup(self) -> None:
        super().setup()
        self.server.connections += 1

    def do_GET(self) -> None:
        time.sleep(self.server.delay)
        body = b'{"version":"1.24.5"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()
        if self.server.close_after:  # closed while the client holds it idle
            self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def node() -> Iterator[_Node]:
    server = _Node(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _client(port: int) -> XtdbClient:
    http = httpx.Client(base_url=f"http://127.0.0.1:{port}")
    return XtdbClient(http, connections=Connections("127.0.0.1", port))


def test_one_connection_serves_every_request(node: _Node) -> None:
    client = _client(node.server_address[1])
    for _ in range(5):
        assert client.status(timeout=5) == {"version": "1.24.5"}
    assert node.connections == 1


def test_a_connection_the_node_closed_is_replaced_not_used(node: _Node) -> None:
    node.close_after = True
    client = _client(node.server_address[1])
    for _ in range(3):
        assert client.status(timeout=5) == {"version": "1.24.5"}
        time.sleep(0.05)  # the node's close has arrived
    assert node.connections == 3


def test_a_connection_idle_past_the_limit_is_replaced_before_the_node_closes_it(
    node: _Node,
) -> None:
    """The node's HTTP server closes a connection idle for 30 s, whenever its timer runs: a
    request sent on one at that moment would get no answer, and the store's reads and commits
    would fail for a connection the pool chose to keep. One kept idle longer than the pool's
    limit is closed and a new one opened; one idle for less is reused."""
    http = httpx.Client(base_url=f"http://127.0.0.1:{node.server_address[1]}")
    client = XtdbClient(http, connections=Connections("127.0.0.1", node.server_address[1], 0.2))
    client.status(timeout=5)
    client.status(timeout=5)
    assert node.connections == 1  # reused within the limit
    time.sleep(0.3)
    client.status(timeout=5)
    assert node.connections == 2  # idle past the limit: a new one
    assert Connections("127.0.0.1", 1).idle_limit < 30  # below the JDK server's idle interval


def test_no_node_and_no_answer_are_store_unavailable(node: _Node) -> None:
    node.delay = 1.0
    client = _client(node.server_address[1])
    with pytest.raises(StoreUnavailable, match="no answer within"):
        client.status(timeout=0.2)
    port = node.server_address[1]
    node.shutdown()
    node.server_close()
    with pytest.raises(StoreUnavailable, match=r"cannot reach the node|closed the connection"):
        _client(port).status(timeout=1)


# -- the answer's framing (the connections read HTTP/1.1 themselves, decision 0085) ------------


def _scripted(answer: bytes) -> tuple[int, threading.Thread]:
    """A one-connection server that reads one request and writes ``answer``, then closes."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            conn.sendall(answer)
        listener.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener.getsockname()[1], thread


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n" + b'{"version":"1.24.5"}',
        b"HTTP/1.1 200 OK\r\ncontent-length:  20 \r\nX-Other: y\r\n\r\n" + b'{"version":"1.24.5"}',
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"b;ext=1\r\n" + b'{"version":' + b"\r\n9\r\n" + b'"1.24.5"}' + b"\r\n0\r\nX-T: 1\r\n\r\n",
        b"HTTP/1.0 200 OK\r\n\r\n" + b'{"version":"1.24.5"}',  # ends where the connection does
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 20\r\n"
        b"Connection: close\r\n\r\n" + b'{"version":"1.24.5"}',
    ],
    ids=["length", "spaced header", "chunked", "until closed", "interim answer"],
)
def test_every_framing_of_an_answer_is_read(answer: bytes) -> None:
    port, thread = _scripted(answer)
    assert _client(port).status(timeout=5) == {"version": "1.24.5"}
    thread.join(5)


@pytest.mark.parametrize(
    ("answer", "error", "match"),
    [
        (b"", StoreUnavailable, "closed the connection"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{}", StoreUnavailable, "closed the"),
        (b"SMTP ready\r\n\r\n", StoreProtocolError, "broken HTTP answer"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", StoreProtocolError, "Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", StoreProtocolError, "Content-Length"),
        (b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 101 + b"\r\n", StoreProtocolError, "headers"),
        (b"HTTP/1.1 200 OK\r\nX: " + b"y" * 70_000 + b"\r\n\r\n", StoreProtocolError, "line"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            StoreUnavailable,
            "closed the connection",
        ),
    ],
    ids=["nothing", "cut short", "not HTTP", "bad length", "negative length", "101 headers",
         "long line", "bad chunk"],
)  # fmt: skip
def test_a_broken_answer_is_a_typed_store_error(
    answer: bytes, error: type[Exception], match: str
) -> None:
    port, thread = _scripted(answer)
    with pytest.raises(error, match=match):
        _client(port).status(timeout=5)
    thread.join(5)


def test_a_header_with_a_line_break_is_never_sent() -> None:
    connections = Connections("127.0.0.1", 9)
    with pytest.raises(ValueError, match="line break"):
        connections.request("GET", "/x", None, {"Authorization": "Bearer a\r\nX: y"}, 1)
