"""The proxy as one process, or as a front that spreads conversations over worker processes.

The context manager's work for a request (parsing what is new, ingesting, rendering, encoding)
holds Python's interpreter lock: one process serves one request's work at a time, however many
cores the machine has. With ``selfctx proxy --workers N`` the process that listens is a *front*
(``relay.Relay``) that passes each request's bytes, unread but for its head, to one of N worker
processes (each a whole proxy on a port of 127.0.0.1 of its own, reached with a secret of the
run), so N requests are worked on at once.

Each conversation's requests must reach the worker that holds its session (the parsed
conversation, its renderings, its lock). A request's *routing key* is a digest of its credentials
and the conversation hints its headers carry (``x-selfctx-session``, Claude Code's and Codex
CLI's session headers): every request of one conversation carries the same. The front gives a key
it has not seen to the worker holding the fewest keys, and its later requests to that worker, so
that a few conversations spread evenly (a digest taken modulo N did not: the eight conversations
of ``selfctx bench proxy`` all fell on one worker of two). Clients that send no such header
(aider) reach one worker per key. Decision 0058 (and its amendment) and decision 0074 have the
measurements: what the front's hop costs, and when workers pay.
"""

from __future__ import annotations

import collections
import hashlib
from collections.abc import Mapping

from selfctx.adapters.proxy.sessions import CREDENTIAL_HEADERS, SESSION_HEADER

__all__ = ["ROUTING_HEADERS", "Workers", "routing_key"]

ROUTING_HEADERS = (
    *CREDENTIAL_HEADERS,
    SESSION_HEADER,
    "x-claude-code-session-id",
    "session-id",
    "session_id",
    "thread-id",
)
"""What a request's worker is chosen by: the same for every request of one conversation."""


def routing_key(headers: Mapping[str, str]) -> bytes:
    """What picks a request's worker: a digest of its credentials and conversation headers."""
    key = "\x00".join(f"{name}={headers.get(name, '')}" for name in ROUTING_HEADERS)
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


class Workers:
    """Which worker serves each routing key: a new key goes to the worker holding the fewest
    (the first of them on a tie), and stays there. At most ``limit`` keys are remembered, the
    least recently used forgotten first (its conversation, if it comes back, is placed again:
    on a shared store the worker it lands on resumes the session from the store)."""

    def __init__(self, count: int, limit: int = 65536) -> None:
        self.count = count
        self.limit = limit
        self.held = [0] * count
        self._of: collections.OrderedDict[bytes, int] = collections.OrderedDict()

    def of(self, key: bytes) -> int:
        worker = self._of.get(key)
        if worker is not None:
            self._of.move_to_end(key)
            return worker
        worker = min(range(self.count), key=self.held.__getitem__)
        self._of[key] = worker
        self.held[worker] += 1
        if len(self._of) > self.limit:
            _key, forgotten = self._of.popitem(last=False)
            self.held[forgotten] -= 1
        return worker
