"""``HarnessSession``: what a harness plugs in — its message list in, a provider request out."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from selfctx.adapters.harness.encode import ascii_dumps
from selfctx.adapters.harness.ids import CallIds
from selfctx.adapters.harness.incremental import (
    Known,
    ListDigests,
    NeedWhole,
    item_digest,
    parse_items,
    parse_system,
)
from selfctx.adapters.harness.ingest import Ingestor, IngestResult
from selfctx.adapters.harness.messages import (
    FORMATS,
    MalformedMessage,
    parse_messages,
)
from selfctx.adapters.harness.request import Encoded, RequestCache, text_chars
from selfctx.adapters.harness.text_actions import (
    TextActions,
    observations,
    to_text,
    to_tool_calls,
)
from selfctx.adapters.harness.tools import (
    ToolAnswer,
    check_prefix,
    handle_context_tool,
    tool_schemas,
)
from selfctx.application.cache_budget import ENTRY_BYTES
from selfctx.application.service import ContextService
from selfctx.domain.errors import InvalidInput, SelfContextError
from selfctx.domain.session.state import PolicyConfig

__all__ = ["MAX_NESTING", "DigestMismatch", "HarnessSession"]

log = logging.getLogger("selfctx.harness")

MAX_NESTING = 98
"""Deepest nesting of arrays and objects in a message (the JSON-RPC server allows 100 levels in
its parameters, two of which are the parameters and the list)."""


class DigestMismatch(InvalidInput):
    """An append names a chat the session does not hold: nothing was recorded; send the whole
    list (``ingest`` with every message), which the cursor reconciles."""

    kind = "digest_mismatch"

    def __init__(self, given: str, digest: str, length: int) -> None:
        self.given = given
        self.digest = digest
        """The digest of the list the session holds."""
        self.length = length
        """How many messages that chat has (the list without its leading system messages)."""
        why = (
            f"no part of the chat the session holds ({length} messages, digest {digest!r}) "
            "has this digest"
        )
        super().__init__("extends", given, f"{why}; send the whole list instead")


class HarnessSession:
    """One agent session seen from a harness, in one provider format.

    ``ingest`` takes the harness's whole message list every time (or ``append`` its new
    messages with the digest of the list they extend); ``request`` returns what to
    send to the provider instead; ``tools`` and ``handle`` give the model its context tools,
    named with ``tool_prefix`` (``context_`` makes ``context_activate``, ...: a harness with a
    tool of its own called ``activate`` keeps it).
    """

    def __init__(
        self,
        service: ContextService,
        session_id: str,
        fmt: str = "openai",
        *,
        system_prompt: str = "",
        cwd: str = "/",
        roots: Sequence[str] = ("/",),
        policy: PolicyConfig | str | None = None,
        tool_prefix: str = "",
    ) -> None:
        if fmt not in FORMATS:
            raise InvalidInput("format", fmt, f"use one of {list(FORMATS)}")
        self.tool_prefix = check_prefix(tool_prefix)
        self.service = service
        self.session_id = session_id
        self.format = fmt
        self.resumed = service.open_session(session_id, system_prompt, policy=policy)
        """What reconciliation found if the session was resumed; None if it was started."""
        self.text_actions = TextActions()
        """The calls made for observations that arrived as user messages."""
        self.ingestor = Ingestor(
            service, session_id, cwd=cwd, roots=roots, tool_prefix=self.tool_prefix
        )
        self._digests = ListDigests(fmt)
        """What is remembered of the last whole list (digests of its items, no text)."""
        self._requests = RequestCache(
            fmt,
            tool_prefix=self.tool_prefix,
            values=False,
            rendering_budget=service.settings.rendering_budget,
        )
        """The last request's rendering, which the next one renders on from where it changed:
        its text only, until :meth:`request` first asks for the values (decision 0092)."""

    def prepare(self) -> None:
        """Render, count and encode the session's context as it is, deciding nothing, so that
        the next :meth:`encoded_request` does again only what changed since (decision 0110): a
        resumed session's first request would otherwise render every message of the chat. For
        a caller whose requests are this session's (the stdio server), not one with a request
        cache of its own (the proxy), which would keep the encoded items for nothing."""
        try:
            context = self.service.prepare(self.session_id)
        except SelfContextError as exc:  # the store, say: the first request does it, or says so
            log.info("session %s: its first request not prepared: %s", self.session_id, exc)
            return
        if self.format != "openai" or not self.text_actions:  # else shaped at every request
            self._requests.render(context)
            self._requests.settle()

    def cache_bytes(self) -> dict[str, int]:
        """Bytes each cache of the session holds as the cache budget counts them (the
        service's, and this request cache's renderings; decision 0169)."""
        sizes = self.service.cache_bytes(self.session_id)
        sizes["renderings"] = self._requests.renderings * ENTRY_BYTES["renderings"]
        return sizes

    @property
    def ids(self) -> CallIds:
        """The session's tool calls: the harness's ids and the object ids they are stored as."""
        return self.ingestor.ids

    def ingest(
        self,
        messages: Sequence[Any],
        system: Any = None,
        fmt: str | None = None,
        *,
        known: Known | None = None,
    ) -> IngestResult:
        """Record what is new in the harness's whole list (Anthropic's ``system`` goes
        separately). Only the messages that differ from the list given last time are parsed and
        looked at (``selfctx.adapters.harness.incremental``).

        ``known``: the list's first ``known.count`` items are those of the list remembered
        (:attr:`list_version`), given as placeholders, not read again; raises ``NeedWhole``,
        having changed nothing, when they must be read after all."""
        fmt = self._format(fmt)
        count = 0
        if known is not None:
            count = known.count
            if (
                known.version != self._digests.version
                or self._digests.fmt != fmt
                or not isinstance(messages, list)
                or (fmt == "openai" and self.text_actions)
            ):
                raise NeedWhole()
        if fmt == "openai" and isinstance(messages, list):
            # observations that arrive as user messages (text-action harnesses: mini-swe-agent's
            # text mode, SWE-agent 0.x, aider's /run) are tool outputs (harness.text_actions)
            if count:
                # none among the known items (none was found in them before); one among the new
                # ones depends on the item before it, the last known one (kept as read)
                assert known is not None
                window = [known.last, *itertools.islice(messages, count, None)]
                if observations(window, count - 1):
                    raise NeedWhole()
            else:
                messages, _ = to_tool_calls(messages, self.text_actions)
        if self._digests.fmt != fmt:
            self._digests = ListDigests(fmt)
        if not isinstance(messages, list):  # a Responses input given as a string, or a mistake
            self._digests.forget()
            return self.ingestor.ingest_from(0, parse_messages(messages, fmt, system))
        split = self._digests.split(messages, system, MAX_NESTING, count)
        if self.ingestor.needs_whole(split.start, split.tail):  # the leading system messages
            if count:
                raise NeedWhole()
            self._digests.forget()
            split = self._digests.split(messages, system, MAX_NESTING)
        try:
            result = self.ingestor.ingest_from(split.start, split.tail)
        except BaseException:
            self._digests.forget()
            raise
        self._digests.accept(split)
        return result

    @property
    def list_version(self) -> int:
        """The version of the whole list remembered (``ListDigests.version``)."""
        return self._digests.version

    def append(
        self,
        messages: Sequence[Any],
        extends: str,
        system: Any = None,
        fmt: str | None = None,
    ) -> IngestResult:
        """Record ``messages``, the harness's new messages after the chat whose digest is
        ``extends`` (a ``digest`` an earlier call returned): the append form, whose cost does
        not depend on how long the session is. ``system``, when given, is the system prompt
        (written only if it changed). Raises :class:`DigestMismatch` (nothing recorded) when
        the session holds no such chat; the harness then sends its whole list."""
        fmt = self._format(fmt)
        cursor = self.ingestor.cursor
        start = cursor.position_of(extends) if isinstance(extends, str) else None
        if start is None:
            raise DigestMismatch(extends, cursor.digest(), len(cursor.view))
        if not isinstance(messages, list):
            raise MalformedMessage(-1, "the new messages must be a list")
        if fmt == "openai":  # an action and its observation arrive in one append
            messages, _ = to_tool_calls(messages, self.text_actions, start=start)
        digests = [item_digest(item, MAX_NESTING) for item in messages]
        prompt = None
        if system is not None:
            item_digest(system, MAX_NESTING)
            prompt = parse_system(fmt, system)
        tail, ends, counts = parse_items(fmt, messages)
        if start == 0:  # the list from its start: its leading system messages are the prompt
            whole = [*(prompt or ()), *tail]
            lead = 0
            while lead < len(whole) and whole[lead].role == "system":
                lead += 1
            prompt, tail = whole[:lead], whole[lead:]
        known = (
            system is None
            and self._digests.fmt == fmt
            and self._digests.messages == self.ingestor.lead + start
            and (start == 0 or bool(self._digests.items))
        )
        try:
            result = self.ingestor.ingest_chat(start, tail, prompt=prompt)
        except BaseException:
            self._digests.forget()
            raise
        if known:
            self._digests.append(messages, digests, ends, counts)
        else:
            self._digests.forget()
        return result

    def digest(self) -> str:
        """The digest of the list the session holds (what an append names)."""
        return self.ingestor.digest()

    def _format(self, fmt: str | None) -> str:
        fmt = self.format if fmt is None else fmt
        if fmt not in FORMATS:
            raise InvalidInput("format", fmt, f"use one of {list(FORMATS)}")
        return fmt

    def request(self) -> dict[str, Any]:
        """The provider request body parts (``messages``, and ``system`` for Anthropic; ``input``
        for Responses), in the harness's own message shapes. Values are shared with later
        requests: do not change them in place."""
        self._requests.keep_values()
        return self.encoded_request().body

    def encoded_request(self) -> Encoded:
        """:meth:`request`, with its JSON text and figures; only what changed in the chat since
        the last request is rendered and encoded again (a text-action harness's request is given
        back its shapes, and encoded, whole)."""
        if self.format == "openai" and self.text_actions:
            self._requests.keep_values()  # shaped below, at every request
        encoded = self._requests.render(self.service.assemble(self.session_id))
        if self.format != "openai" or not self.text_actions:
            return encoded
        body = self.shaped(encoded.body)
        return Encoded(body, ascii_dumps(body), text_chars(body), len(body["messages"]))

    def shaped(self, request: dict[str, Any]) -> dict[str, Any]:
        """A rendered request with text actions given back their harness's shapes: the
        assistant's command stays in its text, the output is a user message again."""
        if self.format != "openai" or not self.text_actions:
            return request
        messages = to_text(request["messages"], self.text_actions, self.ids.provider_id)
        return {**request, "messages": messages}

    def tools(self) -> list[dict[str, Any]]:
        """Schemas of the context tools, to add to the harness's own tools."""
        return tool_schemas(self.format, self.tool_prefix)

    def handle(self, name: str, arguments: Mapping[str, Any]) -> ToolAnswer:
        """Run a context tool call the model made (``name`` as called, with the prefix; its
        ``id`` may be any id the model was shown, or the harness's id of a tool call)."""
        ref = arguments.get("id") if isinstance(arguments, Mapping) else None
        if isinstance(ref, str):
            arguments = {**arguments, "id": self.ids.resolve(ref)}
        return handle_context_tool(self.service, self.session_id, name, arguments, self.tool_prefix)
