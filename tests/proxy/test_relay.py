"""The front of ``selfctx proxy --workers N`` (``relay.Relay``): bytes relayed both ways, each
request of a kept-alive connection placed by its own key, streams passed on as they come,
chunked bodies, bounded heads and bodies, and a client that leaves takes its request with it.
What it refuses is tested beside the one-process proxy (``SERVED`` in test_proxy and
test_safety)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import attrs
import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from selfctx.adapters.proxy.relay import MAX_HEAD, Relay, relay_in_thread
from selfctx.adapters.proxy.serving import serve_in_thread

SECRET = "the-run's-secret-0123456789"


class _Worker:
    """A stand-in worker that records what reaches it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.seen: list[tuple[str, dict[str, str], bytes]] = []
        self.left = threading.Event()
        self.app = Starlette(
            routes=[
                Route("/stream", self._stream),
                Route("/slow", self._slow, methods=["POST"]),
                Route("/{path:path}", self._echo, methods=["GET", "POST"]),
            ]
        )

    async def _echo(self, request: Request) -> Response:
        body = await request.body()
        self.seen.append((request.url.path, dict(request.headers), body))
        return JSONResponse({"worker": self.name, "bytes": len(body)})

    async def _stream(self, request: Request) -> Response:
        async def events() -> AsyncIterator[bytes]:
            for n in range(3):
                yield f"data: {n} {time.monotonic()}\n\n".encode()
                await asyncio.sleep(0.4)

        return StreamingResponse(events(), media_type="text/event-stream")

    async def _slow(self, request: Request) -> Response:
        await request.body()
        while (await request.receive())["type"] != "http.disconnect":
            pass
        self.left.set()
        return Response(status_code=499)


@contextlib.contextmanager
def _front(count: int = 2, **options: Any) -> Iterator[tuple[list[_Worker], str]]:
    workers = [_Worker(f"w{n}") for n in range(count)]
    with contextlib.ExitStack() as stack:
        urls = [stack.enter_context(serve_in_thread(w.app)) for w in workers]
        base = stack.enter_context(relay_in_thread(Relay(urls, SECRET, **options)))
        yield workers, base


def _raw(base: str) -> socket.socket:
    host, port = base.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def _read_answer(sock: socket.socket, buffer: bytearray) -> tuple[bytes, bytes]:
    """One answer with a content-length from ``sock``: its head and body."""
    while b"\r\n\r\n" not in buffer:
        data = sock.recv(65536)
        assert data, bytes(buffer)
        buffer += data
    end = buffer.index(b"\r\n\r\n") + 4
    head = bytes(buffer[:end])
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(buffer) < end + length:
        buffer += sock.recv(65536)
    body = bytes(buffer[end : end + length])
    del buffer[: end + length]
    return head, body


def _post(path: str, session: str, body: bytes = b"{}", port: int = 0) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
        f"x-selfctx-session: {session}\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode() + body


def test_one_kept_alive_connection_reaches_each_conversations_worker() -> None:
    with _front() as (workers, base):
        port = int(base.rsplit(":", 1)[1])
        sock = _raw(base)
        buffer = bytearray()
        answers = []
        # the first two pipelined in one write: each head is read and placed on its own
        sock.sendall(_post("/v1/chat/completions", "a", port=port) + _post("/v1/x", "b", port=port))
        answers += [_read_answer(sock, buffer), _read_answer(sock, buffer)]
        for session in ("a", "b", "a"):
            sock.sendall(_post("/v1/chat/completions", session, b'{"n": 1}', port))
            answers.append(_read_answer(sock, buffer))
        sock.close()
    served = [json.loads(body)["worker"] for _, body in answers]
    assert served[0] != served[1]
    assert served[2:] == [served[0], served[1], served[0]]
    assert all(head.startswith(b"HTTP/1.1 200") for head, _ in answers)
    assert sorted(len(w.seen) for w in workers) == [2, 3]
    for worker in workers:
        for _, headers, _ in worker.seen:
            assert headers["x-selfctx-token"] == SECRET  # the run's secret, added by the front


def test_a_stream_flows_event_by_event() -> None:
    with _front(1) as (_, base), httpx.Client() as client:
        arrived = []
        with client.stream("GET", base + "/stream") as answer:
            assert answer.headers["content-type"].startswith("text/event-stream")
            for line in answer.iter_lines():
                if line.startswith("data: "):
                    arrived.append((time.monotonic(), float(line.split()[2])))
    assert len(arrived) == 3
    # each event reached the client before the worker wrote the next (0.4 s later)
    for (got, _), (_, next_sent) in itertools.pairwise(arrived):
        assert got < next_sent


def test_a_chunked_body_reaches_the_worker_whole() -> None:
    parts = [b'{"messages": [', b'"' + b"x" * 100_000 + b'"', b"]}"]
    with _front(1) as (workers, base), httpx.Client() as client:
        answer = client.post(
            base + "/v1/chat/completions",
            content=iter(parts),  # an iterator: httpx sends it chunked
            headers={"content-type": "application/json", "x-selfctx-token": "the client's"},
        )
    assert answer.status_code == 200, answer.text
    path, headers, body = workers[0].seen[0]
    assert path == "/v1/chat/completions" and body == b"".join(parts)
    assert headers["content-length"] == str(len(body)) and "transfer-encoding" not in headers
    assert headers["x-selfctx-token"] == SECRET


def test_a_large_body_in_pieces_reaches_the_worker_byte_for_byte() -> None:
    # part of the body comes with the head, the rest in pieces of odd sizes, the last piece with
    # the next request's head and body: each body is passed on whole, the next request kept
    body = bytes(range(256)) * 3000 + "é".encode()  # 768 KB and some, every byte value
    second = b'{"after": true}'
    port = 0
    with _front(1) as (workers, base):
        port = int(base.rsplit(":", 1)[1])
        sock = _raw(base)
        message = _post("/v1/chat/completions", "a", body, port)
        cut = message.index(b"\r\n\r\n") + 4 + 1000
        sock.sendall(message[:cut])
        rest = message[cut:]
        for size in (1, 70_000, 300_001, 65_536):
            sock.sendall(rest[:size])
            rest = rest[size:]
            time.sleep(0.02)
        sock.sendall(rest + _post("/v1/chat/completions", "a", second, port))
        buffer = bytearray()
        answers = [_read_answer(sock, buffer), _read_answer(sock, buffer)]
        sock.close()
    assert [json.loads(b)["bytes"] for _, b in answers] == [len(body), len(second)]
    assert [seen[2] for seen in workers[0].seen] == [body, second]


def test_a_client_that_leaves_in_the_middle_of_its_body_ends_only_its_request() -> None:
    body = b"x" * 500_000
    with _front(1) as (workers, base), httpx.Client() as client:
        port = int(base.rsplit(":", 1)[1])
        sock = _raw(base)
        message = _post("/v1/chat/completions", "a", body, port)
        sock.sendall(message[: len(message) // 2])
        time.sleep(0.2)
        sock.close()
        answer = client.post(
            base + "/v1/chat/completions",
            content=b'{"n": 2}',
            headers={"content-type": "application/json"},
        )
    assert answer.status_code == 200 and answer.json()["bytes"] == 8
    assert [seen[2] for seen in workers[0].seen] == [b'{"n": 2}']


def test_oversized_heads_and_bodies_are_refused_before_any_worker() -> None:
    with _front(1, max_body_bytes=1000) as (workers, base), httpx.Client() as client:
        long_head = client.post(
            base + "/v1/messages",
            content=b"{}",
            headers={"content-type": "application/json", "x-long": "y" * (MAX_HEAD + 10)},
        )
        long_body = client.post(
            base + "/v1/messages",
            content=b"{" + b" " * 2000 + b"}",
            headers={"content-type": "application/json"},
        )
        long_chunked = client.post(
            base + "/v1/chat/completions",
            content=iter([b"{", b" " * 2000, b"}"]),
            headers={"content-type": "application/json"},
        )
        sock = _raw(base)
        sock.sendall(b"GET / HTTP/1.1\r\nhost: 127.0.0.1\r\n" + b"x: y\r\n" * 200 + b"\r\n")
        many_fields = _read_answer(sock, bytearray())
        sock.close()
    assert long_head.status_code == 431
    assert long_body.status_code == 413 and long_body.json()["type"] == "error"  # Anthropic's
    assert long_chunked.status_code == 413 and long_chunked.json()["error"]["message"]
    assert many_fields[0].startswith(b"HTTP/1.1 431")
    assert workers[0].seen == []


def test_a_malformed_request_gets_a_400() -> None:
    with _front(1) as (workers, base):
        sock = _raw(base)
        sock.sendall(b"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\n bad: folded\r\n\r\n")
        head, body = _read_answer(sock, bytearray())
        sock.close()
    assert head.startswith(b"HTTP/1.1 400") and json.loads(body)["error"]["message"]
    assert workers[0].seen == []


def test_a_client_that_leaves_takes_its_worker_request_with_it() -> None:
    with _front(1) as (workers, base):
        port = int(base.rsplit(":", 1)[1])
        sock = _raw(base)
        sock.sendall(_post("/slow", "a", b"{}", port))
        time.sleep(0.3)
        assert not workers[0].left.is_set()
        sock.close()
        assert workers[0].left.wait(5)  # the worker saw its client leave


def test_an_unreachable_worker_is_a_502_in_the_providers_shape() -> None:
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    relay = Relay([f"http://127.0.0.1:{port}"], SECRET)
    with relay_in_thread(relay) as base, httpx.Client() as client:
        answer = client.post(
            base + "/v1/chat/completions",
            content=b"{}",
            headers={"content-type": "application/json", "authorization": "Bearer sk-secret"},
        )
    assert answer.status_code == 502 and answer.json()["error"]["message"]
    assert "sk-secret" not in answer.text


def test_a_refused_large_body_still_gets_its_refusal() -> None:
    """Refused before its 8 MB body is read, the client still reads the 403 (no reset)."""
    with _front(1) as (workers, base), httpx.Client() as client:
        answer = client.post(
            base + "/v1/messages",
            content=b"{" + b" " * 8_000_000 + b"}",
            headers={"content-type": "application/json", "origin": "http://evil.example"},
        )
    assert answer.status_code == 403 and answer.json()["type"] == "error"
    assert workers[0].seen == []


def test_a_worker_that_breaks_off_its_answer_ends_that_connection_only() -> None:
    """A worker that promises 100 bytes and sends 5: the client's connection ends (it cannot be
    told otherwise once the answer has begun); a worker's malformed head is a 502."""
    answers = iter(
        [
            b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nshort",
            b"HTTP/1.1 two hundred\r\n\r\n",
        ]
    )

    async def broken(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(next(answers))
        await writer.drain()
        writer.close()

    with (
        raw_worker(broken) as worker,
        relay_in_thread(Relay([worker], SECRET)) as base,
        httpx.Client() as client,
    ):
        try:
            cut = client.get(base + "/v1/models")
            cut_short = len(cut.content) < 100
        except httpx.RemoteProtocolError:
            cut_short = True
        bad_head = client.get(base + "/v1/models")
    assert cut_short
    assert bad_head.status_code == 502 and bad_head.json()["error"]["message"]


def test_the_inspectors_hook_answers_fetches_and_fails_safely() -> None:
    """The relay's inspector hook (decision 0083): an answer of its own (framed, no body for
    HEAD), a worker's answer fetched whole (a chunked one decoded) with the run's secret, and a
    hook that fails answers 500 while the front goes on."""

    async def chunked(request: Request) -> Response:
        async def parts() -> AsyncIterator[bytes]:
            for part in (b"one ", b"two ", request.headers.get("x-selfctx-token", "").encode()):
                yield part

        return StreamingResponse(parts(), media_type="text/plain")

    @attrs.frozen
    class Answer:
        status: int
        headers: tuple[tuple[bytes, bytes], ...]
        body: bytes

    async def hook(
        method: str, path: str, query: str, headers: Any, client: Any, port: int, fetch: Any
    ) -> Answer:
        if path.endswith("/boom"):
            raise RuntimeError("a bug")
        status, body = await fetch(0, "/chunked")
        return Answer(status, ((b"content-type", b"text/plain"),), body + f" {method}".encode())

    worker_app = Starlette(routes=[Route("/chunked", chunked)])
    with (
        serve_in_thread(worker_app) as worker,
        relay_in_thread(Relay([worker], SECRET, ui=hook)) as base,
        httpx.Client() as client,
    ):
        got = client.get(base + "/_selfctx/ui/page")
        assert got.status_code == 200 and got.content == f"one two {SECRET} GET".encode()
        head = client.head(base + "/_selfctx/ui/page")
        assert head.status_code == 200 and head.content == b""
        assert int(head.headers["content-length"]) == len(f"one two {SECRET} HEAD")
        failed = client.get(base + "/_selfctx/ui/boom")
        assert failed.status_code == 500 and "a bug" not in failed.text
        assert client.get(base + "/_selfctx/ui/page").status_code == 200


def test_bodies_in_many_small_segments_and_pipelined_requests_arrive_whole_and_in_order() -> None:
    """A guard of the front's own buffer (decision 0162): a head and a body sent a few bytes a
    segment, then three requests in one write (a length-framed one, a chunked one, a bodiless
    one), each reach the worker whole, in order, and each gets its answer."""
    body = bytes(range(256)) * 40
    chunked = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\nx-selfctx-session: a\r\n"
        b"content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n"
    )
    bodiless = b"GET /v1/models HTTP/1.1\r\nhost: 127.0.0.1\r\nx-selfctx-session: a\r\n\r\n"
    with _front(1) as (workers, base):
        sock = _raw(base)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        message = _post("/v1/chat/completions", "a", body)
        for at in range(0, len(message), 97):
            sock.sendall(message[at : at + 97])
            if at % (97 * 16) == 0:
                time.sleep(0.005)  # some of them reach the front as segments of their own
        sock.sendall(_post("/v1/x", "a", b'{"second": 2}') + chunked + bodiless)
        buffer = bytearray()
        answers = [_read_answer(sock, buffer) for _ in range(4)]
        sock.close()
    assert all(head.startswith(b"HTTP/1.1 200") for head, _ in answers)
    assert [json.loads(b)["bytes"] for _, b in answers] == [len(body), 13, 11, 0]
    assert [(path, seen) for path, _, seen in workers[0].seen] == [
        ("/v1/chat/completions", body),
        ("/v1/x", b'{"second": 2}'),
        ("/v1/chat/completions", b"hello world"),
        ("/v1/models", b""),
    ]


def test_a_slow_reader_holds_the_worker_back_and_the_front_stays_bounded() -> None:
    """Flow control (decision 0162): a client that reads nothing of a 64 MiB answer holds the
    worker back; what left the worker (the sockets' buffers and the front's) stays bounded,
    far under the answer, and the whole answer arrives once the client reads."""
    total = 64 * 1024 * 1024
    piece = bytes(range(256)) * 4096  # 1 MiB
    sent = [0]

    async def large(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % total)
        for _ in range(total // len(piece)):
            writer.write(piece)
            await writer.drain()
            sent[0] += len(piece) - writer.transport.get_write_buffer_size()
        writer.close()

    with raw_worker(large) as worker, relay_in_thread(Relay([worker], SECRET)) as base:
        client = _raw(base)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        client.sendall(b"GET /v1/models HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        deadline = time.monotonic() + 20
        settled, last = 0, -1
        while settled < 5 and time.monotonic() < deadline:  # until the worker is held
            time.sleep(0.1)
            settled, last = (settled + 1, last) if sent[0] == last else (0, sent[0])
        held_back = sent[0]
        received = 0
        client.settimeout(30)
        while received < total:
            data = client.recv(1024 * 1024)
            assert data, received
            received += len(data)
        client.close()
    assert settled >= 5, "the worker was never held back"
    assert held_back < total // 2, held_back
    assert received >= total


def test_a_connections_buffer_pauses_reading_while_full_and_lends_its_pieces() -> None:
    """The front's connection (decision 0162): the kernel writes into the connection's own
    buffer, reading pauses while it is full and resumes once taken from, a piece leaves as a
    view of it on asyncio's loop, and what is held moves to the buffer's front when its end is
    reached."""
    from selfctx.adapters.proxy.relay import _Conn

    class Transport:
        def __init__(self) -> None:
            self.calls: list[str] = []
            self.written: list[object] = []

        def pause_reading(self) -> None:
            self.calls.append("pause")

        def resume_reading(self) -> None:
            self.calls.append("resume")

        def write(self, data: object) -> None:
            self.written.append(data)

    async def scenario() -> None:
        conn = _Conn(size=16)
        transport = Transport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        into = conn.get_buffer(-1)
        into[:16] = b"GET / HTTP/1.1\r\n"
        conn.buffer_updated(16)
        assert transport.calls == ["pause"]  # full: no more until it is taken from
        assert await conn.until(b"\r\n", 64) == b"GET / HTTP/1.1\r\n"
        assert transport.calls == ["pause", "resume"]
        into = conn.get_buffer(-1)
        into[:16] = b"0123456789abcdef"
        conn.buffer_updated(16)
        out = _Conn()
        out.connection_made(transport)  # type: ignore[arg-type]
        await conn.copy(10, out)
        assert isinstance(transport.written[-1], memoryview)  # lent, not copied
        assert bytes(transport.written[-1]) == b"0123456789"
        assert len(conn.get_buffer(-1)) == 10  # "abcdef" moved to the front
        assert conn.take(6) == b"abcdef"

    asyncio.run(scenario())


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.contextmanager
def raw_worker(handler: Handler) -> Iterator[str]:
    """A stand-in worker on a loop and thread of its own, answering with ``handler``'s raw
    bytes; yields its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(asyncio.start_server(handler, sock=sock))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        loop.call_soon_threadsafe(server.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
