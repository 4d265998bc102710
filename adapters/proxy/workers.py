"""The proxy as one process, or as a front that spreads conversations over worker processes.

The context manager's work for a request (parsing what is new, ingesting, rendering, encoding)
holds Python's interpreter lock: one process serves one request's work at a time, however many
cores the machine has. With ``selfctx proxy --workers N`` the process that listens is a *front*
that forwards each request, unread, to one of N worker processes (each a whole proxy on a port of
127.0.0.1 of its own, reached with a secret of the run), so N requests are worked on at once.

Each conversation's requests must reach the worker that holds its session (the parsed
conversation, its renderings, its lock). The front picks a worker by a digest of the request's
credentials and the conversation hints its headers carry (``x-selfctx-session``, Claude Code's
and Codex CLI's session headers): every request of one conversation carries the same, so it
always reaches the same worker; different conversations, and different users, spread over the
workers. Clients that send no such header (aider) reach one worker per key. Decision 0058 has
the measurements that chose one process by default.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import socket
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from selfctx.adapters.proxy.app import error_body, watch_disconnect
from selfctx.adapters.proxy.guard import LOOPBACK_NAMES, TOKEN_HEADER, Guard
from selfctx.adapters.proxy.sessions import CREDENTIAL_HEADERS, SESSION_HEADER

__all__ = ["ROUTING_HEADERS", "Front", "worker_for"]

ROUTING_HEADERS = (
    *CREDENTIAL_HEADERS,
    SESSION_HEADER,
    "x-claude-code-session-id",
    "session-id",
    "session_id",
    "thread-id",
)
"""What a request's worker is chosen by: the same for every request of one conversation."""
_DROPPED = frozenset(
    {"host", "content-length", "connection", "transfer-encoding", "keep-alive", TOKEN_HEADER}
)


def worker_for(headers: Mapping[str, str], workers: int) -> int:
    """The worker (0 to ``workers - 1``) of a request with these headers."""
    key = "\x00".join(f"{name}={headers.get(name, '')}" for name in ROUTING_HEADERS)
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % workers


class Front:
    """The listening process of a proxy with workers: :attr:`app` forwards each request to its
    worker (``workers``: their base URLs) with the run's ``secret`` in ``x-selfctx-token``."""

    def __init__(
        self,
        workers: Sequence[str],
        secret: str,
        *,
        token: str | None = None,
        hosts: frozenset[str] | None = LOOPBACK_NAMES,
    ) -> None:
        self.workers = list(workers)
        self.secret = secret
        self._client: httpx.AsyncClient | None = None
        route = Route("/{path:path}", self._forward, methods=["GET", "POST", "PUT", "DELETE"])
        inner = Starlette(routes=[route], lifespan=self._lifespan)
        self.app = Guard(inner, error_body, token=token, hosts=hosts)

    @contextlib.asynccontextmanager
    async def _lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        transport = httpx.AsyncHTTPTransport(
            socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
            limits=httpx.Limits(max_connections=400, max_keepalive_connections=100),
        )
        self._client = httpx.AsyncClient(transport=transport, timeout=None)
        try:
            yield
        finally:
            await self._client.aclose()

    async def _forward(self, request: Request) -> Response:
        assert self._client is not None
        body = await request.body()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROPPED}
        headers[TOKEN_HEADER] = self.secret
        worker = self.workers[worker_for(request.headers, len(self.workers))]
        query = request.url.query
        url = worker + request.url.path + (f"?{query}" if query else "")
        sent = self._client.build_request(request.method, url, headers=headers, content=body)
        gone = asyncio.Event()
        watcher = asyncio.create_task(watch_disconnect(request, gone))
        answer_task = asyncio.ensure_future(self._client.send(sent, stream=True))
        left = asyncio.ensure_future(gone.wait())
        try:
            await asyncio.wait({answer_task, left}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            left.cancel()
            watcher.cancel()
        if not answer_task.done():  # the client left: so does the request to the worker
            answer_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await answer_task
            return Response(status_code=499)
        answer = answer_task.result()

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
