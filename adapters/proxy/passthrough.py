"""A pass-through proxy on the same stack as ``selfctx proxy`` (Starlette, uvicorn, httpx), doing
nothing but forwarding: the baseline ``selfctx bench proxy`` measures the proxy against, and, with
``record``, a relay that lets a test see each request a client sent before the proxy got it."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable, Collection
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp

__all__ = ["PassThrough", "relayed", "upstream_client", "watch_disconnect"]

_DROPPED = frozenset(
    {"host", "content-length", "connection", "transfer-encoding", "accept-encoding"}
)

Record = Callable[[str, dict[str, str], bytes], dict[str, str] | None]
"""Called with each request's path, headers and body; may return headers to add upstream."""


class PassThrough:
    """Forwards every request to ``upstream`` (a base URL) and streams the answer back; a client
    that leaves before the answer starts takes the upstream request with it."""

    def __init__(self, upstream: str, record: Record | None = None) -> None:
        self.upstream = upstream.rstrip("/")
        self.record = record
        self._client: httpx.AsyncClient | None = None
        route = Route("/{path:path}", self._forward, methods=["GET", "POST", "PUT", "DELETE"])
        self.app: ASGIApp = Starlette(routes=[route], lifespan=self._lifespan)

    @contextlib.asynccontextmanager
    async def _lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        self._client = upstream_client(None, 400)
        try:
            yield
        finally:
            await self._client.aclose()

    def _target(self, request: Request, body: bytes) -> tuple[str, dict[str, str]]:
        """The base URL to forward ``request`` to, and headers to add."""
        added = self.record(request.url.path, dict(request.headers), body) if self.record else {}
        return self.upstream, added or {}

    async def _forward(self, request: Request) -> Response:
        assert self._client is not None
        body = await request.body()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROPPED}
        base, added = self._target(request, body)
        headers.update(added)
        query = request.url.query
        url = base + request.url.path + (f"?{query}" if query else "")
        sent = self._client.build_request(request.method, url, headers=headers, content=body)
        gone = asyncio.Event()
        watcher = asyncio.create_task(watch_disconnect(request, gone))
        answer = asyncio.ensure_future(self._client.send(sent, stream=True))
        left = asyncio.ensure_future(gone.wait())
        try:
            await asyncio.wait({answer, left}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            left.cancel()
            watcher.cancel()
        if not answer.done():  # the client left: so does the request upstream
            answer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await answer
            return Response(status_code=499)
        return relayed(answer.result(), _DROPPED)


async def watch_disconnect(request: Request, gone: asyncio.Event) -> None:
    """Set ``gone`` when the client closes its connection (its body was read already, so the
    next message of the connection is its end)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            gone.set()
            return


KEEPALIVE_SECONDS = 4.0
"""How long an idle upstream connection is kept for the next request (httpx's default is 5 s)."""


def upstream_client(
    timeout: httpx.Timeout | float | None, connections: int = 200
) -> httpx.AsyncClient:
    """An HTTP client for an upstream: ``TCP_NODELAY`` (a request written in two parts, head and
    body, never waits for an ACK between them: decision 0035), a pool of ``connections``.

    An idle connection is dropped after :data:`KEEPALIVE_SECONDS`, before the 5 s after which
    uvicorn, Node.js and many local model servers close theirs: a request sent on a connection
    the server is closing at that moment fails with nothing answered (seen as a 502)."""
    limits = httpx.Limits(
        max_connections=connections,
        max_keepalive_connections=connections // 4,
        keepalive_expiry=KEEPALIVE_SECONDS,
    )
    transport = httpx.AsyncHTTPTransport(
        socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)], limits=limits
    )
    return httpx.AsyncClient(transport=transport, timeout=timeout, limits=limits)


def relayed(
    answer: httpx.Response, dropped: Collection[str], *, decoded: bool = False
) -> StreamingResponse:
    """An upstream's streamed answer as the client's, its headers but ``dropped``, closed once
    sent: its bytes as they came, or ``decoded`` (then its content encoding must be dropped)."""

    async def chunks() -> AsyncIterator[bytes]:
        try:
            async for chunk in answer.aiter_bytes() if decoded else answer.aiter_raw():
                yield chunk
        finally:
            await answer.aclose()

    headers: dict[str, Any] = {k: v for k, v in answer.headers.items() if k.lower() not in dropped}
    return StreamingResponse(chunks(), answer.status_code, headers=headers)
