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
from selfctx.application.ports.store import StoreUnavailable


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
