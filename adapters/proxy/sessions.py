"""How a request finds its session, and the sessions the proxy holds open.

A model API is stateless: every request carries the whole conversation, and nothing says which
conversation it is. The proxy names the session from, in order:

1. the ``x-selfctx-session`` header, taken as the session id itself (a client that can send a
   header chooses its session);
2. else the conversation id the client sends, where it sends one (Claude Code: the
   ``X-Claude-Code-Session-Id`` header or the ``session_id`` in ``metadata.user_id``; Codex CLI:
   the ``session-id`` header, ``client_metadata.session_id`` or ``prompt_cache_key``), together
   with the conversation's first user message: one client session may run several conversations
   (Claude Code's sub-agents share its session id), and each is its own session here;
3. else the conversation's first user message alone (aider sends no id: two aider runs that open
   with the same first message share a session, and should be told apart with the header).

The id is ``{client id}.{digest}`` (or ``{format}.{digest}`` without a client id), so that
``selfctx sessions`` shows which client a session came from.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import re
from collections.abc import Iterable, Mapping

import attrs

from selfctx.adapters.harness.messages import Message
from selfctx.adapters.harness.render import RenderMemo
from selfctx.adapters.harness.session import HarnessSession
from selfctx.adapters.proxy.encode import BodyEncoder
from selfctx.adapters.proxy.incremental import ParsedConversation

__all__ = ["SESSION_HEADER", "OpenSessions", "ProxySession", "first_user_text", "session_id_for"]

SESSION_HEADER = "x-selfctx-session"
_UNSAFE = re.compile(r"[^A-Za-z0-9._@+=-]+")


def first_user_text(messages: Iterable[Message]) -> str:
    """The text of the first user message (empty if there is none)."""
    for message in messages:
        if message.role == "user":
            return message.text
    return ""


def session_id_for(
    fmt: str, client_key: str | None, first_user: str, header: str | None = None
) -> str:
    """The session a request belongs to (see the module's docstring); ``first_user`` is the
    text of the conversation's first user message."""
    if header:
        return header
    key = "\x00".join([fmt, client_key or "", first_user])
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
    if client_key:
        label = _UNSAFE.sub("-", client_key).strip("-._@+=")[:80] or fmt
        return f"{label}.{digest[:12]}"
    return f"{fmt}.{digest[:16]}"


@attrs.define(eq=False)
class ProxySession:
    """One open session: its harness session, the lock its requests take in turn, the client's
    conversation as last parsed, the renderings of the last managed request and their JSON (so
    that each request costs what is new in it, not the conversation's length)."""

    harness: HarnessSession
    parsed: ParsedConversation
    lock: asyncio.Lock = attrs.field(factory=asyncio.Lock)
    memo: RenderMemo = attrs.field(factory=RenderMemo)
    encoder: BodyEncoder = attrs.field(factory=BodyEncoder)
    """The JSON of the last managed request's messages, reused for those the next one shares."""
    pending: list[Message] = attrs.field(factory=list)
    """Context calls the model made beside calls of the client's own, with the proxy's answers.
    They are recorded after the client's next messages (its own calls' results), so that in the
    session they follow everything the model wrote with them: the model has not seen the answers
    yet, and a policy that collapses what the agent has answered must not take them for seen."""


@attrs.define(eq=False)
class OpenSessions:
    """The sessions the proxy holds open, the least recently used closed beyond ``limit``."""

    limit: int = 256
    open: collections.OrderedDict[str, ProxySession] = attrs.field(factory=collections.OrderedDict)

    def get(self, session_id: str) -> ProxySession | None:
        session = self.open.get(session_id)
        if session is not None:
            self.open.move_to_end(session_id)
        return session

    def add(self, session_id: str, session: ProxySession) -> list[ProxySession]:
        """Hold ``session``; returns the sessions to close to stay within the limit (those not
        in use)."""
        self.open[session_id] = session
        evicted = []
        for key in list(self.open):
            if len(self.open) <= self.limit:
                break
            candidate = self.open[key]
            if key != session_id and not candidate.lock.locked():
                evicted.append(self.open.pop(key))
        return evicted

    def items(self) -> Mapping[str, ProxySession]:
        return self.open
