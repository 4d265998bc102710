"""``HarnessSession``: what a harness plugs in — its message list in, a provider request out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from selfctx.adapters.harness.ids import CallIds
from selfctx.adapters.harness.ingest import Ingestor, IngestResult
from selfctx.adapters.harness.messages import FORMATS, parse_messages
from selfctx.adapters.harness.render import render
from selfctx.adapters.harness.tools import (
    ToolAnswer,
    check_prefix,
    handle_context_tool,
    tool_schemas,
)
from selfctx.application.service import ContextService
from selfctx.domain.errors import InvalidInput
from selfctx.domain.session.state import PolicyConfig

__all__ = ["HarnessSession"]


class HarnessSession:
    """One agent session seen from a harness, in one provider format.

    ``ingest`` takes the harness's whole message list every time; ``request`` returns what to
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
        policy: PolicyConfig | None = None,
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
        self.ingestor = Ingestor(
            service, session_id, cwd=cwd, roots=roots, tool_prefix=self.tool_prefix
        )

    @property
    def ids(self) -> CallIds:
        """The session's tool calls: the harness's ids and the object ids they are stored as."""
        return self.ingestor.ids

    def ingest(self, messages: Sequence[Mapping[str, Any]], system: Any = None) -> IngestResult:
        """Record what is new in the harness's list (Anthropic's ``system`` goes separately)."""
        return self.ingestor.ingest(parse_messages(messages, self.format, system))

    def request(self) -> dict[str, Any]:
        """The provider request body parts (``messages``, and ``system`` for Anthropic; ``input``
        for Responses)."""
        context = self.service.assemble(self.session_id)
        return render(context, self.format, tool_prefix=self.tool_prefix)

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
