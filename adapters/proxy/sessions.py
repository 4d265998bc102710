"""How a request finds its session, and the sessions the proxy holds open
(decision 0037, as amended by decision 0048).

A model API is stateless: every request carries the whole conversation, and nothing says which
conversation it is. A request's **base** is named from, in order:

1. the ``x-selfctx-session`` header, taken as the session id itself (a client that can send a
   header chooses its session);
2. else the conversation id the client sends, where it sends one (Claude Code: the
   ``X-Claude-Code-Session-Id`` header or the ``session_id`` in ``metadata.user_id``; Codex CLI:
   the ``session-id`` header, ``client_metadata.session_id`` or ``prompt_cache_key``), with the
   conversation's first user message: one client session may run several conversations (Claude
   Code's sub-agents share its session id);
3. else the conversation's first user message alone (aider sends no id).

The credentials the request carries (its API key, as a digest: never the key itself) are part of
every base: two users never share one, whatever else they send alike. The id is
``{client id}.{digest}`` (or ``{format}.{digest}``), so that ``selfctx sessions`` shows which
client a session came from.

A base may hold several conversations (two aider runs open with the same canned message; a user
who rewinds and edits an earlier message starts a branch). A request **joins** a session of its
base only if it continues what that session was last sent: its items extend the session's last
request (or repeat it: a retry), or it carries the answer the session's last request got
(clients re-send the model's answers; some rebuild earlier messages, so the items need not extend
as they are). Otherwise it is another conversation: a new session, ``{base}-2``, ``{base}-3``, ...
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from selfctx.adapters.harness.messages import Message
from selfctx.adapters.harness.request import RequestCache
from selfctx.adapters.harness.session import HarnessSession
from selfctx.adapters.proxy.incremental import ParsedConversation, common_prefix
from selfctx.domain.rendering import RenderedMessage
from selfctx.domain.session.state import SessionState

__all__ = [
    "SESSION_HEADER",
    "OpenSessions",
    "ProxySession",
    "answer_marks",
    "credential_digest",
    "credential_values",
    "first_user_text",
    "session_id_for",
]

SESSION_HEADER = "x-selfctx-session"
_UNSAFE = re.compile(r"[^A-Za-z0-9._@+=-]+")
CREDENTIAL_HEADERS = ("x-api-key", "authorization", "api-key", "x-goog-api-key")
"""Headers that carry a model API's credentials."""
CREDENTIAL_PARAMETERS = frozenset({"key", "api-key", "api_key", "apikey", "access_token", "token"})
"""Query-string parameters that carry one (some gateways take the key there)."""


def credential_values(
    headers: Mapping[str, str], query: Iterable[tuple[str, str]] = ()
) -> tuple[str, ...]:
    """The credentials a request carries, as given (to keep them out of what the proxy writes),
    a bearer token also without its scheme."""
    values = [headers[name] for name in CREDENTIAL_HEADERS if headers.get(name)]
    values += [v.split(" ", 1)[1] for v in values if v.lower().startswith("bearer ")]
    values += [v for k, v in query if k.lower() in CREDENTIAL_PARAMETERS]
    return tuple(values)


def credential_digest(headers: Mapping[str, str], query: Iterable[tuple[str, str]] = ()) -> str:
    """A digest of the credentials a request carries ("" without any): the same for the same
    key, and no key can be read back from it."""
    parts = [f"{name}={headers[name]}" for name in CREDENTIAL_HEADERS if headers.get(name)]
    parts += sorted(f"?{k}={v}" for k, v in query if k.lower() in CREDENTIAL_PARAMETERS)
    if not parts:
        return ""
    text = "\x00".join(["selfctx credential", *parts])
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def first_user_text(messages: Iterable[Message]) -> str:
    """The text of the first user message (empty if there is none)."""
    for message in messages:
        if message.role == "user":
            return message.text
    return ""


def session_id_for(
    fmt: str,
    client_key: str | None,
    first_user: str,
    header: str | None = None,
    credential: str = "",
) -> str:
    """The base a request belongs to (see the module's docstring); ``first_user`` is the text
    of the conversation's first user message, ``credential`` the digest of its credentials."""
    if header:
        return header
    key = "\x00".join([fmt, client_key or "", first_user, credential])
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
    if client_key:
        label = _UNSAFE.sub("-", client_key).strip("-._@+=")[:80] or fmt
        return f"{label}.{digest[:12]}"
    return f"{fmt}.{digest[:16]}"


def answer_marks(messages: Iterable[Message]) -> frozenset[str]:
    """What identifies the model's answers among ``messages`` when a client sends them back: the
    ids of their tool calls, or the text of an answer without calls."""
    marks: set[str] = set()
    for message in messages:
        if message.role != "assistant":
            continue
        if message.tool_calls:
            marks.update(f"call:{call.id}" for call in message.tool_calls)
        elif message.text.strip():
            digest = hashlib.sha256(message.text.strip().encode("utf-8", "surrogatepass"))
            marks.add("text:" + digest.hexdigest())
    return frozenset(marks)


KEEP_PRICE = 0.25 / (0.25 + 0.9)
"""Above this share of outputs still shown in full one request later, a cache mark after them
pays (decision 0047): an output that stays is billed 1.0 uncached and 1.25 written without a
mark after it, 1.25 and 0.1 with one (0.9 saved); one that collapses 1.0 without, 1.25 with
(0.25 lost). Derived from Anthropic's prices, not measured on sessions."""

MAX_AGE = 4
"""Outputs shown in full for this many requests or more are counted together."""


@attrs.define
class ShownOutputs:
    """How long this session's tool outputs stay shown in full, by age (the requests an output
    has been shown in full before): of the last few outputs of each age, how many were still
    shown one request later. The policy decides what collapses; this only watches what it did,
    so that the conversation's cache mark goes before the first output likely to be collapsed
    at the next request, where that request's prefix will change (decision 0047)."""

    ages: dict[str, int] = attrs.field(factory=dict)
    """The outputs shown in full in the last request, and their ages."""
    stayed: list[collections.deque[bool]] = attrs.field(
        factory=lambda: [collections.deque(maxlen=8) for _ in range(MAX_AGE + 1)]
    )

    def saw(self, chat: Sequence[RenderedMessage], state: SessionState) -> None:
        """Note what became of the outputs the last request showed; remember this one's."""
        active = state.active
        for object_id, age in self.ages.items():
            self.stayed[min(age, MAX_AGE)].append(object_id in active)
        # the outputs still shown grow a request older; the new ones are the chat's last tool
        # messages (a look at the tail, not at the whole chat)
        ages = {shown: age + 1 for shown, age in self.ages.items() if shown in active}
        newest: list[str] = []
        for message in reversed(chat):
            if message.role != "tool":
                break
            shown = message.toolcall_id
            if shown is not None and shown in active and shown not in ages:
                newest.append(shown)
        ages.update(dict.fromkeys(reversed(newest), 0))
        self.ages = ages

    def kept_newest(self) -> bool:
        """Whether the newest outputs mostly stay one request more: then a mark after them
        pays (``KEEP_PRICE``); the policies collapse what the agent answered, so until this
        session shows otherwise, they do not."""
        seen = self.stayed[0]
        return bool(seen) and sum(seen) / len(seen) > KEEP_PRICE

    def first_at_risk(self) -> str | None:
        """The earliest output of the last request (in the prompt's order) that is not the
        newest and of an age at which this session has collapsed outputs lately: where the next
        request's prefix may change first. A mark before it costs nothing (its entry is written
        with the rest of the prefix) and is read whenever the prefix breaks there or later."""
        newest = max(self.ages.values(), default=0) == 0
        for object_id, age in self.ages.items():  # in the chat's order
            if age == 0 and newest:
                return None  # the newest outputs: the last assistant block's mark is before them
            if not all(self.stayed[min(age, MAX_AGE)]):
                return object_id
        return None

    def marks(self, foreseen: frozenset[str] | None) -> tuple[frozenset[str], bool]:
        """Where the conversation's cache marks go: the outputs before the first of which (in
        the prompt) a mark goes, and whether the last block gets one. ``foreseen`` is what the
        policy expects the next request to collapse (``ContextService.foreseen``): a mark before
        the first of them is read by that request, one after it is not, so the last block is
        marked only when none is foreseen to go and the newest outputs have mostly stayed lately
        (a newer output may still displace the newest, which no forecast sees:
        ``kept_newest``). The history's output at risk gets a mark before it too (it costs
        nothing). Without a forecast, the history decides alone (``first_at_risk``,
        ``kept_newest``)."""
        risky = self.first_at_risk()
        lately = frozenset(() if risky is None else (risky,))
        if foreseen is None:
            return lately, self.kept_newest()
        return foreseen | lately, not foreseen and self.kept_newest()


@attrs.define(eq=False)
class ProxySession:
    """One open session: its harness session, the lock its requests take in turn, the client's
    conversation as last parsed and the renderings of the last managed request (so that each
    request costs what is new in it, not the conversation's length)."""

    harness: HarnessSession
    parsed: ParsedConversation
    base: str = ""
    """The base the session belongs to (its id, or its id without a branch number)."""
    owner: str = ""
    """The digest of the credentials of the requests it serves."""
    lock: asyncio.Lock = attrs.field(factory=asyncio.Lock)
    requests: RequestCache | None = None
    """The session's managed requests, each rendered from where the last one's chat changed
    (made by the first request, in its format)."""
    pending: list[Message] = attrs.field(factory=list)
    """Context calls the model made beside calls of the client's own, with the proxy's answers.
    They are recorded after the client's next messages (its own calls' results), so that in the
    session they follow everything the model wrote with them: the model has not seen the answers
    yet, and a policy that collapses what the agent has answered must not take them for seen."""
    claimed: Sequence[Any] = ()
    """The items of the last request that joined the session (set when it joins)."""
    answer: frozenset[str] = frozenset()
    """:func:`answer_marks` of the answer the client got to its last request."""
    outputs: ShownOutputs = attrs.field(factory=ShownOutputs)
    sent: set[tuple[str, str]] = attrs.field(factory=set)
    """Every text message the client has sent in this session, as (role, text): what the
    session shows of them is what the client's latest request still holds (``shown_once``)."""
    withdrawn: bool = False
    """The client has stopped sending a text message the session holds (so ``shown_once`` is
    needed from now on)."""
    same: tuple[Any, int] | None = None
    """The previous request's items and how many of them the joining request starts with, as
    found when it joined (so they are not compared twice)."""

    @property
    def session_id(self) -> str:
        return self.harness.session_id


def continues(session: ProxySession, items: Sequence[Any]) -> bool:
    """The request's items extend the session's last request (or repeat it: a retry). A
    shorter list is not taken for the same conversation: a new conversation that opens like an
    old one is a prefix of it."""
    claimed = session.claimed
    if len(items) < len(claimed) or common_prefix(claimed, items) != len(claimed):
        return False
    session.same = (claimed, len(claimed))
    return True


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

    def of_base(self, base: str, owner: str) -> list[ProxySession]:
        """The open sessions of ``base`` and ``owner``, the most recently used first."""
        return [s for s in reversed(self.open.values()) if s.base == base and s.owner == owner]

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
