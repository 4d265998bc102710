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
import collections
import contextlib
import functools
import logging
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import anyio.to_thread
import attrs
import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp

from selfctx.adapters.harness.ids import emitted_id
from selfctx.adapters.harness.ingest import IngestResult
from selfctx.adapters.harness.messages import MalformedMessage, Message
from selfctx.adapters.harness.request import RequestCache
from selfctx.adapters.harness.session import HarnessSession
from selfctx.adapters.harness.tokens import PromptCounter
from selfctx.adapters.harness.tools import (
    ToolAnswer,
    check_prefix,
    is_context_tool,
    tool_schemas,
)
from selfctx.adapters.proxy.bodies import RecentBodies
from selfctx.adapters.proxy.codec import dumps, dumps_with, loads
from selfctx.adapters.proxy.guard import LOOPBACK_NAMES, TOKEN_HEADER, Guard
from selfctx.adapters.proxy.incremental import (
    ParsedConversation,
    assistant_messages,
    common_prefix,
)
from selfctx.adapters.proxy.passthrough import relayed, upstream_client, watch_disconnect
from selfctx.adapters.proxy.providers import PROVIDERS, Anthropic, Call, Provider
from selfctx.adapters.proxy.rebuilt import shown_once, stored_texts
from selfctx.adapters.proxy.recording import record_request
from selfctx.adapters.proxy.redact import CREDENTIALS, RedactingFilter, redact
from selfctx.adapters.proxy.sessions import (
    SESSION_HEADER,
    OpenSessions,
    ProxySession,
    answer_marks,
    continues,
    credential_digest,
    credential_values,
    session_id_for,
)
from selfctx.adapters.proxy.sse import Event, iter_events
from selfctx.application.policies import policy_by_name
from selfctx.application.ports.store import LOGGED, StoreError
from selfctx.application.service import ContextService
from selfctx.domain.chat import AssistantMessage, ToolCallRequest, whole_chat_read
from selfctx.domain.errors import SelfContextError
from selfctx.domain.rendering import AssembledContext
from selfctx.domain.session.state import SessionState

__all__ = ["TOKEN_HEADER", "UI_PATH", "Proxy", "ProxyConfig", "error_body"]

T = TypeVar("T")
log = logging.getLogger("selfctx.proxy")
_REDACTING = RedactingFilter()
for _name in ("selfctx.proxy", "uvicorn.error", "httpx", "httpcore"):
    logging.getLogger(_name).addFilter(_REDACTING)

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
    hosts: frozenset[str] | None = LOOPBACK_NAMES
    """The host names requests may be addressed to (``Host``); None: any (a proxy served beyond
    this machine, which has a token)."""
    timeout: float = 600.0
    keepalive: float = 10.0
    """Seconds between SSE comments while a streamed answer is being prepared."""
    max_event_chars: int = 64 * 1024 * 1024
    max_sessions: int = 256
    answer_before_commit: bool = False
    """Hand a whole (not streamed) answer to the client while the commit made beside its
    request lands, instead of after it (decision 0107). Off (the default): a client that has an
    answer knows that what its request added and the request's record are stored (decision
    0089), even if the proxy is killed the moment after."""
    answer_once_logged: bool = True
    """Hand an answer, whole or streamed, to the client once the transaction of the commit made
    beside its request is in the store's durable log, before the store has decided it (XTDB:
    indexed it); the decision is known before the proxy acts on the session again (decision
    0138). On (the default), a client that has an answer knows that what its request added and
    the request's record are durably logged, and stored unless another writer of the session
    came first (then the proxy records them again on what that writer left). Off: the answer
    waits for the decision. A store whose commits have no such moment (the memory store)
    answers once the commit is decided either way."""
    never_larger: bool = True
    """Send the client's own request whenever the managed one would be larger (decision 0049).
    Off only in tests of the context-call rounds, whose tiny conversations never pay for the
    context tools they are given."""


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
    collapsed: int = 0
    """Objects of the session collapsed when the last request for this one was built."""
    client_bytes: int = 0
    upstream_bytes: int = 0
    """Of the first request sent upstream for this one."""
    as_sent: bool = False
    """The client's request went upstream unchanged (the managed one would have been larger)."""
    recorded: tuple[AssembledContext, str | None] | None = None
    """The context of the request being built and what the proxy changed in it, until the
    request is recorded (once what is sent is known)."""
    texts: collections.Counter[tuple[str, str]] = attrs.field(factory=collections.Counter)
    """The client's text messages (``rebuilt.client_texts``)."""
    gone: asyncio.Event = attrs.field(factory=asyncio.Event)
    """Set when the client has left: no more rounds are asked for it."""
    commit: asyncio.Future[IngestResult] | None = None
    """The commit of what the client's conversation added, made in a worker thread while the
    first request goes upstream (decision 0078), until ``_open`` has waited for it."""
    landing: asyncio.Future[IngestResult] | None = None
    """That commit, when ``_open`` handed the answer on before it was known (a whole answer,
    decision 0107; a streamed one once it is logged, decision 0138): it is known before the
    proxy acts on the session again, and the session's lock is held until then."""
    logged: asyncio.Future[None] | None = None
    """Resolved once that commit's transaction is in the store's durable log, before it is
    decided (``answer_once_logged``, decision 0138); never, on a store without that moment."""
    built: tuple[AssembledContext, str | None] | None = None
    """The context of the first request sent and its note, kept for its record should the
    store refuse the transaction that carried it (decision 0107)."""
    raw: bytes = b""
    """The client's request."""
    sent: bytes = b""
    """The first request sent upstream (compared with one built again after a refused commit)."""
    taken: threading.Event = attrs.field(factory=threading.Event)
    """Set once the event loop sends the first request: the worker thread that built it waits
    for it (a switch interval at most) before it records the request and commits, so that the
    loop is not kept from the interpreter meanwhile (decision 0133)."""
    started: float = attrs.field(factory=time.monotonic)

    @property
    def session_id(self) -> str:
        return self.session.harness.session_id


@attrs.frozen
class _Outcome:
    again: bool
    removed: tuple[Call, ...] = ()
    exhausted: bool = False
    """The model called only context tools on the last round allowed: nothing to give back."""


class _Gone(Exception):
    """The client left: the exchange stops asking the model."""


class _Unstored(Exception):
    """What the client's conversation added could not be stored (the store failed while the
    request was upstream): the session went back to what it was, and the answer, built from
    what was not kept, is not given to the client (decision 0078)."""


def _resolve(future: asyncio.Future[bytes], value: bytes) -> None:
    if not future.done():
        future.set_result(value)


def _resolve_none(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _resolve_soon(loop: asyncio.AbstractEventLoop, future: asyncio.Future[None]) -> None:
    """From another thread: ``future`` resolved on ``loop``."""
    loop.call_soon_threadsafe(_resolve_none, future)


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
        self.bodies = RecentBodies(limit=self.config.max_sessions)
        self.counter = PromptCounter(service.tokenizer)
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._opening = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        routes: list[BaseRoute] = [
            Route("/", self._root, methods=["GET"]),
            Route("/_selfctx/health", self._health, methods=["GET"]),
        ]
        if ui is not None:
            routes += [Route(UI_PATH, _to_ui, methods=["GET", "HEAD"]), Mount(UI_PATH, ui)]
        routes += [
            Route(path, self._endpoint(provider), methods=["POST"])
            for path, provider in PROVIDERS.items()
        ]
        routes.append(
            Route("/{path:path}", self._passthrough, methods=["GET", "POST", "PUT", "DELETE"])
        )
        self.app: ASGIApp = Guard(
            Starlette(routes=routes, lifespan=self._lifespan),
            error_body,
            token=self.config.token,
            hosts=self.config.hosts,
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
            if self._transport is None:
                self._client = upstream_client(httpx.Timeout(self.config.timeout, connect=10.0))
            else:
                self._client = httpx.AsyncClient(
                    transport=self._transport, timeout=self.config.timeout
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

    async def _root(self, _request: Request) -> Response:
        """Not a model API path: answered here, never forwarded."""
        return JSONResponse(
            {"proxy": "selfctx", "apis": sorted(PROVIDERS), "health": "/_selfctx/health"}
        )

    async def _health(self, _request: Request) -> Response:
        return JSONResponse({"proxy": "selfctx", "sessions": len(self.sessions.items())})

    # -- the conversation APIs ----------------------------------------------------------------

    def _endpoint(self, provider: Provider) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            return await self.serve(provider, request)

        return endpoint

    async def serve(self, provider: Provider, request: Request) -> Response:
        """Answer one request of ``provider``'s API."""
        CREDENTIALS.set(credential_values(request.headers, request.query_params.multi_items()))
        raw = await _read_body(request, self.config.max_body_bytes)
        if raw is None:
            limit = self.config.max_body_bytes
            return _error(provider, 413, f"the request body is larger than {limit} bytes")
        owner = credential_digest(request.headers, request.query_params.multi_items())
        key = "input" if provider.name == "responses" else "messages"
        try:
            body = self.bodies.loads(raw, key, (owner, provider.path))
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
            return _error(provider, 400, f"the request body is not JSON: {exc}")
        except RecursionError:
            return _error(provider, 400, "the request body is nested too deeply")
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
        base = session_id_for(
            provider.name,
            provider.client_key(body, request.headers),
            first_user,
            request.headers.get(SESSION_HEADER),
            owner,
        )
        try:
            session = await self._session(provider, base, owner, body)
        except SelfContextError as exc:
            return _error(provider, 400, f"session {base!r}: {exc}")
        turn = _Turn(provider, body, headers, url, session, client_bytes=len(raw))
        await session.lock.acquire()
        released = False
        # until a streamed answer's relay takes over, a client that leaves is noticed here
        watcher = asyncio.create_task(watch_disconnect(request, turn.gone))
        try:
            content = await self._prepare(turn, raw)
            if content is None:
                return await self._forward(provider, "POST", url, headers, raw, "unmanaged")
            try:
                whole = not provider.streamed(body)
                first = await self._while_there(turn, self._open(turn, content, whole=whole))
            except _Gone:
                self._log(turn, 499)
                return Response(status_code=499)
            except _Unstored:  # the client's own request, as when the conversation is refused
                return await self._forward(provider, "POST", url, headers, raw, "unmanaged")
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
                watcher.cancel()
                return StreamingResponse(
                    self._relay(queue, turn.gone),
                    status_code=first.status_code,
                    headers=_returned(first.headers),
                    media_type="text/event-stream",
                )
            try:
                return await self._complete(turn, first)
            except _Unstored:  # known before the proxy acted on the answer: as above
                return await self._forward(provider, "POST", url, headers, raw, "unmanaged")
        finally:
            watcher.cancel()
            # A streamed exchange's task (released) knows the commit itself (decision 0138).
            landing = None if released else turn.landing
            if landing is not None:
                turn.landing = None
                # The answer is on its way: the session's lock is released once the commit
                # it was built beside is known (decision 0107).
                task = asyncio.create_task(self._land(turn, landing))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                released = True
            if not released:
                session.lock.release()

    async def _session(
        self, provider: Provider, base: str, owner: str, body: Mapping[str, Any]
    ) -> ProxySession:
        """The session a request of ``base`` and ``owner`` joins (see ``sessions``): one whose
        last request it continues, else a new one (a new conversation, or a branch)."""
        items, _system = provider.conversation(body)
        listed: list[Any] = items if isinstance(items, list) else [items]
        async with self._opening:
            candidates = self.sessions.of_base(base, owner)
            chosen = next((s for s in candidates if continues(s, listed)), None)
            extended = chosen is not None
            answered = [s for s in candidates if s.answer]
            if chosen is None and answered:
                chosen = await anyio.to_thread.run_sync(
                    lambda: _by_answer(provider.name, listed, answered)
                )
            number = 1
            while chosen is None:
                session_id = base if number == 1 else f"{base}-{number}"
                number += 1
                if session_id in self.sessions.items():
                    continue
                chosen = await self._open_session(provider, session_id, base, owner, listed)
            if not extended:
                chosen.same = None
            chosen.claimed = listed
            self.sessions.get(chosen.session_id)  # the most recently used now
            return chosen

    async def _open_session(
        self, provider: Provider, session_id: str, base: str, owner: str, items: Sequence[Any]
    ) -> ProxySession | None:
        """Open ``session_id`` (resumed if the store has it); None if the store's session holds
        another conversation than ``items`` (the request then gets a session of its own)."""
        policy = policy_by_name(self.config.policy, **self.config.policy_options)

        def open_session() -> HarnessSession | None:
            with whole_chat_read():  # a resume reads each closed turn back once (decision 0144)
                return opened()

        def opened() -> HarnessSession | None:
            harness = HarnessSession(
                self.service,
                session_id,
                provider.name,
                cwd=self.config.cwd,
                roots=self.config.roots,
                policy=policy,
                tool_prefix=self.config.tool_prefix,
            )
            if harness.resumed is not None:
                stored = _stored_answer(self.service.state(session_id), harness.tool_prefix)
                carried = answer_marks(assistant_messages(provider.name, items))
                if stored and not stored & carried:
                    self.service.close_session(session_id)
                    return None
            return harness

        harness = await anyio.to_thread.run_sync(open_session)
        if harness is None:
            return None
        parsed = ParsedConversation(provider.name, self._item_counter(provider))
        session = ProxySession(harness, parsed, base=base, owner=owner)
        if harness.resumed is not None:
            session.sent = await anyio.to_thread.run_sync(
                lambda: stored_texts(self.service.state(session_id))
            )
        for evicted in self.sessions.add(session_id, session):
            sid = evicted.harness.session_id
            await anyio.to_thread.run_sync(self.service.close_session, sid)
        return session

    def _item_counter(self, provider: Provider) -> Callable[[Iterable[Any]], int]:
        if provider.name == "responses":
            return lambda items: self.counter({"input": list(items)})
        return lambda items: self.counter(list(items))

    async def _prepare(self, turn: _Turn, raw: bytes) -> bytes | None:
        """Ingest the client's conversation and build the managed request in a worker thread:
        its bytes, or the client's own (``raw``) when the managed request would be larger (None:
        the context manager refused the conversation, which is then sent as it came).

        The request is handed over as soon as it is built, before what the conversation added
        is committed: the thread goes on to commit it while the request goes upstream
        (``turn.commit``, which ``_open`` waits for before anything reaches the client;
        decision 0078)."""
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[bytes] = loop.create_future()
        turn.raw = raw
        logged: asyncio.Future[None] | None = None
        if self.config.answer_once_logged:
            logged = turn.logged = loop.create_future()

        def hand() -> None:  # in the thread, inside the ingest's transaction
            content = self._content(turn)
            turn.built = turn.recorded
            loop.call_soon_threadsafe(_resolve, ready, content)
            # The loop sends the request before this thread takes the interpreter back for the
            # record and the commit, which would otherwise hold it up to a switch interval
            # (decision 0133); a loop that does not send within that interval is not waited for.
            turn.taken.wait(sys.getswitchinterval())
            if logged is not None:  # the commit below says when it is logged (decision 0138)
                LOGGED.set(functools.partial(_resolve_soon, loop, logged))
            # The request's record (decision 0055) goes in the same transaction as what it was
            # built from (decision 0089): one commit per request. Should the store refuse that
            # transaction, neither is written and ``_settled`` records the request sent.
            self._record_logged(turn)

        # The store read assembling makes goes out now, and is answered while the ingest
        # runs (decision 0089): from the event loop, before the request waits for a worker
        # thread and the interpreter (decision 0126), unless another thread holds the session.
        try:
            ahead = self.service.look_ahead(turn.session_id, wait=False)
        except SelfContextError:  # raised again in the thread, and handled there (below)
            ahead = False

        def prepare() -> IngestResult:
            if not ahead:
                self.service.look_ahead(turn.session_id)
            return self._ingest(turn, hand)

        commit = asyncio.ensure_future(anyio.to_thread.run_sync(prepare))
        try:
            either: set[asyncio.Future[Any]] = {ready, commit}
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            turn.taken.set()
            await asyncio.wait({commit})  # the session's lock is not released before it ends
            raise
        if ready.done():  # handed before the thread ended (its result is scheduled after)
            turn.commit = commit
            turn.sent = ready.result()
            return turn.sent
        try:
            commit.result()
        except SelfContextError as exc:
            log.warning("session %s: left unmanaged: %s", turn.session_id, exc)
        return None

    def _content(self, turn: _Turn) -> bytes:
        """The first request to send upstream for ``turn`` (in a worker thread)."""
        raw = turn.raw
        content = self._encode(turn, self._build(turn))
        if self.config.never_larger and len(content) > len(raw):
            # Never larger than what the client sent: its own request, unchanged.
            turn.as_sent = True
            turn.upstream_bytes = len(raw)
            return raw
        turn.as_sent = False
        turn.upstream_bytes = len(content)
        return content

    def _ingest(self, turn: _Turn, hand: Callable[[], None]) -> IngestResult:
        """Record what is new in the client's conversation and call ``hand`` (which builds the
        managed request) before it is committed (in a worker thread; raises
        ``SelfContextError`` if the context manager refuses the conversation, or the store
        fails)."""
        session = turn.session
        parsed = session.parsed
        items, system = turn.provider.conversation(turn.body)
        turn.messages, turn.naive = parsed.update(items, system, same=session.same)
        turn.texts = parsed.texts
        if session.sent and not session.withdrawn and not parsed.added:
            # a resumed session: what it holds that the client no longer sends
            session.withdrawn = not session.sent.issubset(parsed.texts)
        session.sent.update(parsed.added)
        session.withdrawn = session.withdrawn or parsed.withdrew
        ingestor = session.harness.ingestor
        if session.pending:  # context calls made beside the client's last calls
            ingestor.ingest(turn.messages)
            turn.extra, session.pending = session.pending, []
            return ingestor.ingest([*turn.messages, *turn.extra], before_commit=hand)
        return ingestor.ingest(turn.messages, before_commit=hand)

    async def _managed(self, turn: _Turn, *, last: bool = False) -> bytes:
        """The next round's request, after the proxy answered context calls."""

        def build() -> bytes:
            return self._encode(turn, self._build(turn, last=last))

        return await anyio.to_thread.run_sync(build)

    @staticmethod
    def _encode(turn: _Turn, managed: dict[str, Any]) -> bytes:
        """``managed`` as JSON: the conversation's items already encoded for an earlier request
        are not encoded again (``codec.dumps_with``; the same bytes as ``dumps``)."""
        requests = turn.session.requests
        if requests is None:
            return dumps(managed)
        key = "input" if turn.provider.name == "responses" else "messages"
        return dumps_with(managed, key, requests.pieces)

    def _build(self, turn: _Turn, *, last: bool = False) -> dict[str, Any]:
        """The managed request (in a worker thread): the session's context in the client's
        format, the context tools added; on the ``last`` round no tool may be called."""
        provider = turn.provider
        harness = turn.session.harness
        context = self.service.assemble(harness.session_id)
        note = None
        if turn.session.withdrawn:  # the client rebuilt or dropped text messages: decision 0049
            chat = shown_once(context.chat, turn.texts, turn.session.sent)
            if chat is not None:
                context = attrs.evolve(context, chat=chat)
                note = "messages the client rebuilt are shown once"
        prefix = harness.tool_prefix
        tools = tool_schemas(provider.name, prefix)
        requests = turn.session.requests
        if requests is None:  # the provider places the cache marks
            requests = RequestCache(
                provider.name,
                tool_prefix=prefix,
                cache_control=False,
                text=False,
                pieces=True,
                rendering_budget=self.service.settings.rendering_budget,
            )
            turn.session.requests = requests
        rendered = requests.render(context).body
        if isinstance(provider, Anthropic):
            if turn.rounds == 0:
                turn.session.outputs.saw(context.chat, self.service.state(harness.session_id))
            going, mark_last = turn.session.outputs.marks(self.service.foreseen(harness.session_id))
            before = frozenset(map(emitted_id, going))
            managed = provider.managed(
                turn.body, rendered, tools, mark_last=mark_last, before=before
            )
        else:
            managed = provider.managed(turn.body, rendered, tools)
        if last:
            managed["tool_choice"] = {"type": "none"} if provider.name == "anthropic" else "none"
        turn.managed = self.service.prompt_tokens(harness.session_id, context)
        state = self.service.state(harness.session_id)
        turn.collapsed = len(state.pool) - len(state.active)
        turn.recorded = (context, note)
        return managed

    async def _recording(self, turn: _Turn) -> None:
        """Record the request being sent (decision 0055) in a worker thread, while it goes
        upstream: the session's lock is held until it is written, so the records of a session
        are in order and complete before its next request is read; one that cannot be written
        is reported in the log and the exchange goes on (decision 0074)."""
        await anyio.to_thread.run_sync(self._record_logged, turn)

    def _record_logged(self, turn: _Turn) -> None:
        try:
            self._record(turn)
        except Exception as exc:
            log.warning(
                "session %s: the record of this request was not written: %s",
                turn.session_id,
                redact(repr(exc)),
            )

    def _record(self, turn: _Turn) -> None:
        """Record the request about to be sent (decision 0055), in a worker thread."""
        if turn.recorded is None:
            return
        (context, note), turn.recorded = turn.recorded, None
        if turn.as_sent and turn.rounds == 0:
            note = "the managed request would have been larger: the client's own was sent"
        record_request(
            self.service,
            turn.session.harness.session_id,
            context,
            api=turn.provider.name,
            body=turn.body,
            headers=turn.headers,
            naive_tokens=turn.naive,
            naive_shared=turn.session.parsed.shared,
            round=turn.rounds,
            note=note,
        )

    async def _open(
        self, turn: _Turn, content: bytes, *, whole: bool = False
    ) -> httpx.Response | Response:
        """Send ``content`` upstream; a response whose status is not 2xx, or an unreachable
        upstream, becomes the client's answer at once (the former exactly as the provider shaped
        it). The request's record is written meanwhile (``_recording``), and what the client's
        conversation added is committed (``turn.commit``): a streamed answer waits for both; a
        ``whole`` one (not streamed) waits only for the record, and is read while the commit
        lands (``turn.landing``, known before the client gets the answer or the proxy acts on
        the session again; with ``answer_before_commit``, before the proxy acts on the session
        again: decision 0107)."""
        commit, turn.commit = turn.commit, None
        # With a commit under way, the record is in its transaction (``_prepare``): a second
        # thread writing it meanwhile would put it before what it was built from.
        recording = None
        if commit is None and turn.recorded is not None:
            recording = asyncio.ensure_future(self._recording(turn))
        try:
            answer = await self._send(turn, content)
        except BaseException:
            if commit is not None:  # the session's lock is not released before it ends
                await asyncio.wait({commit})
            raise
        finally:
            if recording is not None:
                await recording
        if commit is None:
            return answer
        if isinstance(answer, httpx.Response) and not commit.done():
            turn.landing = commit
            if whole:
                return answer
            # A streamed answer is read whole before the client gets any of it (``_pump``):
            # once the commit is logged, the rest of it is known before the proxy acts on
            # the session or releases it (decision 0138).
            if turn.logged is not None:
                either: set[asyncio.Future[Any]] = {turn.logged, commit}
                await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
                if not commit.done():
                    return answer
            turn.landing = None
        await asyncio.wait({commit})
        return await self._settled(turn, commit, answer)

    async def _landed_before(
        self, turn: _Turn, answer: httpx.Response
    ) -> httpx.Response | Response | None:
        """Wait for the commit a whole answer was handed on beside (``turn.landing``) before the
        proxy acts on the session for it (its context calls): None when the answer stands, else
        what ``_settled`` sends in its place (raises ``_Unstored`` as it does)."""
        landing, turn.landing = turn.landing, None
        if landing is None:
            return None
        await asyncio.wait({landing})
        settled = await self._settled(turn, landing, answer)
        return None if settled is answer else settled

    async def _logged_before(
        self, turn: _Turn, answer: httpx.Response
    ) -> httpx.Response | Response | None:
        """Wait until the commit a whole answer was handed on beside is in the store's log
        (``turn.logged``, decision 0138) or known: None when the answer may go to the client
        (the rest of the commit is then known in ``_land``), else as ``_landed_before``."""
        landing, logged = turn.landing, turn.logged
        if landing is not None and logged is not None:
            either: set[asyncio.Future[Any]] = {logged, landing}
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            if not landing.done():
                return None
        return await self._landed_before(turn, answer)

    async def _land(self, turn: _Turn, landing: asyncio.Future[IngestResult]) -> None:
        """After a whole answer went to the client (or the exchange ended before the answer
        was read): ``_landed_after``, then release the session's lock (decision 0107)."""
        try:
            await self._landed_after(turn, landing)
        finally:
            turn.session.lock.release()

    async def _landed_after(self, turn: _Turn, landing: asyncio.Future[IngestResult]) -> None:
        """After an answer went to the client: wait for the commit made beside its request
        (decisions 0107, 0138). A store that failed rolled the session
        back, and the client's next request carries the conversation again: it is recorded
        then. A transaction refused because another writer came first was made again on what
        that writer left: the request sent is recorded on its own, with a note when the request
        built again differs from it."""
        try:
            await asyncio.wait({landing})
            try:
                result = landing.result()
            except SelfContextError as exc:
                log.warning(
                    "session %s: what the conversation added could not be stored (%s): the "
                    "client's next request carries it again",
                    turn.session_id,
                    redact(str(exc)),
                )
                return
            if result.redone:
                await self._record_sent(turn)
        except Exception:  # a bug: the exchange is over, the session goes on
            log.exception("session %s: the commit beside the answer failed", turn.session_id)

    async def _record_sent(self, turn: _Turn) -> None:
        """Record the first request sent, whose record the store refused with its transaction
        after the answer was handed on (decision 0107)."""
        again = await anyio.to_thread.run_sync(self._content, turn)
        if again != turn.sent and turn.built is not None:
            context, note = turn.built
            written = "built before another writer's commit, which the session's log holds first"
            turn.recorded = (context, f"{note}; {written}" if note else written)
        await self._recording(turn)

    async def _settled(
        self,
        turn: _Turn,
        commit: asyncio.Future[IngestResult],
        answer: httpx.Response | Response,
    ) -> httpx.Response | Response:
        """``answer`` once the commit made beside its request is known (decision 0078). A
        store that failed rolled the session back: the answer is dropped and ``_Unstored``
        raised (the client's own request is sent instead; the next request records the
        conversation again). A commit refused because another writer came first was made
        again on what that writer left: the request is built again, and if it differs from
        the one sent, the answer is dropped and the new request sent in its place."""
        try:
            result = commit.result()
        except SelfContextError as exc:
            await _drop(answer)
            log.warning(
                "session %s: what the conversation added could not be stored (%s): the "
                "client's own request is sent",
                turn.session_id,
                redact(str(exc)),
            )
            raise _Unstored from exc
        except BaseException:
            await _drop(answer)
            raise
        if not result.redone:
            return answer
        first = turn.sent
        again = await anyio.to_thread.run_sync(self._content, turn)
        if again == first:
            await self._recording(turn)
            return answer
        await _drop(answer)
        log.info(
            "session %s: another writer came first: the request is sent again", turn.session_id
        )
        turn.sent = again
        return await self._open(turn, again)

    async def _send(self, turn: _Turn, content: bytes) -> httpx.Response | Response:
        client = self.client()
        request = client.build_request("POST", turn.url, headers=turn.headers, content=content)
        turn.taken.set()  # the thread that built it goes on (decision 0133)
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
                payload = await self._while_there(
                    turn, _read_limited(upstream, self.config.max_body_bytes)
                )
            except _Gone:
                self._log(turn, 499)
                return Response(status_code=499)
            except (httpx.HTTPError, ValueError) as exc:
                self._log(turn, 502)
                return _error(turn.provider, 502, f"the upstream answer failed: {exc!r}")
            finally:
                await upstream.aclose()
            try:
                response = loads(payload)
            except (ValueError, RecursionError):
                response = None
            # The answer was read while the commit beside its request landed. Before the proxy
            # acts on it (context calls), the commit is known; before the client gets it, it is
            # known too, or logged (decision 0138), unless the proxy answers before the commit.
            if turn.landing is not None and (
                response is None
                or not self.config.answer_before_commit
                or self._acts(turn, response)
            ):
                if response is not None and not self._acts(turn, response):
                    instead = await self._logged_before(turn, upstream)
                else:
                    instead = await self._landed_before(turn, upstream)
                if isinstance(instead, Response):
                    self._log(turn, instead.status_code)
                    return instead
                if instead is not None:  # built again on another writer's commit: sent again
                    upstream = instead
                    continue
            if response is None:
                self._log(turn, upstream.status_code)
                return Response(payload, upstream.status_code, headers=_returned(upstream.headers))
            outcome = await self._answer(turn, response)
            if outcome.exhausted:
                self._log(turn, 502)
                return _error(turn.provider, 502, self._exhausted_message(turn))
            if not outcome.again:
                if outcome.removed:
                    ids = {c.id for c in outcome.removed}
                    response = turn.provider.without(response, ids)
                self._delivered(turn, response)
                self._log(turn, upstream.status_code)
                return JSONResponse(response, upstream.status_code, _returned(upstream.headers))
            try:
                nxt = await self._next_round(turn)
            except _Gone:
                self._log(turn, 499)
                return Response(status_code=499)
            if isinstance(nxt, Response):
                self._log(turn, nxt.status_code)
                return nxt
            upstream = nxt

    async def _next_round(self, turn: _Turn) -> httpx.Response | Response:
        """Ask the model again after the proxy answered its context calls (raises ``_Gone`` if
        the client left meanwhile: nothing more is asked for it)."""
        if turn.gone.is_set():
            raise _Gone
        content = await self._managed(turn, last=self._last(turn))
        return await self._while_there(turn, self._open(turn, content))

    async def _while_there(self, turn: _Turn, work: Awaitable[T]) -> T:
        """``work``, cancelled (and ``_Gone`` raised) if the client leaves before it is done."""
        task = asyncio.ensure_future(work)
        gone = asyncio.ensure_future(turn.gone.wait())
        try:
            await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            raise _Gone
        return task.result()

    def _failed_upstream(
        self, turn: _Turn, queue: asyncio.Queue[str | None], answer: Response
    ) -> None:
        """A streamed exchange ends on an upstream's refusal: the client gets it as the
        provider's error event (credentials redacted) and the request is logged with its status."""
        detail = bytes(answer.body).decode("utf-8", "replace")[:2000]
        message = redact(f"the upstream answered {answer.status_code}: {detail}")
        queue.put_nowait(turn.provider.error_event(message))
        self._log(turn, answer.status_code)

    def _exhausted_message(self, turn: _Turn) -> str:
        return (
            f"the model went on calling context tools after {turn.rounds} rounds, the limit "
            f"(--max-rounds {self.config.max_rounds}); nothing was left to answer"
        )

    async def _relay(
        self, queue: asyncio.Queue[str | None], gone: asyncio.Event
    ) -> AsyncIterator[str]:
        """What the client reads of a streamed exchange: the final events once they are known,
        and a keep-alive comment whenever nothing came for ``keepalive`` seconds. If the client
        leaves first, ``gone`` tells the exchange to stop asking the model."""
        finished = False
        try:
            while True:
                try:
                    item = await asyncio.wait_for(queue.get(), timeout=self.config.keepalive)
                except TimeoutError:
                    yield ": keepalive\n\n"
                    continue
                if item is None:
                    finished = True
                    return
                yield item
        finally:
            if not finished:
                gone.set()

    async def _pump(
        self, turn: _Turn, upstream: httpx.Response, queue: asyncio.Queue[str | None]
    ) -> None:
        """A streamed exchange: each upstream stream is read in full, then either answered by
        the proxy (and the model asked again) or given to the client through ``queue``."""
        try:
            while True:
                try:
                    events = await self._while_there(turn, self._events(upstream))
                except (httpx.HTTPError, ValueError) as exc:
                    queue.put_nowait(
                        turn.provider.error_event(redact(f"the upstream stream failed: {exc!r}"))
                    )
                    self._log(turn, 502)
                    return
                response = turn.provider.accumulate(events)
                if turn.landing is not None and self._acts(turn, response):
                    # The commit beside the request was logged, not yet known (decision 0138):
                    # it is known before the proxy acts on the session.
                    try:
                        instead = await self._landed_before(turn, upstream)
                    except _Unstored:
                        message = "what the conversation added could not be stored; ask again"
                        queue.put_nowait(turn.provider.error_event(message))
                        self._log(turn, 503)
                        return
                    if isinstance(instead, Response):
                        self._failed_upstream(turn, queue, instead)
                        return
                    if instead is not None:  # built again on another writer's commit: sent again
                        upstream = instead
                        continue
                outcome = await self._answer(turn, response)
                if outcome.exhausted:
                    queue.put_nowait(turn.provider.error_event(self._exhausted_message(turn)))
                    self._log(turn, 502)
                    return
                if not outcome.again:
                    if outcome.removed:
                        texts = turn.provider.filter_events(events, outcome.removed)
                    else:
                        texts = [event.raw for event in events]
                    for text in texts:
                        queue.put_nowait(text)
                    if outcome.removed:
                        ids = {c.id for c in outcome.removed}
                        response = turn.provider.without(response, ids)
                    self._delivered(turn, response)
                    self._log(turn, 200)
                    return
                nxt = await self._next_round(turn)
                if isinstance(nxt, Response):
                    self._failed_upstream(turn, queue, nxt)
                    return
                upstream = nxt
        except _Gone:
            self._log(turn, 499)  # the client left: nothing more was asked for it
        except Exception as exc:  # a bug or the store: the client is told, the proxy goes on
            log.exception("session %s: the exchange failed", turn.session_id)
            queue.put_nowait(turn.provider.error_event(redact(f"the proxy failed: {exc!r}")))
        finally:
            queue.put_nowait(None)
            landing, turn.landing = turn.landing, None
            try:
                if landing is not None:  # the answer is given: its commit is known next
                    await self._landed_after(turn, landing)
            finally:
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

    @staticmethod
    def _acts(turn: _Turn, response: Mapping[str, Any]) -> bool:
        """Whether the proxy acts on the session for ``response``: it holds context calls."""
        prefix = turn.session.harness.tool_prefix
        return any(is_context_tool(c.name, prefix) for c in turn.provider.calls(response))

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
        if turn.rounds >= self.config.max_rounds and len(context_calls) == len(calls):
            return _Outcome(again=False, exhausted=True)  # not run: the model cannot see them
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

        def handled(call: ToolCallRequest) -> ToolAnswer:
            try:
                return harness.handle(call.name, dict(call.arguments))
            except StoreError:
                raise
            except Exception as exc:  # a bug: the model is told, the exchange goes on
                log.exception("session %s: %s failed", turn.session_id, call.name)
                return ToolAnswer(False, f"{call.name} failed: {type(exc).__name__}")

        def run() -> None:
            answers = [(call, handled(call)) for call in mine]
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

    @staticmethod
    def _delivered(turn: _Turn, response: Mapping[str, Any]) -> None:
        """The client got ``response``: its next request, if it goes on, carries it back."""
        message = turn.provider.assistant(response)
        if message is not None:
            turn.session.answer = answer_marks([message])

    def _log(self, turn: _Turn, status: int) -> None:
        """One line per client request (on the event loop: from what the turn holds, never
        from the store)."""
        log.info(
            "session=%s api=%s status=%d naive_tokens=%d managed_tokens=%d collapsed=%d "
            "context_rounds=%d client_bytes=%d upstream_bytes=%d%s ms=%.0f",
            turn.session_id,
            turn.provider.name,
            status,
            turn.naive,
            turn.managed,
            turn.collapsed,
            turn.rounds,
            turn.client_bytes,
            turn.upstream_bytes,
            " sent_as_is=larger_managed" if turn.as_sent else "",
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
        CREDENTIALS.set(credential_values(request.headers, request.query_params.multi_items()))
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
        return relayed(upstream, _HOP, decoded=True)


async def _drop(answer: httpx.Response | Response) -> None:
    if isinstance(answer, httpx.Response):
        await answer.aclose()


async def _to_ui(request: Request) -> Response:
    query = request.url.query
    return RedirectResponse(f"{UI_PATH}/" + (f"?{query}" if query else ""), 308)


# -- helpers --------------------------------------------------------------------------------------


def error_body(path: str, status: int, message: str) -> dict[str, Any]:
    """An error in the shape of the API ``path`` belongs to."""
    provider = PROVIDERS[
        "/v1/messages" if path.startswith("/v1/messages") else "/v1/chat/completions"
    ]
    return provider.error_body(status, message)


def _error(provider: Provider, status: int, message: str) -> JSONResponse:
    message = redact(message)
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


def _by_answer(
    fmt: str, items: Sequence[Any], sessions: Sequence[ProxySession]
) -> ProxySession | None:
    """Of ``sessions``, the one whose last answer ``items`` carry (a client sends the model's
    answers back), the one sharing the longest start with them if several do."""
    best: tuple[int, ProxySession] | None = None
    for session in sessions:
        shared = common_prefix(session.claimed, items)
        if best is not None and shared <= best[0]:
            continue
        if session.answer & answer_marks(assistant_messages(fmt, items, shared)):
            best = (shared, session)
    return best[1] if best else None


def _stored_answer(state: SessionState, prefix: str) -> frozenset[str]:
    """:func:`answer_marks` of the last answer a stored session holds from the model to its
    client (the proxy's own context calls are not one)."""
    for turn in reversed(state.turns):
        for message in reversed(turn.messages):
            if not isinstance(message, AssistantMessage):
                continue
            calls = [c for c in message.tool_calls if not is_context_tool(c.name, prefix)]
            if message.tool_calls and not calls:
                continue
            ids = tuple(attrs.evolve(c, id=c.provider_id or c.id) for c in calls)
            return answer_marks([Message("assistant", message.text, ids)])
    return frozenset()
