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

import hashlib
from collections.abc import Mapping, Sequence

from starlette.requests import Request

from selfctx.adapters.proxy.app import error_body
from selfctx.adapters.proxy.guard import LOOPBACK_NAMES, TOKEN_HEADER, Guard
from selfctx.adapters.proxy.passthrough import PassThrough
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


class Front(PassThrough):
    """The listening process of a proxy with workers: :attr:`app` forwards each request to its
    worker (``workers``: their base URLs) with the run's ``secret`` in ``x-selfctx-token``,
    behind the same checks as a proxy (``guard.Guard``)."""

    def __init__(
        self,
        workers: Sequence[str],
        secret: str,
        *,
        token: str | None = None,
        hosts: frozenset[str] | None = LOOPBACK_NAMES,
    ) -> None:
        super().__init__("")
        self.workers = list(workers)
        self.secret = secret
        self.app = Guard(self.app, error_body, token=token, hosts=hosts)

    def _target(self, request: Request, body: bytes) -> tuple[str, dict[str, str]]:
        worker = self.workers[worker_for(request.headers, len(self.workers))]
        return worker, {TOKEN_HEADER: self.secret}
