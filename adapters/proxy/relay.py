"""The front of ``selfctx proxy --workers N``: a byte relay on a protocol of its own.

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
Each connection is a ``_Conn`` (``asyncio.BufferedProtocol``): the kernel reads into the
connection's own buffer and the pieces the front passes on are written from it as views, where
asyncio's streams copied each piece into a reader's buffer and out of it again (decision 0162).

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
from typing import Protocol, cast, runtime_checkable
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


class _Conn(asyncio.BufferedProtocol):
    """One connection, a client's or a worker's, as a protocol of the front's own: the kernel
    reads into a buffer the connection owns (``get_buffer``/``buffer_updated``), heads and
    chunk-size lines are found in it, and the bytes the front passes on leave it as views of it,
    one ``transport.write`` a piece (decision 0162). Reading pauses while the buffer is full and
    resumes as it is taken from; writing waits (``drain``) while the transport's buffer is over
    its high-water mark: a slow peer on either side holds the other back, the memory stays
    bounded."""

    def __init__(self, started: Callable[[_Conn], None] | None = None, size: int = _READ) -> None:
        self.started = started
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray(size)
        self.view = memoryview(self.buffer)
        self.start = 0
        self.end = 0
        self.eof = False
        self.lost = False
        self.on_end: Callable[[], object] | None = None
        """Called once when the peer ends the connection (the exchange in flight is cancelled)."""
        self.lends = True
        """Whether a view of the buffer may be written: the transport sends it or copies what
        it keeps (asyncio's transports); otherwise each piece is copied first."""
        self._paused = False
        self._blocked = False
        self._readable: asyncio.Future[None] | None = None
        self._writable: asyncio.Future[None] | None = None

    # -- the protocol's side ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # (uvloop's is not a subclass)
        self.lends = type(asyncio.get_running_loop()).__module__.startswith("asyncio.")
        if self.started is not None:
            self.started(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.start == self.end:
            self.start = self.end = 0
        elif self.end == len(self.buffer):  # what is held moves to the front
            held = bytes(self.view[self.start : self.end])
            self.buffer[: len(held)] = held
            self.start, self.end = 0, len(held)
        return self.view[self.end :]

    def buffer_updated(self, nbytes: int) -> None:
        self.end += nbytes
        if self.end == len(self.buffer) and self.start == 0 and not self._paused:
            self._paused = True
            self._transport().pause_reading()
        self._wake_reader()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake_reader()
        self._ended()
        return True  # the sending side stays open: the answer may still be written

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = self.lost = True
        self._wake_reader()
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._ended()

    def pause_writing(self) -> None:
        self._blocked = True

    def resume_writing(self) -> None:
        self._blocked = False
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def _wake_reader(self) -> None:
        if self._readable is not None and not self._readable.done():
            self._readable.set_result(None)

    def _ended(self) -> None:
        on_end, self.on_end = self.on_end, None
        if on_end is not None:
            on_end()

    def _transport(self) -> asyncio.Transport:
        assert self.transport is not None
        return self.transport

    # -- the front's side -------------------------------------------------------------------

    @property
    def held(self) -> int:
        return self.end - self.start

    def write(self, data: bytes | memoryview) -> None:
        self._transport().write(data)

    async def drain(self) -> None:
        """Wait while the transport holds more than its high-water mark."""
        if self._blocked and not self.lost:
            self._writable = asyncio.get_running_loop().create_future()
            try:
                await self._writable
            finally:
                self._writable = None
        if self.lost:
            raise ConnectionResetError("the connection is lost")

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    async def fill(self) -> bool:
        """Wait for more bytes; False at the connection's end."""
        if self.eof:
            return False
        held = self.held
        self._resume()
        self._readable = asyncio.get_running_loop().create_future()
        try:
            await self._readable
        finally:
            self._readable = None
        return self.held > held or not self.eof

    def _resume(self) -> None:
        if self._paused:
            self._paused = False
            self._transport().resume_reading()

    def take(self, count: int) -> bytes:
        data = bytes(self.view[self.start : self.start + count])
        self.start += count
        self._resume()
        return data

    def piece(self, count: int) -> bytes | memoryview:
        """The next ``count`` held bytes to write on, taken: a view where the transport allows."""
        at = self.start
        self.start += count
        self._resume()
        if self.lends:
            return self.view[at : at + count]
        return bytes(self.view[at : at + count])

    def drop(self) -> None:
        self.start = self.end = 0
        self._resume()

    async def until(self, separator: bytes, limit: int) -> bytes | None:
        """The bytes up to and with ``separator``, taken; None at the connection's end before
        it; ValueError past ``limit`` bytes."""
        searched = 0
        while True:
            at = self.buffer.find(separator, self.start + max(0, searched - 3), self.end)
            if at >= 0:
                if at + len(separator) - self.start > limit:
                    raise ValueError("over the bound")
                return self.take(at + len(separator) - self.start)
            searched = self.held
            if searched > limit:
                raise ValueError("over the bound")
            if not await self.fill():
                return None

    async def head(self) -> bytes | None:
        """The next request's head, or None at the connection's end before one starts."""
        try:
            head = await self.until(b"\r\n\r\n", MAX_HEAD)
        except ValueError:
            raise _Refused(431, f"the request's head is over {MAX_HEAD} bytes") from None
        if head is None and bytes(self.view[self.start : self.end]).strip():
            raise _Gone()
        return head

    async def line(self) -> bytes:
        try:
            line = await self.until(b"\r\n", MAX_LINE)
        except ValueError:
            raise ValueError("a chunk-size line over 1 KiB") from None
        if line is None:
            raise _Gone()
        return line

    async def exactly(self, count: int) -> bytes:
        if self.held >= count:
            return self.take(count)
        data = bytearray()
        while len(data) < count:
            if not self.held and not await self.fill():
                raise _Gone()
            data += self.piece(min(count - len(data), self.held))
        return bytes(data)

    async def copy(self, count: int, out: _Conn) -> None:
        """Pass ``count`` bytes on to ``out`` as they come, each piece as a view of the buffer
        (most of a large body arrives after its head)."""
        while count:
            if not self.held and not await self.fill():
                raise _Gone()
            size = min(count, self.held)
            out.write(self.piece(size))
            count -= size
            await out.drain()

    async def pump(self, out: _Conn) -> None:
        """Pass everything on to ``out`` until the connection ends."""
        while self.held or await self.fill():
            out.write(self.piece(self.held))
            await out.drain()


async def _chunked_body(incoming: _Conn, limit: int) -> bytes:
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
    conn: _Conn
    idle_since: float = 0.0

    def close(self) -> None:
        self.conn.close()


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
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _Conn(self._accepted), sock=sock)
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
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

    def _accepted(self, conn: _Conn) -> None:
        task: asyncio.Task[object] = asyncio.get_running_loop().create_task(self._connection(conn))
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)

    async def _connection(self, incoming: _Conn) -> None:
        served = 0
        try:
            while served < MAX_REQUESTS:
                try:
                    async with asyncio.timeout(IDLE_SECONDS if served else HEAD_SECONDS):
                        head = await incoming.head()
                except (TimeoutError, _Gone):
                    return
                if head is None:
                    return
                served += 1
                try:
                    keep = await self._exchange(head, incoming, served == MAX_REQUESTS)
                except _Refused as refused:
                    incoming.write(_response(refused.status, refused.path, refused.message))
                    await incoming.drain()
                    await _linger(incoming)
                    return
                if not keep:
                    return
        except _Refused as refused:  # an oversized head
            with contextlib.suppress(OSError):
                incoming.write(_response(refused.status, "/", refused.message))
                await incoming.drain()
                await _linger(incoming)
        except (ValueError, UnicodeDecodeError):
            with contextlib.suppress(OSError):
                incoming.write(_response(400, "/", "a malformed HTTP request"))
                await incoming.drain()
                await _linger(incoming)
        except (OSError, _Gone):
            pass
        except asyncio.CancelledError:
            if not incoming.eof:  # not the client leaving: the server stopping
                raise
        finally:
            incoming.on_end = None
            incoming.close()

    # -- one request -----------------------------------------------------------------------

    async def _exchange(self, raw_head: bytes, incoming: _Conn, last: bool) -> bool:
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
            incoming.write(b"HTTP/1.1 100 Continue\r\n\r\n")
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
            peer = incoming._transport().get_extra_info("peername")
            mine = incoming._transport().get_extra_info("sockname")
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
                incoming.write(_own_answer(decided, head.method, closing))
                await incoming.drain()
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
        try:
            try:
                out_conn = upstream.conn
                if body is not None and len(body) <= _READ // 4:
                    out_conn.write(out + body)  # a small body read whole: one write
                elif body is not None:
                    out_conn.write(out)
                    out_conn.write(body)
                elif length and incoming.held >= length and length <= _READ // 4:
                    out_conn.write(out + incoming.take(length))  # a small body: one write
                else:
                    out_conn.write(out)
                    if length:
                        await incoming.copy(length, out_conn)
                await out_conn.drain()
                if incoming.eof:  # the client left: so does the worker's request
                    raise _Gone()
                incoming.on_end = task.cancel
                reusable, keep = await self._answer(upstream, incoming, head.method, path, closing)
            except asyncio.CancelledError:
                if incoming.eof:  # the client left: so does the worker's request
                    raise _Gone() from None
                raise
        finally:
            incoming.on_end = None
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
                and not upstream.conn.eof
                and not upstream.conn.held
                and upstream.conn.transport is not None
                and not upstream.conn.transport.is_closing()
            ):
                return upstream
            upstream.close()
        host, port = self.addresses[worker]
        try:
            _, conn = await asyncio.get_running_loop().create_connection(_Conn, host, port)
        except OSError as exc:
            log.warning("worker %d of the proxy is unreachable: %s", worker, type(exc).__name__)
            raise _Refused(502, "a worker of the proxy is unreachable") from None
        return _Upstream(conn)

    async def _answer(
        self,
        upstream: _Upstream,
        writer: _Conn,
        method: str,
        path: str,
        closing: bool,
    ) -> tuple[bool, bool]:
        """Pass the worker's answer on as it comes: whether the worker's connection may be
        used again, and whether the client's may."""
        reader = upstream.conn
        for _ in range(8):  # interim answers (1xx), then the answer
            try:
                read = await reader.until(b"\r\n\r\n", MAX_HEAD)
            except ValueError:
                raise _Refused(
                    502, "a worker of the proxy answered with an oversized head", path
                ) from None
            except OSError as exc:
                log.warning("a worker of the proxy failed to answer: %s", type(exc).__name__)
                raise _Refused(502, "a worker of the proxy failed to answer", path) from None
            if read is None:
                log.warning("a worker of the proxy failed to answer: its connection ended")
                raise _Refused(502, "a worker of the proxy failed to answer", path)
            raw = read
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
        out = b"\r\n".join([first, *(n + b": " + v for n, v in fields)]) + b"\r\n\r\n"
        worker_keeps = "close" not in headers.get("connection", "").lower()
        try:
            if bodyless:
                writer.write(out)
                await writer.drain()
                return worker_keeps, True
            if framed:
                writer.write(out)
                await _relay_chunked(reader, writer)
                return worker_keeps, True
            if length is not None:
                count = int(length)
                if reader.held >= count and count <= _READ // 4:  # a small answer: one write
                    writer.write(out + reader.take(count))
                    await writer.drain()
                else:
                    writer.write(out)
                    await reader.copy(count, writer)
                return worker_keeps, True
            writer.write(out)
            await reader.pump(writer)  # until the worker closes
            return False, False
        except ValueError:
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


async def _linger(incoming: _Conn) -> None:
    """Close the sending side, then read and drop what the client still sends (at most
    :data:`LINGER_SECONDS`), so that the answer is not lost to a reset."""
    with contextlib.suppress(OSError, TimeoutError):
        transport = incoming._transport()
        if transport.can_write_eof():
            transport.write_eof()
        async with asyncio.timeout(LINGER_SECONDS):
            incoming.drop()
            while await incoming.fill():
                incoming.drop()


async def _relay_chunked(reader: _Conn, writer: _Conn) -> None:
    """A chunked answer, each piece passed on as it comes (a stream's events flow): a chunk
    the buffer holds whole, with its size line, leaves in one write."""
    while True:
        line = await reader.until(b"\r\n", MAX_LINE)
        if line is None:
            raise _Gone()
        size = int(line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            writer.write(line)
            for _ in range(MAX_HEADERS + 1):  # trailers, up to the empty line
                trailer = await reader.until(b"\r\n", MAX_LINE)
                if trailer is None:
                    raise _Gone()
                writer.write(trailer)
                if trailer == b"\r\n":
                    await writer.drain()
                    return
            raise ValueError("too many trailer fields")
        if reader.held >= size + 2 and size <= _READ // 4:
            writer.write(line + reader.take(size + 2))
            await writer.drain()
        else:
            writer.write(line)
            await reader.copy(size + 2, writer)


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
