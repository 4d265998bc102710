"""What the proxy refuses before any route sees a request: browser-shaped requests (as the XTDB
front does, decision 0027), a foreign ``Host`` (DNS rebinding), paths that would leave an
upstream's prefix once decoded, and, when the proxy has a token, requests without it.

A model API client (an agent) sends no ``Origin``, no ``Sec-Fetch-Site`` other than ``none``, and
JSON bodies; a web page the user's browser opens can send a ``text/plain`` POST to 127.0.0.1 with
a foreign ``Origin``, or reach it under its own host name after a DNS rebinding. Such a request
would reach the upstream with the proxy's user's network position and be recorded into sessions.
The proxy's own pages (``/_selfctx/...``) may be used by a browser, from the proxy's own origin.

Every refusal is an error in the shape of the API the path belongs to (Anthropic's for
``/v1/messages...``, OpenAI's otherwise), with no detail of the request echoed.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Collection, Mapping
from typing import Any

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["LOOPBACK_NAMES", "TOKEN_HEADER", "Guard", "authenticated", "refusal"]

TOKEN_HEADER = "x-selfctx-token"
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
OWN_PREFIX = "/_selfctx/"
"""Paths the proxy answers itself (health, pages): a browser on the proxy's origin may use them."""
_JSON_POSTS = ("/v1/",)
_ENCODED = (b"%2f", b"%2e", b"%5c", b"%00")

ErrorShape = Callable[[str, int, str], dict[str, Any]]
"""(path, status, message) -> an error body in the shape of the path's API."""


def _headers(scope: Scope) -> dict[str, str]:
    return {
        name.decode("latin-1").lower(): value.decode("latin-1")
        for name, value in scope.get("headers", ())
    }


def _hostname(host: str) -> str:
    if host.startswith("["):
        return host[: host.find("]") + 1].lower()
    return host.rsplit(":", 1)[0].lower() if host.count(":") == 1 else host.lower()


def refusal(
    method: str,
    path: str,
    raw_path: bytes,
    headers: Mapping[str, str],
    hosts: Collection[str] | None = LOOPBACK_NAMES,
) -> tuple[int, str] | None:
    """Why a request is refused before any route sees it (status, message), or None.

    ``path`` is the decoded path, ``raw_path`` the path as sent (without the query),
    ``headers`` lower-case names; ``hosts`` the names the proxy answers to (None: any)."""
    own = path.startswith(OWN_PREFIX)
    host = headers.get("host", "")
    if hosts is not None and _hostname(host) not in hosts:
        return 403, "this proxy answers only to requests for its own address"
    origin = headers.get("origin")
    fetch_site = headers.get("sec-fetch-site", "none")
    if own:
        if origin is not None and origin.partition("://")[2] != host:
            return 403, "cross-origin requests are refused"
        if fetch_site not in ("none", "same-origin"):
            return 403, "cross-site requests are refused"
    else:
        if origin is not None or fetch_site != "none":
            return 403, "requests from web pages are refused (this is a model API for agents)"
    raw = raw_path.lower()
    if any(code in raw for code in _ENCODED) or any(
        part in (".", "..") for part in path.split("/")
    ):
        return 400, "the path may not hold encoded slashes or dots, nor . or .. segments"
    if method == "POST" and path.startswith(_JSON_POSTS):
        kind = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if kind != "application/json":
            return 415, "the body must be application/json"
    return None


def authenticated(
    path: str, headers: Mapping[str, str], token: str
) -> tuple[str | None, tuple[int, str] | None]:
    """The proxy's token, from the ``x-selfctx-token`` header or a path that starts with
    ``/t/TOKEN`` (for clients that take only a base URL): the path once that prefix is taken
    off (None if it had none), and the refusal, if the token is missing or wrong."""
    given = None
    rest = None
    if path.startswith("/t/"):
        given, _, rest = path[3:].partition("/")
        rest = "/" + rest
    else:
        given = headers.get(TOKEN_HEADER)
    if given is None or not secrets.compare_digest(given.encode(), token.encode()):
        return rest, (401, "missing or wrong proxy token")
    return rest, None


class Guard:
    """The ASGI middleware in front of the proxy's application (:func:`refusal`,
    :func:`authenticated`)."""

    def __init__(
        self,
        app: ASGIApp,
        error: ErrorShape,
        *,
        token: str | None = None,
        hosts: Collection[str] | None = LOOPBACK_NAMES,
    ) -> None:
        self.inner = app
        self.error = error
        self.token = token
        self.hosts = None if hosts is None else frozenset(h.lower() for h in hosts)
        """Host names the proxy answers to (None: any, for a proxy served beyond this machine,
        which needs a token)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        path: str = scope["path"]
        headers = _headers(scope)
        raw_path = bytes(scope.get("raw_path") or path.encode())
        refused = refusal(scope["method"], path, raw_path, headers, self.hosts)
        if refused is None and self.token is not None:
            rest, refused = authenticated(path, headers, self.token)
            if rest is not None:
                scope = dict(scope, path=rest, raw_path=rest.encode())
        if refused is not None:
            status, message = refused
            body = self.error(scope["path"], status, message)
            await JSONResponse(body, status)(scope, receive, send)
            return
        await self.inner(scope, receive, send)
