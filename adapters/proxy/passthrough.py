"""A pass-through proxy on the same stack as ``selfctx proxy`` (Starlette, uvicorn, httpx), doing
nothing but forwarding: the baseline ``selfctx bench proxy`` measures the proxy against, and, with
``record``, a relay that lets a test see each request a client sent before the proxy got it."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

__all__ = ["PassThrough"]

_DROPPED = frozenset(
    {"host", "content-length", "connection", "transfer-encoding", "accept-encoding"}
)

Record = Callable[[str, dict[str, str], bytes], dict[str, str] | None]
"""Called with each request's path, headers and body; may return headers to add upstream."""


class PassThrough:
    """Forwards every request to ``upstream`` (a base URL) and streams the answer back."""

    def __init__(self, upstream: str, record: Record | None = None) -> None:
        self.upstream = upstream.rstrip("/")
        self.record = record
        self._client: httpx.AsyncClient | None = None
        route = Route("/{path:path}", self._forward, methods=["GET", "POST", "PUT", "DELETE"])
        self.app = Starlette(routes=[route], lifespan=self._lifespan)

    @contextlib.asynccontextmanager
    async def _lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        transport = httpx.AsyncHTTPTransport(
            socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
        )
        self._client = httpx.AsyncClient(transport=transport, timeout=600)
        try:
            yield
        finally:
            await self._client.aclose()

    async def _forward(self, request: Request) -> Response:
        assert self._client is not None
        body = await request.body()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROPPED}
        if self.record is not None:
            headers.update(self.record(request.url.path, headers, body) or {})
        query = request.url.query
        url = self.upstream + request.url.path + (f"?{query}" if query else "")
        sent = self._client.build_request(request.method, url, headers=headers, content=body)
        answer = await self._client.send(sent, stream=True)

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in answer.aiter_raw():
                    yield chunk
            finally:
                await answer.aclose()

        returned: dict[str, Any] = {
            k: v for k, v in answer.headers.items() if k.lower() not in _DROPPED
        }
        return StreamingResponse(chunks(), answer.status_code, headers=returned)
