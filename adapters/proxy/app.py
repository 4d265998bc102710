"""The proxy: an ASGI application (Starlette) between an agent and its model API.

Each request of the three conversation APIs is ingested into its session (see
``selfctx.adapters.proxy.sessions``) and replaced by the managed request, with the four context
tools added under a prefix. When the model calls a context tool, the proxy runs it, records the
call and its answer in the session and asks the model again (at most ``max_rounds`` times), so the
client never sees a context tool; the client's own tool calls always reach it.

A streamed response is read in full before the client gets any of it (decision 0036): only then
is it known whether the proxy must answer a context call and ask again. While it waits, the client
gets SSE comments (``: keepalive``) so that its connection stays open. The client then gets the
final response's events as the provider sent them, without the context calls.

The context manager is synchronous: its calls run in worker threads, one request per session at a
time (an ``asyncio.Lock`` per session), so the event loop keeps serving other sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any

import anyio.to_thread
import attrs
import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from selfctx.adapters.harness.messages import MalformedMessage, Message
from selfctx.adapters.harness.render import render, to_anthropic
from selfctx.adapters.harness.session import HarnessSession
from selfctx.adapters.harness.tokens import PromptCounter
from selfctx.adapters.harness.tools import check_prefix, is_context_tool, tool_schemas
from selfctx.adapters.proxy.incremental import ParsedConversation
from selfctx.adapters.proxy.providers import PROVIDERS, Anthropic, Call, Provider
from selfctx.adapters.proxy.recording import record_request
from selfctx.adapters.proxy.sessions import (
    SESSION_HEADER,
    OpenSessions,
    ProxySession,
    session_id_for,
)
from selfctx.adapters.proxy.sse import Event, iter_events
from selfctx.application.policies import policy_by_name
from selfctx.application.service import ContextService
from selfctx.domain.errors import SelfContextError

__all__ = ["TOKEN_HEADER", "UI_PATH", "Proxy", "ProxyConfig"]

log = logging.getLogger("selfctx.proxy")

TOKEN_HEADER = "x-selfctx-token"
UI_PATH = "/_selfctx/ui"
"""Where the proxy serves the inspector, when it is given one."""
_HOP = frozenset(
    {
        "host",
        "content-length",
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "accept-encoding",
        "content-encoding",
        SESSION_HEADER,
        TOKEN_HEADER,
    }
)
"""Headers that belong to one connection (or to the proxy) and are never passed on."""


@attrs.frozen
class ProxyConfig:
    """How the proxy runs. Every default is what ``selfctx proxy`` uses."""

    upstream_anthropic: str = "https://api.anthropic.com"
    upstream_openai: str = "https://api.openai.com"
    tool_prefix: str = attrs.field(default="context_", validator=lambda _s, _a, v: check_prefix(v))
    policy: str | None = None
    """Policy of new sessions (None: the project's default)."""
    policy_options: Mapping[str, int] = attrs.field(factory=dict)
    """Fields of the policy to override (``trigger_tokens``, ``clear_at_least``, ...)."""
    cwd: str = "/"
    roots: tuple[str, ...] = ("/",)
    max_body_bytes: int = 32 * 1024 * 1024
    max_rounds: int = 5
    """Context-tool rounds per client request; the last one forbids tool calls."""
    token: str | None = None
    """When set, every request must present it (``x-selfctx-token`` or a ``/t/TOKEN`` prefix)."""
    timeout: float = 600.0
    keepalive: float = 10.0
    """Seconds between SSE comments while a streamed answer is being prepared."""
    max_event_chars: int = 64 * 1024 * 1024
    max_sessions: int = 256


@attrs.define
class _Turn:
    """One client request being served."""

    provider: Provider
    body: dict[str, Any]
    headers: dict[str, str]
    url: str
    session: ProxySession
    messages: list[Message] = attrs.field(factory=list)
    """The client's conversation, parsed."""
    extra: list[Message] = attrs.field(factory=list)
    """What the proxy added to the conversation: context calls and their answers."""
    rounds: int = 0
    naive: int = 0
    managed: int = 0
    started: float = attrs.field(factory=time.monotonic)

    @property
    def session_id(self) -> str:
        return self.session.harness.session_id


@attrs.frozen
class _Outcome:
    again: bool
    removed: tuple[Call, ...] = ()


class Proxy:
    """The proxy's state (the context service, open sessions, the upstream client) and its
    ASGI application, :attr:`app`."""

    def __init__(
        self,
        service: ContextService,
        config: ProxyConfig | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        ui: ASGIApp | None = None,
    ) -> None:
        """``ui``: an application to serve at ``/_selfctx/ui`` (the inspector)."""
        self.service = service
        self.config = config or ProxyConfig()
        self.sessions = OpenSessions(limit=self.config.max_sessions)
        self.counter = PromptCounter(service.tokenizer)
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._opening = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        routes: list[BaseRoute] = [Route("/_selfctx/health", self._health, methods=["GET"])]
        if ui is not None:
            routes += [Route(UI_PATH, _to_ui, methods=["GET", "HEAD"]), Mount(UI_PATH, ui)]
        routes += [
            Route(path, self._endpoint(provider), methods=["POST"])
            for path, provider in PROVIDERS.items()
        ]
        routes.append(
            Route("/{path:path}", self._passthrough, methods=["GET", "POST", "PUT", "DELETE"])
        )
        self.app: ASGIApp = _TokenGuard(
            Starlette(routes=routes, lifespan=self._lifespan), self.config.token
        )

    # -- life --------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        self.client()
        try:
            yield
        finally:
            await self.aclose()

    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            transport = self._transport or httpx.AsyncHTTPTransport(
                # a request is written in two parts (head, body): never wait for an ACK between
                socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
                limits=httpx.Limits(max_connections=200, max_keepalive_connections=50),
            )
            self._client = httpx.AsyncClient(
                transport=transport,
                timeout=httpx.Timeout(self.config.timeout, connect=10.0),
                limits=httpx.Limits(max_connections=200, max_keepalive_connections=50),
            )
        return self._client

    async def aclose(self) -> None:
        """Finish the exchanges under way, close the upstream client and every open session."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=self.config.timeout)
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        for session_id in list(self.sessions.items()):
            with contextlib.suppress(SelfContextError):
                await anyio.to_thread.run_sync(self.service.close_session, session_id)
        self.sessions.open.clear()

    async def _health(self, _request: Request) -> Response:
        return JSONResponse({"proxy": "selfctx", "sessions": len(self.sessions.items())})

    # -- the conversation APIs ----------------------------------------------------------------

    def _endpoint(self, provider: Provider) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            return await self.serve(provider, request)

        return endpoint

    async def serve(self, provider: Provider, request: Request) -> Response:
        """Answer one request of ``provider``'s API."""
        raw = await _read_body(request, self.config.max_body_bytes)
        if raw is None:
            limit = self.config.max_body_bytes
            return _error(provider, 413, f"the request body is larger than {limit} bytes")
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return _error(provider, 400, f"the request body is not JSON: {exc}")
        problem = _shape_problem(provider, body)
        if problem:
            return _error(provider, 400, problem)
        headers = _forwarded(request.headers)
        url = self._upstream_url(provider.family, request)
        if body.get("previous_response_id"):  # the conversation lives upstream, not here
            return await self._forward(provider, request.method, url, headers, raw, "unmanaged")
        try:
            first_user = provider.first_user_text(body)
        except MalformedMessage as exc:
            note = f"unmanaged: {exc}"
            return await self._forward(provider, request.method, url, headers, raw, note)
        session_id = session_id_for(
            provider.name,
            provider.client_key(body, request.headers),
            first_user,
            request.headers.get(SESSION_HEADER),
        )
        try:
            session = await self._session(provider, session_id)
        except SelfContextError as exc:
            return _error(provider, 400, f"session {session_id!r}: {exc}")
        turn = _Turn(provider, body, headers, url, session)
        await session.lock.acquire()
        released = False
        try:
            managed = await self._prepare(turn)
            if managed is None:
                return await self._forward(provider, "POST", url, headers, raw, "unmanaged")
            first = await self._open(turn, managed)
            if isinstance(first, Response):
                self._log(turn, first.status_code)
                return first
            if provider.streamed(body):
                # A task of its own serves the exchange and releases the lock: the session is
                # recorded in full even if the client goes away in the middle.
                queue: asyncio.Queue[str | None] = asyncio.Queue()
                task = asyncio.create_task(self._pump(turn, first, queue))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                released = True
                return StreamingResponse(
                    self._relay(queue),
                    status_code=first.status_code,
                    headers=_returned(first.headers),
                    media_type="text/event-stream",
                )
            return await self._complete(turn, first)
        finally:
            if not released:
                session.lock.release()

    async def _session(self, provider: Provider, session_id: str) -> ProxySession:
        async with self._opening:
            session = self.sessions.get(session_id)
            if session is None:
                policy = policy_by_name(self.config.policy, **self.config.policy_options)

                def open_session() -> HarnessSession:
                    return HarnessSession(
                        self.service,
                        session_id,
                        provider.name,
                        cwd=self.config.cwd,
                        roots=self.config.roots,
                        policy=policy,
                        tool_prefix=self.config.tool_prefix,
                    )

                harness = await anyio.to_thread.run_sync(open_session)
                parsed = ParsedConversation(provider.name, self._item_counter(provider))
                session = ProxySession(harness, parsed)
                for evicted in self.sessions.add(session_id, session):
                    sid = evicted.harness.session_id
                    await anyio.to_thread.run_sync(self.service.close_session, sid)
            return session

    def _item_counter(self, provider: Provider) -> Callable[[Iterable[Any]], int]:
        if provider.name == "responses":
            return lambda items: self.counter({"input": list(items)})
        return lambda items: self.counter(list(items))

    async def _prepare(self, turn: _Turn) -> dict[str, Any] | None:
        """Ingest the client's conversation and build the managed request, in one trip to a
        worker thread (None: the context manager refused the conversation, which is then sent
        as it came)."""
        items, system = turn.provider.conversation(turn.body)

        def prepare() -> dict[str, Any] | None:
            try:
                turn.messages, turn.naive = turn.session.parsed.update(items, system)
                ingestor = turn.session.harness.ingestor
                ingestor.ingest(turn.messages)
                if turn.session.pending:  # context calls made beside the client's last calls
                    turn.extra, turn.session.pending = turn.session.pending, []
                    ingestor.ingest([*turn.messages, *turn.extra])
                return self._build(turn)
            except SelfContextError as exc:
                log.warning("session %s: left unmanaged: %s", turn.session_id, exc)
                return None

        return await anyio.to_thread.run_sync(prepare)

    async def _managed(self, turn: _Turn, *, last: bool = False) -> dict[str, Any]:
        return await anyio.to_thread.run_sync(lambda: self._build(turn, last=last))

    def _build(self, turn: _Turn, *, last: bool = False) -> dict[str, Any]:
        """The managed request (in a worker thread): the session's context in the client's
        format, the context tools added; on the ``last`` round no tool may be called."""
        provider = turn.provider
        harness = turn.session.harness
        context = self.service.assemble(harness.session_id)
        prefix, memo = harness.tool_prefix, turn.session.memo
        if isinstance(provider, Anthropic):
            cache = provider.breakpoints_left(turn.body) >= 2
            rendered = to_anthropic(context, cache_control=cache, tool_prefix=prefix, memo=memo)
        else:
            rendered = render(context, provider.name, tool_prefix=prefix, memo=memo)
        managed = provider.managed(turn.body, rendered, tool_schemas(provider.name, prefix))
        if last:
            managed["tool_choice"] = {"type": "none"} if provider.name == "anthropic" else "none"
        turn.managed = self.service.prompt_tokens(harness.session_id, context)
        record_request(
            self.service,
            harness.session_id,
            context,
            api=provider.name,
            body=turn.body,
            headers=turn.headers,
            naive_tokens=turn.naive,
            naive_shared=turn.session.parsed.shared,
            round=turn.rounds,
        )
        return managed

    async def _open(self, turn: _Turn, body: Mapping[str, Any]) -> httpx.Response | Response:
        """Send ``body`` upstream; a response whose status is not 2xx, or an unreachable upstream,
        becomes the client's answer at once (the former exactly as the provider shaped it)."""
        client = self.client()
        content = turn.session.encoder.encode(body)
        request = client.build_request("POST", turn.url, headers=turn.headers, content=content)
        try:
            upstream = await client.send(request, stream=True)
        except httpx.HTTPError as exc:
            return _error(turn.provider, 502, f"the upstream {turn.url} is unreachable: {exc!r}")
        if upstream.status_code // 100 == 2:
            return upstream
        try:
            payload = await _read_limited(upstream, self.config.max_body_bytes)
        except (httpx.HTTPError, ValueError) as exc:
            return _error(turn.provider, 502, f"the upstream error could not be read: {exc!r}")
        finally:
            await upstream.aclose()
        return Response(payload, upstream.status_code, headers=_returned(upstream.headers))

    async def _complete(self, turn: _Turn, upstream: httpx.Response) -> Response:
        """A non-streamed exchange: rounds until the model answers the client."""
        while True:
            try:
                payload = await _read_limited(upstream, self.config.max_body_bytes)
            except (httpx.HTTPError, ValueError) as exc:
                self._log(turn, 502)
                return _error(turn.provider, 502, f"the upstream answer failed: {exc!r}")
            finally:
                await upstream.aclose()
            try:
                response = json.loads(payload)
            except json.JSONDecodeError:
                self._log(turn, upstream.status_code)
                return Response(payload, upstream.status_code, headers=_returned(upstream.headers))
            outcome = await self._answer(turn, response)
            if not outcome.again:
                if outcome.removed:
                    ids = {c.id for c in outcome.removed}
                    response = turn.provider.without(response, ids)
                self._log(turn, upstream.status_code)
                return JSONResponse(response, upstream.status_code, _returned(upstream.headers))
            nxt = await self._open(turn, await self._managed(turn, last=self._last(turn)))
            if isinstance(nxt, Response):
                self._log(turn, nxt.status_code)
                return nxt
            upstream = nxt

    async def _relay(self, queue: asyncio.Queue[str | None]) -> AsyncIterator[str]:
        """What the client reads of a streamed exchange: the final events once they are known,
        and a keep-alive comment whenever nothing came for ``keepalive`` seconds."""
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), timeout=self.config.keepalive)
            except TimeoutError:
                yield ": keepalive\n\n"
                continue
            if item is None:
                return
            yield item

    async def _pump(
        self, turn: _Turn, upstream: httpx.Response, queue: asyncio.Queue[str | None]
    ) -> None:
        """A streamed exchange: each upstream stream is read in full, then either answered by
        the proxy (and the model asked again) or given to the client through ``queue``."""
        try:
            while True:
                try:
                    events = await self._events(upstream)
                except (httpx.HTTPError, ValueError) as exc:
                    queue.put_nowait(
                        turn.provider.error_event(f"the upstream stream failed: {exc!r}")
                    )
                    self._log(turn, 502)
                    return
                response = turn.provider.accumulate(events)
                outcome = await self._answer(turn, response)
                if not outcome.again:
                    if outcome.removed:
                        texts = turn.provider.filter_events(events, outcome.removed)
                    else:
                        texts = [event.raw for event in events]
                    for text in texts:
                        queue.put_nowait(text)
                    self._log(turn, 200)
                    return
                nxt = await self._open(turn, await self._managed(turn, last=self._last(turn)))
                if isinstance(nxt, Response):
                    detail = bytes(nxt.body).decode("utf-8", "replace")[:2000]
                    queue.put_nowait(
                        turn.provider.error_event(
                            f"the upstream answered {nxt.status_code}: {detail}"
                        )
                    )
                    self._log(turn, nxt.status_code)
                    return
                upstream = nxt
        except Exception as exc:  # a bug or the store: the client is told, the proxy goes on
            log.exception("session %s: the exchange failed", turn.session_id)
            queue.put_nowait(turn.provider.error_event(f"the proxy failed: {exc!r}"))
        finally:
            queue.put_nowait(None)
            turn.session.lock.release()

    async def _events(self, upstream: httpx.Response) -> list[Event]:
        try:
            return [
                e async for e in iter_events(upstream.aiter_text(), self.config.max_event_chars)
            ]
        finally:
            await upstream.aclose()

    def _last(self, turn: _Turn) -> bool:
        return turn.rounds >= self.config.max_rounds

    async def _answer(self, turn: _Turn, response: Mapping[str, Any]) -> _Outcome:
        """Run the context calls of ``response``: record them and their answers in the session.
        ``again``: only context calls were made, so the model must be asked again; otherwise
        ``removed`` are the calls to take out of what the client gets."""
        provider = turn.provider
        prefix = turn.session.harness.tool_prefix
        calls = provider.calls(response)
        context_calls = [c for c in calls if is_context_tool(c.name, prefix)]
        if not context_calls:
            return _Outcome(again=False)
        message = provider.assistant(response)
        if message is None:
            log.warning(
                "session %s: a response with context calls was not readable", turn.session_id
            )
            return _Outcome(again=False, removed=tuple(context_calls))
        ids = {c.id for c in context_calls}
        own = [c for c in message.tool_calls if c.id not in ids]
        mine = tuple(c for c in message.tool_calls if c.id in ids)
        # With calls of its own, the client gets the text and the reasoning with them.
        asked = Message("assistant", "", mine) if own else attrs.evolve(message, tool_calls=mine)
        harness = turn.session.harness

        def run() -> None:
            answers = [(call, harness.handle(call.name, dict(call.arguments))) for call in mine]
            answered = [asked] + [
                Message("tool", a.message, tool_call_id=c.id, is_error=not a.ok, images=a.images)
                for c, a in answers
            ]
            if own:  # recorded after the results of the client's own calls (ProxySession.pending)
                turn.session.pending = answered
                return
            turn.extra += answered
            harness.ingestor.ingest([*turn.messages, *turn.extra])

        await anyio.to_thread.run_sync(run)
        turn.rounds += 1
        if own:
            return _Outcome(again=False, removed=tuple(context_calls))
        return _Outcome(again=True)

    def _log(self, turn: _Turn, status: int) -> None:
        state = self.service.state(turn.session_id)
        log.info(
            "session=%s api=%s status=%d naive_tokens=%d managed_tokens=%d collapsed=%d "
            "context_rounds=%d ms=%.0f",
            turn.session_id,
            turn.provider.name,
            status,
            turn.naive,
            turn.managed,
            len(state.pool) - len(state.active),
            turn.rounds,
            (time.monotonic() - turn.started) * 1000,
        )

    # -- everything else ----------------------------------------------------------------------

    def _upstream_url(self, family: str, request: Request) -> str:
        base = (
            self.config.upstream_anthropic if family == "anthropic" else self.config.upstream_openai
        )
        base = base.rstrip("/")
        path = request.url.path
        if base.endswith("/v1") and path.startswith("/v1/"):
            path = path[3:]
        query = request.url.query
        return f"{base}{path}" + (f"?{query}" if query else "")

    async def _passthrough(self, request: Request) -> Response:
        """Any other request (``count_tokens``, ``models``, ...) goes to its upstream unchanged:
        to Anthropic's if it carries Anthropic's headers, else to OpenAI's."""
        anthropic = "anthropic-version" in request.headers or "x-api-key" in request.headers
        provider = PROVIDERS["/v1/messages" if anthropic else "/v1/chat/completions"]
        raw = await _read_body(request, self.config.max_body_bytes)
        if raw is None:
            limit = self.config.max_body_bytes
            return _error(provider, 413, f"the request body is larger than {limit} bytes")
        url = self._upstream_url(provider.family, request)
        headers = _forwarded(request.headers)
        return await self._forward(provider, request.method, url, headers, raw, "passthrough")

    async def _forward(
        self,
        provider: Provider,
        method: str,
        url: str,
        headers: Mapping[str, str],
        raw: bytes,
        note: str,
    ) -> Response:
        client = self.client()
        request = client.build_request(method, url, headers=headers, content=raw or None)
        try:
            upstream = await client.send(request, stream=True)
        except httpx.HTTPError as exc:
            return _error(provider, 502, f"the upstream {url} is unreachable: {exc!r}")
        log.info("%s %s status=%d (%s)", method, url.split("?")[0], upstream.status_code, note)

        async def body() -> AsyncIterator[bytes]:
            try:
                async for chunk in upstream.aiter_bytes():
                    yield chunk
            finally:
                await upstream.aclose()

        return StreamingResponse(body(), upstream.status_code, headers=_returned(upstream.headers))


async def _to_ui(request: Request) -> Response:
    query = request.url.query
    return RedirectResponse(f"{UI_PATH}/" + (f"?{query}" if query else ""), 308)


class _TokenGuard:
    """Refuses requests without the proxy's token (when it has one): the ``x-selfctx-token``
    header or a path that starts with ``/t/TOKEN`` (for clients that take only a base URL)."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.inner = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.token is None or scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        path: str = scope["path"]
        given = None
        if path.startswith("/t/"):
            given, _, rest = path[3:].partition("/")
            scope = dict(scope, path="/" + rest, raw_path=("/" + rest).encode())
        else:
            for name, value in scope.get("headers", ()):
                if name.decode("latin-1").lower() == TOKEN_HEADER:
                    given = value.decode("latin-1")
        if given is None or not secrets.compare_digest(given.encode(), self.token.encode()):
            response = JSONResponse(
                {
                    "error": {
                        "type": "authentication_error",
                        "message": "missing or wrong proxy token",
                    }
                },
                401,
            )
            await response(scope, receive, send)
            return
        await self.inner(scope, receive, send)


# -- helpers --------------------------------------------------------------------------------------


def _error(provider: Provider, status: int, message: str) -> JSONResponse:
    log.warning("%s %d: %s", provider.path, status, message)
    return JSONResponse(provider.error_body(status, message), status)


def _shape_problem(provider: Provider, body: Any) -> str | None:
    if not isinstance(body, dict):
        return "the request body must be a JSON object"
    key = "input" if provider.name == "responses" else "messages"
    value = body.get(key)
    if provider.name == "responses" and isinstance(value, str):
        return None
    if not isinstance(value, list):
        return f"the request needs {key!r}: a list"
    if "tools" in body and not isinstance(body["tools"], list):
        return "'tools' must be a list"
    return None


def _forwarded(headers: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in _HOP}


def _returned(headers: httpx.Headers | Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in _HOP}


async def _read_body(request: Request, limit: int) -> bytes | None:
    """The request's body, or None if it is over ``limit`` bytes (not read past it)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def _read_limited(upstream: httpx.Response, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in upstream.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise ValueError(f"the upstream answer is larger than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
