"""The front of ``selfctx proxy --workers N`` as a byte relay on asyncio's streams.

The front reads each request's head (HTTP/1.1, bounded), refuses what the one-process proxy
refuses (``guard.refusal`` and ``guard.authenticated``: a foreign ``Host``, browser-shaped
requests, encoded dots and slashes, a missing token), picks the request's worker by its routing
key (``workers.routing_key``, ``workers.Workers``), and passes the head (with the run's secret)
and the body's bytes to the worker and the answer's bytes back as they come: a streamed answer
flows chunk by chunk. Nothing is decoded but heads and chunk sizes. Each request of a kept-alive
client connection is placed on its own, so two conversations on one connection reach their two
workers. Connections to the workers are kept for the next request (at most
:data:`POOLED` idle per worker, each for :data:`passthrough.KEEPALIVE_SECONDS`). A client that
leaves takes its request with it: the worker's connection is closed, which the worker reads as
the client leaving.

It replaces a Starlette and httpx pass-through that cost 6-7 ms of CPU per 700 KB request:
this one costs what copying the bytes costs (decisions 0074 and 0088 have the measurements).

The inspector (``/_selfctx/ui``) is served through the front when it is given one (``ui``, the
inspector's front half, ``selfctx.adapters.ui.front``): the front asks it what to do with each
request to that path (its checks, its token, which worker answers, or a page of its own made of
what the workers hold) and relays the worker's answer as any other (decision 0083).

Bounds: a head of at most :data:`MAX_HEAD` bytes and :data:`MAX_HEADERS` fields (431), a body
of at most ``max_body_bytes`` (413), chunk-size lines of 1 KiB; an idle client connection is
closed after :data:`IDLE_SECONDS`, a head not received in :data:`HEAD_SECONDS` ends its
connection. Errors the front gives itself are in the shape of the path's API (``error_body``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from http import HTTPStatus
from typing import Protocol, runtime_checkable
from urllib.parse import unquote, urlsplit

import attrs

from selfctx.adapters.proxy.app import UI_PATH, error_body
from selfctx.adapters.proxy.guard import (
    LOOPBACK_NAMES,
    TOKEN_HEADER,
    authenticated,
    refusal,
)
from selfctx.adapters.proxy.passthrough import KEEPALIVE_SECONDS
from selfctx.adapters.proxy.workers import Workers, routing_key

__all__ = ["MAX_HEAD", "Fetch", "Relay", "UiAnswer", "UiForward", "UiRoute", "relay_in_thread"]

log = logging.getLogger("selfctx.proxy")

MAX_HEAD = 64 * 1024
"""The largest request or response head (request line and fields), in bytes."""
MAX_HEADERS = 128
"""The most header fields in one head."""
MAX_LINE = 1024
"""The longest chunk-size line of a chunked body."""
IDLE_SECONDS = 5.0
"""How long a client connection may stay idle between requests (uvicorn's default)."""
HEAD_SECONDS = 30.0
"""How long a client may take to send a request's head."""
POOLED = 32
"""Idle connections kept per worker."""
MAX_REQUESTS = 10_000
"""Requests served on one client connection before it is closed."""
LINGER_SECONDS = 2.0
"""How long what a refused client still sends is read and dropped before its connection is
closed (closed at once, the client could lose the refusal to a reset)."""
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,15}")
_READ = 256 * 1024
_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "content-length",
        "te",
        "trailer",
        "upgrade",
        "expect",
        "host",
        TOKEN_HEADER,
        "origin",  # checked here; the worker, reached at its own address, would see a stranger
    }
)
_NO_BODY = (204, 304)
_UI_DROPPED = frozenset({"cookie", "x-selfctx-ui-base"})
"""Fields of a browser's request the front keeps from the worker: the inspector's token (the
front checked it) and the base path, which only the front names."""
MAX_FETCHED = 64 * 1024 * 1024
"""The largest answer the front reads whole from a worker (the inspector's lists)."""
FETCH_SECONDS = 60.0


@runtime_checkable
class UiAnswer(Protocol):
    """An answer the front gives itself: ``headers`` are complete but for the framing."""

    @property
    def status(self) -> int: ...
    @property
    def headers(self) -> Sequence[tuple[bytes, bytes]]: ...
    @property
    def body(self) -> bytes: ...


@runtime_checkable
class UiForward(Protocol):
    """A request to pass on to ``worker``, for ``target`` (path and query), with ``headers``
    added."""

    @property
    def worker(self) -> int: ...
    @property
    def target(self) -> str: ...
    @property
    def headers(self) -> Sequence[tuple[str, str]]: ...


Fetch = Callable[[int, str], Awaitable[tuple[int, bytes]]]
"""``fetch(worker, target)``: a GET of ``target`` from a worker; its status and body."""
UiRoute = Callable[
    [str, str, str, Mapping[str, str], "str | None", int, Fetch], Awaitable[UiAnswer | UiForward]
]
"""``route(method, path, query, headers, client, port, fetch)``: what the front does with a
request to the inspector (``path`` as sent, ``client`` the peer's address, ``port`` the front's)."""


class _Refused(Exception):
    """A request the front answers itself: ``status``, ``message``, the path it was for."""

    def __init__(self, status: int, message: str, path: str = "/") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.path = path


class _Gone(Exception):
    """The client's connection ended before its request did."""


@attrs.define
class _Head:
    method: str
    target: bytes
    version: str
    fields: list[tuple[bytes, bytes]]
    headers: dict[str, str]
    """Lower-case names; a repeated field's values joined by ``, ``."""


def _parse_head(head: bytes, request: bool) -> _Head:
    """A head's start line and fields; ValueError if it is not HTTP/1.x."""
    lines = head[:-4].split(b"\r\n")
    if len(lines) - 1 > MAX_HEADERS:
        raise _Refused(431, "too many header fields")
    first = lines[0].split(b" ", 2)
    if len(first) < 2:
        raise ValueError("a bad start line")
    if request:
        if len(first) != 3 or not first[2].startswith(b"HTTP/1."):
            raise ValueError("a bad request line")
        method, target, version = first[0].decode("ascii"), first[1], first[2].decode("ascii")
        if not method.isalpha() or not method.isupper():
            raise ValueError("a bad method")
    else:
        if not first[0].startswith(b"HTTP/1."):
            raise ValueError("a bad status line")
        method, target, version = "", first[1], first[0].decode("ascii")
        if not first[1].isdigit() or len(first[1]) != 3:
            raise ValueError("a bad status")
    fields = []
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip() or b" " in name or b"\t" in name:
            raise ValueError("a bad header field")  # also obsolete line folding
        value = value.strip(b" \t")
        fields.append((name, value))
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return _Head(method, target, version, fields, headers)


class _Incoming:
    """A connection's reading side, with its own buffer: what a watcher read while an answer
    was sent (a pipelined request) is kept for the next head."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader
        self.buffer = bytearray()
        self.eof = False

    async def fill(self) -> bool:
        data = await self.reader.read(_READ)
        if not data:
            self.eof = True
            return False
        self.buffer += data
        return True

    async def head(self) -> bytes | None:
        """The next head, or None at the connection's end before one starts."""
        searched = 0
        while True:
            end = self.buffer.find(b"\r\n\r\n", max(0, searched - 3))
            if end + 4 > MAX_HEAD:
                raise _Refused(431, f"the request's head is over {MAX_HEAD} bytes")
            if end >= 0:
                head = bytes(self.buffer[: end + 4])
                del self.buffer[: end + 4]
                return head
            searched = len(self.buffer)
            if searched > MAX_HEAD:
                raise _Refused(431, f"the request's head is over {MAX_HEAD} bytes")
            if not await self.fill():
                if self.buffer.strip():
                    raise _Gone()
                return None

    async def line(self) -> bytes:
        while True:
            end = self.buffer.find(b"\r\n")
            if end >= 0:
                line = bytes(self.buffer[: end + 2])
                del self.buffer[: end + 2]
                return line
            if len(self.buffer) > MAX_LINE:
                raise ValueError("a chunk-size line over 1 KiB")
            if not await self.fill():
                raise _Gone()

    async def exactly(self, count: int) -> bytes:
        while len(self.buffer) < count:
            if not await self.fill():
                raise _Gone()
        data = bytes(self.buffer[:count])
        del self.buffer[:count]
        return data

    async def copy(self, count: int, writer: asyncio.StreamWriter) -> None:
        """Pass ``count`` bytes on to ``writer`` as they come: what the buffer holds first, then
        each piece as read, handed on as it is (not through the buffer, which would copy it
        twice more: most of a large body arrives after its head)."""
        if self.buffer:
            piece = bytes(self.buffer[:count])
            del self.buffer[: len(piece)]
            count -= len(piece)
            writer.write(piece)
            await writer.drain()
        while count:
            data = await self.reader.read(min(count, _READ))
            if not data:
                self.eof = True
                raise _Gone()
            count -= len(data)
            writer.write(data)
            await writer.drain()

    async def watch(self, task: asyncio.Task[object]) -> None:
        """Cancel ``task`` (the exchange in flight) when the connection ends; stop reading
        once a head's worth of pipelined bytes is waiting."""
        while len(self.buffer) <= MAX_HEAD:
            if not await self.fill():
                task.cancel()
                return


async def _chunked_body(incoming: _Incoming, limit: int) -> bytes:
    """A chunked request body, whole (at most ``limit`` bytes; trailers dropped)."""
    body = bytearray()
    while True:
        size_line = (await incoming.line()).split(b";", 1)[0].strip()
        if not _CHUNK_SIZE.fullmatch(size_line):
            raise ValueError("a bad chunk size")
        size = int(size_line, 16)
        if len(body) + size > limit:
            raise _Refused(413, f"the request body is over {limit} bytes")
        if size == 0:
            for _ in range(MAX_HEADERS + 1):  # trailers, up to the empty line
                if await incoming.line() == b"\r\n":
                    return bytes(body)
            raise _Refused(431, "too many trailer fields")
        body += await incoming.exactly(size)
        if await incoming.exactly(2) != b"\r\n":
            raise ValueError("a chunk without its CRLF")


def _response(status: int, path: str, message: str, *, close: bool = True) -> bytes:
    body = json.dumps(error_body(path, status, message)).encode()
    reason = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "Error"
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n" + ("connection: close\r\n" if close else "") + "\r\n"
    )
    return head.encode("latin-1") + body


@attrs.define
class _Upstream:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = 0.0

    def close(self) -> None:
        self.writer.close()


class Relay:
    """The front: ``workers`` are the workers' base URLs (``http://127.0.0.1:PORT``),
    ``secret`` the run's worker token; ``token`` and ``hosts`` as ``ProxyConfig``'s."""

    def __init__(
        self,
        workers: Sequence[str],
        secret: str,
        *,
        token: str | None = None,
        hosts: frozenset[str] | None = LOOPBACK_NAMES,
        max_body_bytes: int = 32 * 1024 * 1024,
        pooled: int = POOLED,
        ui: UiRoute | None = None,
    ) -> None:
        self.addresses = []
        for url in workers:
            parts = urlsplit(url)
            assert parts.hostname and parts.port, url
            self.addresses.append((parts.hostname, parts.port))
        self.placed = Workers(len(self.addresses))
        self.secret = secret.encode("latin-1")
        self.token = token
        self.hosts = None if hosts is None else frozenset(h.lower() for h in hosts)
        self.max_body_bytes = max_body_bytes
        self.pooled = pooled
        self.ui = ui
        self._idle: list[list[_Upstream]] = [[] for _ in self.addresses]
        self._connections: set[asyncio.Task[object]] = set()

    # -- serving -------------------------------------------------------------------------

    async def serve(self, sock: socket.socket, stop: asyncio.Event | None = None) -> None:
        """Serve on ``sock`` until ``stop`` is set (or SIGINT/SIGTERM, in the main thread)."""
        stop = stop or asyncio.Event()
        server = await asyncio.start_server(self._connection, sock=sock, limit=_READ)
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
        async with server:
            await stop.wait()
            server.close()
            for task in list(self._connections):  # what is in flight ends with the front
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
        for idle in self._idle:
            for upstream in idle:
                upstream.close()
            idle.clear()

    def run(self, sock: socket.socket, ready: Callable[[], None] | None = None) -> None:
        """Serve in the foreground until SIGINT or SIGTERM. The signals are taken before
        ``ready`` is called (the banner) and before the event loop starts, so one that arrives
        after the banner ends the front, whatever the disposition it inherited (a background
        job's SIGINT is ignored until then)."""
        loop = asyncio.new_event_loop()
        stop = asyncio.Event()

        def on_signal(signum: int, frame: object) -> None:
            loop.call_soon_threadsafe(stop.set)

        before = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            if ready is not None:
                ready()
            asyncio.set_event_loop(loop)
            loop.run_until_complete(self.serve(sock, stop))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            for sig, handler in before.items():
                signal.signal(sig, handler)
            asyncio.set_event_loop(None)
            loop.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        incoming = _Incoming(reader)
        served = 0
        me = asyncio.current_task()
        assert me is not None
        self._connections.add(me)
        try:
            while served < MAX_REQUESTS:
                wait = IDLE_SECONDS if served else HEAD_SECONDS
                try:
                    head = await asyncio.wait_for(incoming.head(), wait)
                except (TimeoutError, _Gone):
                    return
                if head is None:
                    return
                served += 1
                try:
                    keep = await self._exchange(head, incoming, writer, served == MAX_REQUESTS)
                except _Refused as refused:
                    writer.write(_response(refused.status, refused.path, refused.message))
                    await writer.drain()
                    await _linger(incoming, writer)
                    return
                if not keep:
                    return
        except _Refused as refused:  # an oversized head
            with contextlib.suppress(OSError):
                writer.write(_response(refused.status, "/", refused.message))
                await writer.drain()
                await _linger(incoming, writer)
        except (ValueError, UnicodeDecodeError):
            with contextlib.suppress(OSError):
                writer.write(_response(400, "/", "a malformed HTTP request"))
                await writer.drain()
                await _linger(incoming, writer)
        except (OSError, _Gone, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            if not incoming.eof:  # not the client leaving: the server stopping
                raise
        finally:
            self._connections.discard(me)
            writer.close()

    # -- one request -----------------------------------------------------------------------

    async def _exchange(
        self, raw_head: bytes, incoming: _Incoming, writer: asyncio.StreamWriter, last: bool
    ) -> bool:
        """Serve one request (``last``: the connection's last); whether the client's
        connection goes on."""
        head = _parse_head(raw_head, request=True)
        raw_path, question, query = head.target.partition(b"?")
        if not raw_path.startswith(b"/"):
            raise ValueError("a request target that is not a path")
        path = unquote(raw_path.decode("ascii"))
        headers = head.headers
        refused = refusal(head.method, path, raw_path, headers, self.hosts)
        if refused is None and self.token is not None:
            rest, refused = authenticated(path, headers, self.token)
            if rest is not None:
                path = rest
                raw_path = b"/" + raw_path[3:].partition(b"/")[2]
        if refused is not None:
            raise _Refused(*refused, path)
        chunked = "transfer-encoding" in headers
        if chunked and headers["transfer-encoding"].lower() != "chunked":
            raise _Refused(501, "only the chunked transfer coding is understood", path)
        if chunked and "content-length" in headers:
            raise ValueError("both a length and a transfer coding")
        length = 0
        if "content-length" in headers:
            values = {v.strip() for v in headers["content-length"].split(",")}
            if len(values) != 1 or not next(iter(values)).isdigit():
                raise ValueError("a bad content-length")
            length = int(values.pop())
        if length > self.max_body_bytes:
            raise _Refused(413, f"the request body is over {self.max_body_bytes} bytes", path)
        if headers.get("expect", "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = await _chunked_body(incoming, self.max_body_bytes) if chunked else None
        if body is not None:
            length = len(body)

        closing = (
            last or head.version == "HTTP/1.0" or "close" in headers.get("connection", "").lower()
        )
        target = raw_path + question + query
        dropped: frozenset[str] = frozenset()
        added: Sequence[tuple[str, str]] = ()
        if self.ui is not None and (path == UI_PATH or path.startswith(UI_PATH + "/")):
            if body is None and length:
                body = await incoming.exactly(length)  # (the inspector takes none)
            peer = writer.get_extra_info("peername")
            mine = writer.get_extra_info("sockname")
            try:
                decided = await self.ui(
                    head.method,
                    raw_path.decode("ascii"),
                    query.decode("latin-1"),
                    headers,
                    str(peer[0]) if peer else None,
                    int(mine[1]) if mine else 0,
                    self._fetch,
                )
            except Exception:  # a page of the front's own failed: said, and the front goes on
                log.warning("the inspector's page failed", exc_info=True)
                raise _Refused(500, "the inspector failed to make this page", path) from None
            if not isinstance(decided, UiForward):
                writer.write(_own_answer(decided, head.method, closing))
                await writer.drain()
                return not closing
            if not 0 <= decided.worker < len(self.addresses):
                raise _Refused(404, "no such worker", path)
            worker = decided.worker
            target = decided.target.encode("latin-1")
            dropped, added = _UI_DROPPED, decided.headers
        else:
            worker = self.placed.of(routing_key(headers))
        host, port = self.addresses[worker]
        lines = [b"%s %s %s" % (head.method.encode(), target, b"HTTP/1.1")]
        lines.append(b"host: %s:%d" % (host.encode(), port))
        lines += [
            name + b": " + value
            for name, value in head.fields
            if (key := name.lower().decode("latin-1")) not in _HOP and key not in dropped
        ]
        lines += [f"{name}: {value}".encode("latin-1") for name, value in added]
        lines.append(b"%s: %s" % (TOKEN_HEADER.encode(), self.secret))
        if length or head.method in ("POST", "PUT", "PATCH"):
            lines.append(b"content-length: %d" % length)
        out = b"\r\n".join(lines) + b"\r\n\r\n"

        upstream = await self._connect(worker)
        reusable = False
        task = asyncio.current_task()
        assert task is not None
        watcher: asyncio.Task[None] | None = None
        try:
            try:
                upstream.writer.write(out)
                if body is not None:
                    upstream.writer.write(body)
                elif length:
                    await incoming.copy(length, upstream.writer)
                else:
                    await upstream.writer.drain()
                watcher = asyncio.create_task(incoming.watch(task))
                reusable, keep = await self._answer(upstream, writer, head.method, path, closing)
            except asyncio.CancelledError:
                if incoming.eof:  # the client left: so does the worker's request
                    raise _Gone() from None
                raise
        finally:
            if watcher is not None:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
            if reusable and len(self._idle[worker]) < self.pooled:
                upstream.idle_since = time.monotonic()
                self._idle[worker].append(upstream)
            else:
                upstream.close()
        return keep and not closing and not incoming.eof

    async def _fetch(self, worker: int, target: str) -> tuple[int, bytes]:
        """A GET of ``target`` from ``worker`` on a connection of its own: the status and the
        whole body (at most :data:`MAX_FETCHED` bytes); 502 if the worker does not answer."""
        host, port = self.addresses[worker]
        try:
            reader, writer = await asyncio.open_connection(host, port, limit=_READ)
        except OSError:
            return 502, b""
        try:
            writer.write(
                f"GET {target} HTTP/1.1\r\nhost: {host}:{port}\r\n"
                f"{TOKEN_HEADER}: {self.secret.decode('latin-1')}\r\n"
                "connection: close\r\n\r\n".encode("latin-1")
            )
            raw = bytearray()

            async def read_all() -> None:
                while data := await reader.read(_READ):
                    raw.extend(data)
                    if len(raw) > MAX_FETCHED:
                        raise ValueError("an answer over the bound")

            await asyncio.wait_for(read_all(), FETCH_SECONDS)
            end = raw.find(b"\r\n\r\n")
            if end < 0:
                return 502, b""
            head = _parse_head(bytes(raw[: end + 4]), request=False)
            body = bytes(raw[end + 4 :])
            if "chunked" in head.headers.get("transfer-encoding", "").lower():
                body = _unchunked(body)
            return int(head.target), body
        except (OSError, ValueError, TimeoutError):
            return 502, b""
        finally:
            writer.close()

    async def _connect(self, worker: int) -> _Upstream:
        idle = self._idle[worker]
        now = time.monotonic()
        while idle:
            upstream = idle.pop()
            if (
                now - upstream.idle_since < KEEPALIVE_SECONDS
                and not upstream.reader.at_eof()
                and not upstream.writer.is_closing()
            ):
                return upstream
            upstream.close()
        host, port = self.addresses[worker]
        try:
            reader, writer = await asyncio.open_connection(host, port, limit=_READ)
        except OSError as exc:
            log.warning("worker %d of the proxy is unreachable: %s", worker, type(exc).__name__)
            raise _Refused(502, "a worker of the proxy is unreachable") from None
        return _Upstream(reader, writer)

    async def _answer(
        self,
        upstream: _Upstream,
        writer: asyncio.StreamWriter,
        method: str,
        path: str,
        closing: bool,
    ) -> tuple[bool, bool]:
        """Pass the worker's answer on as it comes: whether the worker's connection may be
        used again, and whether the client's may."""
        reader = upstream.reader
        for _ in range(8):  # interim answers (1xx), then the answer
            try:
                raw = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError) as exc:
                log.warning("a worker of the proxy failed to answer: %s", type(exc).__name__)
                raise _Refused(502, "a worker of the proxy failed to answer", path) from None
            if len(raw) > MAX_HEAD:
                raise _Refused(502, "a worker of the proxy answered with an oversized head", path)
            try:
                head = _parse_head(raw, request=False)
            except ValueError:
                raise _Refused(
                    502, "a worker of the proxy answered with a bad head", path
                ) from None
            status = int(head.target)
            if status >= 200 or status == 101:
                break
            writer.write(raw)
        else:
            raise _Refused(502, "a worker of the proxy answered with no final answer", path)
        fields = [f for f in head.fields if f[0].lower() not in (b"connection", b"keep-alive")]
        headers = head.headers
        framed = "chunked" in headers.get("transfer-encoding", "").lower()
        length = headers.get("content-length")
        bodyless = method == "HEAD" or status in _NO_BODY
        until_close = not bodyless and not framed and length is None
        if closing or until_close:
            fields.append((b"connection", b"close"))
        first = raw.split(b"\r\n", 1)[0]
        writer.write(b"\r\n".join([first, *(n + b": " + v for n, v in fields)]) + b"\r\n\r\n")
        worker_keeps = "close" not in headers.get("connection", "").lower()
        try:
            if bodyless:
                await writer.drain()
                return worker_keeps, True
            if framed:
                await _relay_chunked(reader, writer)
                return worker_keeps, True
            if length is not None:
                await _relay_exactly(reader, writer, int(length))
                return worker_keeps, True
            while data := await reader.read(_READ):  # until the worker closes
                writer.write(data)
                await writer.drain()
            return False, False
        except (ValueError, asyncio.LimitOverrunError, asyncio.IncompleteReadError):
            # the answer was begun: a worker that breaks its framing ends the connection
            log.warning("a worker of the proxy broke off its answer")
            raise _Gone() from None


def _own_answer(answer: UiAnswer, method: str, close: bool) -> bytes:
    """An answer the front gives itself, framed by its length."""
    known = answer.status in HTTPStatus._value2member_map_
    reason = HTTPStatus(answer.status).phrase if known else ""
    fields = [
        (n, v)
        for n, v in answer.headers
        if n.lower() not in (b"content-length", b"connection", b"transfer-encoding")
    ]
    fields.append((b"content-length", b"%d" % len(answer.body)))
    if close:
        fields.append((b"connection", b"close"))
    head = b"HTTP/1.1 %d %s\r\n" % (answer.status, reason.encode("latin-1"))
    head += b"".join(n + b": " + v + b"\r\n" for n, v in fields) + b"\r\n"
    return head if method == "HEAD" else head + answer.body


def _unchunked(data: bytes) -> bytes:
    """A whole chunked body, decoded (trailers dropped)."""
    body = bytearray()
    at = 0
    while True:
        end = data.index(b"\r\n", at)
        size_line = data[at:end].split(b";", 1)[0].strip()
        if not _CHUNK_SIZE.fullmatch(size_line):
            raise ValueError("a bad chunk size")
        size = int(size_line, 16)
        if size == 0:
            return bytes(body)
        body += data[end + 2 : end + 2 + size]
        at = end + 2 + size + 2


async def _linger(incoming: _Incoming, writer: asyncio.StreamWriter) -> None:
    """Close the sending side, then read and drop what the client still sends (at most
    :data:`LINGER_SECONDS`), so that the answer is not lost to a reset."""
    with contextlib.suppress(OSError, TimeoutError):
        if writer.can_write_eof():
            writer.write_eof()

        async def drop() -> None:
            while await incoming.reader.read(_READ):
                pass

        await asyncio.wait_for(drop(), LINGER_SECONDS)


async def _relay_exactly(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, count: int
) -> None:
    while count:
        data = await reader.read(min(count, _READ))
        if not data:
            raise _Gone()
        count -= len(data)
        writer.write(data)
        await writer.drain()


async def _relay_chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A chunked answer, each piece passed on as it comes (a stream's events flow)."""
    while True:
        line = await reader.readuntil(b"\r\n")
        if len(line) > MAX_LINE:
            raise ValueError("a chunk-size line over 1 KiB")
        size = int(line.split(b";", 1)[0].strip(), 16)
        writer.write(line)
        if size == 0:
            for _ in range(MAX_HEADERS + 1):  # trailers, up to the empty line
                trailer = await reader.readuntil(b"\r\n")
                writer.write(trailer)
                if trailer == b"\r\n":
                    await writer.drain()
                    return
            raise ValueError("too many trailer fields")
        await _relay_exactly(reader, writer, size + 2)


@contextlib.contextmanager
def relay_in_thread(relay: Relay, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve ``relay`` on a background thread; yields its base URL, stops it on exit."""
    import threading

    from selfctx.adapters.proxy.serving import bind

    sock = bind(host, 0)
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    started = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)

        async def main() -> None:
            started.set()
            await relay.serve(sock, stop)

        loop.run_until_complete(main())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    started.wait(30)
    try:
        yield f"http://{host}:{sock.getsockname()[1]}"
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=30)
        loop.close()
        sock.close()
