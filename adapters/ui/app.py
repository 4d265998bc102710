"""The inspector as an ASGI application (Starlette), read-only, for its owner only.

Protections (decision 0055), checked before anything is read:

* **Loopback only**: a request must come from a loopback address and name a loopback host
  (``127.0.0.1``, ``localhost``, ``[::1]``) in ``Host``, so a web page whose name was made to
  point at 127.0.0.1 (DNS rebinding) gets nothing.
* **A token per start**, in the URL that is printed (as Jupyter does): ``?token=...`` once, then a
  cookie scoped to the inspector's path and port (``HttpOnly``, ``SameSite=Strict``). Without
  either, 401.
* **Browser-shaped cross-site requests are refused** (as decision 0027 does for the XTDB front):
  ``Sec-Fetch-Site`` other than ``same-origin`` or ``none``, or an ``Origin`` other than the
  inspector's own, get 403. Only ``GET`` and ``HEAD`` exist.
* Every answer forbids framing, sniffing, referrers and any script, style, font or image from
  elsewhere (``Content-Security-Policy: default-src 'self'``); the pages load nothing but the
  package's own ``ui.css`` and ``ui.js``.
"""

from __future__ import annotations

import http.cookies
import ipaddress
import logging
import secrets
import threading
from collections.abc import Callable
from importlib import resources
from urllib.parse import parse_qsl, urlencode

import attrs
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from selfctx.adapters.collector import COLLECTOR
from selfctx.adapters.ui import pages, views
from selfctx.adapters.ui.history import Sessions
from selfctx.application.ports.store import StoreError, StoreUnavailable
from selfctx.application.service import ContextService
from selfctx.domain.errors import InvalidInput, SelfContextError

__all__ = [
    "BASE_HEADER",
    "SECURITY_HEADERS",
    "Inspector",
    "cookie_name",
    "refusal",
    "token_check",
    "unauthorised",
]

log = logging.getLogger("selfctx.ui")

_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
BASE_HEADER = "x-selfctx-ui-base"
"""Behind the front of ``selfctx proxy --workers N``: the path the front serves this worker's
pages under (``/_selfctx/ui/w/K``), so that every link of a page leads back to this worker."""
SECURITY_HEADERS = _HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; font-src 'none'; object-src 'none'; base-uri 'none'; "
        b"form-action 'self'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]
_STATIC = {"ui.css": "text/css; charset=utf-8", "ui.js": "text/javascript; charset=utf-8"}
_STATUS = {
    "session_not_found": 404,
    "unknown_object": 404,
    "invalid_input": 400,
    "store_unavailable": 503,
}


def _loopback_address(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _host_name(value: str) -> str:
    """The name of a ``Host`` header, without its port (``[::1]:80`` → ``::1``)."""
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else ""
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class Inspector:
    """The inspector of one context service's store (see the module docstring). :attr:`app` is
    the ASGI application; :attr:`token` the secret of this start."""

    def __init__(
        self, service: ContextService, *, token: str | None = None, behind_front: bool = False
    ) -> None:
        """``behind_front``: this is a worker of ``selfctx proxy --workers N``, reached only
        through the front, which checks the token (the worker's proxy lets nothing in without the
        run's secret) and names the path it serves this worker's pages under
        (:data:`BASE_HEADER`)."""
        self.service = service
        self.token = token or secrets.token_urlsafe(32)
        self.behind_front = behind_front
        self.sessions = Sessions(service)
        self._static = {
            name: resources.files("selfctx.adapters.ui").joinpath("static", name).read_bytes()
            for name in _STATIC
        }
        routes = [
            Route("/", self._page(self._sessions)),
            Route("/static/{name}", self._asset),
            Route("/s/{sid}", self._page(self._timeline)),
            Route("/s/{sid}/r", self._jump("n", "r")),
            Route("/s/{sid}/r/{n:int}", self._page(self._request)),
            Route("/s/{sid}/at", self._jump("seq", "at")),
            Route("/s/{sid}/at/{seq:int}", self._page(self._position)),
            Route("/s/{sid}/search", self._page(self._search)),
            Route("/o/{oid}", self._page(self._object)),
            Route("/o/{oid}/met", self._met),
            Route("/api/sessions", self._api(self._session_list)),
            Route("/api/s/{sid}/requests", self._api(self._requests)),
            Route("/api/content/{oid}", self._api(self._content)),
        ]
        self.app: ASGIApp = _Guard(Starlette(routes=routes), None if behind_front else self.token)
        self._indexing: threading.Thread | None = None
        self._indexing_lock = threading.Lock()

    def index_ahead(self) -> threading.Thread:
        """Bring the search index up to date on a thread of its own, once: when the inspector
        is first opened (not when a proxy starts: it may never be), so that the first search
        does not wait for it (an index kept on disk takes in only what is new)."""
        with self._indexing_lock:
            if self._indexing is None:
                self._indexing = threading.Thread(target=self._catch_up_search, daemon=True)
                self._indexing.start()
            return self._indexing

    def wait_for_search(self, timeout: float | None = None) -> None:
        """Start :meth:`index_ahead` if it has not started, and wait for it (benchmarks)."""
        self.index_ahead().join(timeout)

    def _catch_up_search(self) -> None:
        try:
            self.service.catch_up_search()
        except Exception:  # a search page says why, when it is asked for
            log.warning("catching the search index up failed", exc_info=True)

    def url(self, base: str) -> str:
        """The address to open: the inspector's base URL with this start's token."""
        return f"{base.rstrip('/')}/?token={self.token}"

    # -- plumbing --------------------------------------------------------------------------

    def _base(self, request: Request) -> str:
        if self.behind_front:
            given = request.headers.get(BASE_HEADER, "")
            if given.startswith("/") and all(c.isalnum() or c in "/_-." for c in given):
                return given.rstrip("/")
        return str(request.scope.get("root_path", ""))

    def _page(self, view: Callable[[Request, str], str]) -> Callable[[Request], Response]:
        def endpoint(request: Request) -> Response:
            base = self._base(request)
            self.index_ahead()
            try:
                with COLLECTOR:  # decision 0076
                    return HTMLResponse(view(request, base))
            except (SelfContextError, ValueError) as exc:
                status = _status(exc)
                return HTMLResponse(pages.error_page(base, status, str(exc)), status)

        return endpoint

    def _api(self, view: Callable[[Request], Response]) -> Callable[[Request], Response]:
        def endpoint(request: Request) -> Response:
            try:
                with COLLECTOR:  # decision 0076
                    return view(request)
            except (SelfContextError, ValueError) as exc:
                kind = getattr(exc, "kind", "invalid_input")
                return JSONResponse({"error": {"type": kind, "message": str(exc)}}, _status(exc))

        return endpoint

    def _jump(self, name: str, path: str) -> Callable[[Request], Response]:
        """The "go to" forms: ``?n=12`` → ``r/12``."""

        def endpoint(request: Request) -> Response:
            value = request.query_params.get(name, "")
            base = self._base(request)
            sid = request.path_params["sid"]
            if not value.isdigit() or len(value) > 12:
                message = f"{name} must be a whole number"
                return HTMLResponse(pages.error_page(base, 400, message), 400)
            return RedirectResponse(f"{base}/s/{pages.q(sid)}/{path}/{int(value)}", 303)

        return endpoint

    def _asset(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in self._static:
            return PlainTextResponse("not found", 404)
        return Response(self._static[name], media_type=_STATIC[name])

    # -- pages ---------------------------------------------------------------------------------

    def _sessions(self, request: Request, base: str) -> str:
        query = request.query_params.get("q", "")[:200]
        sort = request.query_params.get("sort", "last")
        descending = request.query_params.get("desc", "1") != "0"
        return pages.sessions_page(base, views.session_rows(self.service), query, sort, descending)

    def _timeline(self, request: Request, base: str) -> str:
        sid = request.path_params["sid"]
        return pages.timeline_page(base, views.timeline_view(self.sessions, sid))

    def _request(self, request: Request, base: str) -> str:
        sid, n = request.path_params["sid"], request.path_params["n"]
        view = views.request_view(self.service, self.sessions, sid, n=n, seq=None)
        return pages.request_page(base, view)

    def _position(self, request: Request, base: str) -> str:
        sid, seq = request.path_params["sid"], request.path_params["seq"]
        view = views.request_view(self.service, self.sessions, sid, n=None, seq=seq)
        return pages.request_page(base, view)

    def _search(self, request: Request, base: str) -> str:
        sid = request.path_params["sid"]
        query = request.query_params.get("q", "")[:1000]
        return pages.search_page(base, views.search_view(self.service, self.sessions, sid, query))

    def _object(self, request: Request, base: str) -> str:
        oid = request.path_params["oid"]
        a, b = _version(request, "a"), _version(request, "b")
        return pages.object_page(base, views.object_view(self.service, self.sessions, oid, a, b))

    def _met(self, request: Request) -> Response:
        """The sessions that met an object: a page, or with ``?part=1`` the list alone (which the
        object's page fetches once it is shown: it may wait for the search index)."""
        base = self._base(request)
        oid = request.path_params["oid"]
        try:
            with COLLECTOR:  # decision 0076
                view = views.met_view(self.service, self.sessions, oid)
        except (SelfContextError, ValueError) as exc:
            status = _status(exc)
            return HTMLResponse(pages.error_page(base, status, str(exc)), status)
        if request.query_params.get("part") == "1":
            return HTMLResponse(pages.met_list(base, view))
        return HTMLResponse(pages.met_page(base, view))

    # -- data ------------------------------------------------------------------------------

    def _session_list(self, request: Request) -> Response:
        """The sessions page's rows as JSON (the front of ``--workers N`` merges the workers')."""
        return JSONResponse([attrs.asdict(row) for row in views.session_rows(self.service)])

    def _requests(self, request: Request) -> Response:
        sid = request.path_params["sid"]
        after = request.query_params.get("after", "0")
        if not after.isdigit() or len(after) > 12:
            raise InvalidInput("after", after, "must be a request number")
        return JSONResponse(views.timeline_json(self.sessions, sid, int(after)))

    def _content(self, request: Request) -> Response:
        """An object's content, byte for byte, as of a transaction (the latest without one)."""
        oid = request.path_params["oid"]
        tx = request.query_params.get("tx")
        if tx is not None and (not tx.isdigit() or len(tx) > 18):
            raise InvalidInput("tx", tx, "must be a transaction id")
        store = self.service.store
        doc = store.get(oid) if tx is None else store.get_as_of(oid, int(tx))
        if doc is None:
            raise InvalidInput("object", oid, "this store holds no version of it then")
        content = doc.get("content")
        if not isinstance(content, str):
            return PlainTextResponse("", 204)
        body = content.encode("utf-8", "surrogatepass")
        return Response(body, media_type="text/plain; charset=utf-8")


def _version(request: Request, name: str) -> int | None:
    value = request.query_params.get(name)
    if value is None:
        return None
    if not value.isdigit() or len(value) > 9:
        raise InvalidInput("version", value, "must be a version number")
    return int(value)


def _status(exc: Exception) -> int:
    if isinstance(exc, StoreUnavailable):
        return 503
    if isinstance(exc, StoreError):
        return 502
    return _STATUS.get(getattr(exc, "kind", ""), 400)


def refusal(method: str, client: str | None, headers: dict[str, str]) -> tuple[int, str] | None:
    """Why a request to the inspector is refused before its token is looked at (status,
    message), or None: ``client`` is the peer's address, ``headers`` lower-case names."""
    if method not in ("GET", "HEAD"):
        return 405, "the inspector only reads"
    if client is not None and not _loopback_address(client):
        return 403, "the inspector answers this machine only"
    host = headers.get("host", "")
    if _host_name(host).lower() not in _LOOPBACK_NAMES:
        return 403, "the inspector answers requests for 127.0.0.1, localhost or [::1] only"
    site = headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return 403, "cross-site requests are refused"
    origin = headers.get("origin")
    if origin is not None and origin != f"http://{host}":
        return 403, "cross-origin requests are refused"
    return None


def cookie_name(port: int) -> str:
    """The cookie that holds the token, one per port (two inspectors on one host keep theirs)."""
    return f"selfctx-ui-{port}"


def token_check(
    token: str, port: int, root: str, path: str, query_string: str, cookie: str
) -> Response | None:
    """The token step of the guard: the answer to give instead of the page (a redirect that
    sets the cookie, given ``?token=``; 401 without a valid token), or None to serve it.
    ``path`` is the path as the browser sent it (the redirect's target), ``root`` the
    inspector's base path (the cookie's)."""
    query = dict(parse_qsl(query_string))
    given = query.get("token")
    if given is not None:
        if not secrets.compare_digest(given.encode(), token.encode()):
            return unauthorised()
        rest = {k: v for k, v in query.items() if k != "token"}
        response = RedirectResponse(path + (f"?{urlencode(rest)}" if rest else ""), 303)
        response.set_cookie(
            cookie_name(port), token, path=f"{root}/", httponly=True, samesite="strict"
        )
        return response
    jar: http.cookies.SimpleCookie = http.cookies.SimpleCookie()
    try:
        jar.load(cookie)
    except http.cookies.CookieError:
        jar.clear()
    held = jar.get(cookie_name(port))
    if held is None or not secrets.compare_digest(held.value.encode(), token.encode()):
        return unauthorised()
    return None


class _Guard:
    """The checks of the module docstring, then the inner application with the headers added
    (``token`` None: a worker behind the front, which checked it)."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.inner = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.inner(scope, receive, send)
            return
        if scope["type"] != "http":
            return  # no websockets: the connection is closed unanswered
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        client = scope.get("client")
        refused = refusal(scope["method"], None if client is None else str(client[0]), headers)
        if refused is not None:
            status, message = refused
            await _answer(PlainTextResponse(message, status), scope, receive, send)
            return
        if self.token is not None:
            answer = token_check(
                self.token,
                (scope.get("server") or ("", 0))[1],
                str(scope.get("root_path", "")) or "",
                scope["path"],
                scope.get("query_string", b"").decode("latin-1"),
                headers.get("cookie", ""),
            )
            if answer is not None:
                await _answer(answer, scope, receive, send)
                return
        await self.inner(scope, receive, _with_headers(send))


def unauthorised() -> Response:
    return PlainTextResponse(
        "This inspector needs the token of its start: open the address `selfctx ui` (or "
        "`selfctx proxy`) printed when it started.",
        401,
    )


def _with_headers(send: Send) -> Send:
    async def sender(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = dict(message)
            message["headers"] = [*message.get("headers", []), *_HEADERS]
        await send(message)

    return sender


async def _answer(response: Response, scope: Scope, receive: Receive, send: Send) -> None:
    await response(scope, receive, _with_headers(send))
