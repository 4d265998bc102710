"""The inspector behind the front of ``selfctx proxy --workers N`` (decision 0083).

The front (``proxy.relay.Relay``) holds no store: the workers do. For each request to
``/_selfctx/ui`` it asks :class:`FrontInspector` what to do, and this answers with the same checks
as the inspector of one process (``app.refusal``: loopback, the host's name, cross-site requests;
``app.token_check``: the token of this start, then its cookie), then either an answer of its own
or the worker to pass the request to:

* **A shared store** (XTDB: every worker reads the same): one worker answers everything, always
  the first (its caches stay warm); nothing is merged.
* **A store per worker** (in memory): worker K's pages are served under ``/_selfctx/ui/w/K/``,
  and worker K is told so (``app.BASE_HEADER``), so that every link of its pages, the timeline's
  live updates and an output's bytes lead back to it. The sessions list at ``/_selfctx/ui/`` is
  the front's own page, made of every worker's list (``/api/sessions``), each session linking to
  its worker. A page asked for without a worker (an address kept from another start) is looked
  up: a session in the workers' lists, anything else by asking each worker in turn; the first
  that knows it is where the browser is sent.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import unquote

import attrs
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response

from selfctx.adapters.ui import pages
from selfctx.adapters.ui.app import BASE_HEADER, SECURITY_HEADERS, refusal, token_check
from selfctx.adapters.ui.views import SessionRow

__all__ = ["FrontAnswer", "FrontForward", "FrontInspector"]

Fetch = Callable[[int, str], Awaitable[tuple[int, bytes]]]
_WORKER = re.compile(r"/w/([0-9]{1,4})(/.*)?")
_ROW_FIELDS = frozenset(a.name for a in attrs.fields(SessionRow)) - {"home"}


@attrs.frozen
class FrontAnswer:
    """An answer the front gives itself (``relay.UiAnswer``)."""

    status: int
    headers: Sequence[tuple[bytes, bytes]]
    body: bytes


@attrs.frozen
class FrontForward:
    """A request the front passes on (``relay.UiForward``)."""

    worker: int
    target: str
    headers: Sequence[tuple[str, str]] = ()


def _answer(response: Response) -> FrontAnswer:
    return FrontAnswer(
        response.status_code, [*response.raw_headers, *SECURITY_HEADERS], bytes(response.body)
    )


class FrontInspector:
    """What the front does with the inspector's requests, for ``workers`` workers; ``shared``:
    they read one store. ``root`` is where the inspector is served; ``token`` this start's."""

    def __init__(
        self, workers: int, *, shared: bool, root: str = "/_selfctx/ui", token: str | None = None
    ) -> None:
        import secrets

        self.workers = workers
        self.shared = shared
        self.root = root.rstrip("/")
        self.token = token or secrets.token_urlsafe(32)

    def url(self, base: str) -> str:
        """The address to open: the front's base URL, the inspector's path, this start's token."""
        return f"{base.rstrip('/')}{self.root}/?token={self.token}"

    async def __call__(
        self,
        method: str,
        path: str,
        query: str,
        headers: Mapping[str, str],
        client: str | None,
        port: int,
        fetch: Fetch,
    ) -> FrontAnswer | FrontForward:
        refused = refusal(method, client, dict(headers))
        if refused is not None:
            return _answer(PlainTextResponse(refused[1], refused[0]))
        if path == self.root:
            return _answer(RedirectResponse(f"{self.root}/" + (f"?{query}" if query else ""), 308))
        denied = token_check(self.token, port, self.root, path, query, headers.get("cookie", ""))
        if denied is not None:
            return _answer(denied)
        target = path + (f"?{query}" if query else "")
        if self.shared or self.workers == 1:
            return FrontForward(0, target)
        rest = path[len(self.root) :]
        chosen = _WORKER.fullmatch(rest)
        if chosen is not None:
            worker = int(chosen.group(1))
            if worker >= self.workers:
                return self._error(
                    404, f"this proxy has {self.workers} workers, 0 to {self.workers - 1}"
                )
            if chosen.group(2) in (None, "/"):  # its list is part of the front's
                return _answer(RedirectResponse(f"{self.root}/", 303))
            inner = self.root + (chosen.group(2) or "/") + (f"?{query}" if query else "")
            return FrontForward(worker, inner, ((BASE_HEADER, f"{self.root}/w/{worker}"),))
        if rest == "/":
            return await self._sessions(query, fetch)
        if rest.startswith("/static/"):
            return FrontForward(0, target)
        return await self._find(rest, query, target, fetch)

    # -- pages of the front's own ------------------------------------------------------------

    async def _rows(self, fetch: Fetch) -> list[list[SessionRow] | None]:
        """Every worker's sessions (None for a worker that did not answer)."""
        answers = await asyncio.gather(
            *(fetch(k, f"{self.root}/api/sessions") for k in range(self.workers))
        )
        lists: list[list[SessionRow] | None] = []
        for k, (status, body) in enumerate(answers):
            rows = None
            if status == 200:
                try:
                    rows = [self._row(k, item) for item in json.loads(body)]
                except (ValueError, TypeError, KeyError):
                    rows = None
            lists.append(rows)
        return lists

    def _row(self, worker: int, item: Any) -> SessionRow:
        fields = {name: item[name] for name in _ROW_FIELDS}
        return SessionRow(**fields, home=f"{self.root}/w/{worker}")

    async def _sessions(self, query: str, fetch: Fetch) -> FrontAnswer:
        from urllib.parse import parse_qsl

        lists = await self._rows(fetch)
        rows = [row for rows in lists if rows is not None for row in rows]
        params = dict(parse_qsl(query))
        page = await asyncio.to_thread(
            pages.sessions_page,
            self.root,
            rows,
            params.get("q", "")[:200],
            params.get("sort", "last"),
            params.get("desc", "1") != "0",
        )
        missing = [str(k) for k, rows in enumerate(lists) if rows is None]
        if missing:  # the others' sessions are still worth showing
            note = (
                f'<p class="bad">Worker {", ".join(missing)} of this proxy did not answer: '
                "its sessions are not listed.</p>"
            )
            page = page.replace("<h1>Sessions</h1>", f"<h1>Sessions</h1>{note}", 1)
        return _answer(HTMLResponse(page, 200 if len(missing) < self.workers else 502))

    async def _find(self, rest: str, query: str, target: str, fetch: Fetch) -> FrontAnswer:
        """A page asked for without its worker: sent on to the first worker that knows it."""
        suffix = rest + (f"?{query}" if query else "")
        if rest.startswith("/s/"):
            session_id = unquote(rest[3:].split("/", 1)[0])
            for k, rows in enumerate(await self._rows(fetch)):
                if rows is not None and any(r.session_id == session_id for r in rows):
                    return self._redirect(k, suffix)
            return self._error(404, f"no worker of this proxy holds the session {session_id}")
        for k in range(self.workers):
            status, _ = await fetch(k, target)
            if status != 404 and status < 500:
                return self._redirect(k, suffix)
        return self._error(404, "no worker of this proxy knows this page")

    def _redirect(self, worker: int, suffix: str) -> FrontAnswer:
        return _answer(RedirectResponse(f"{self.root}/w/{worker}{suffix}", 307))

    def _error(self, status: int, message: str) -> FrontAnswer:
        return _answer(HTMLResponse(pages.error_page(self.root, status, message), status))
