"""What the proxy records of each model request it sends (decision 0055): who sent it, the
model, and the client's own request's size, beside what the context service measures itself."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from selfctx.application.requests import RequestFacts
from selfctx.application.service import ContextService
from selfctx.domain.errors import SelfContextError
from selfctx.domain.rendering import AssembledContext

__all__ = ["client_name", "record_request"]

log = logging.getLogger("selfctx.proxy")


def client_name(headers: Mapping[str, str]) -> str | None:
    """The client's name as its User-Agent gives it first (``claude-cli/2.0.14``)."""
    agent = next((v for k, v in headers.items() if k.lower() == "user-agent"), "")
    return agent.split(" ", 1)[0] or None


def record_request(
    service: ContextService,
    session_id: str,
    context: AssembledContext,
    *,
    api: str,
    body: Mapping[str, Any],
    headers: Mapping[str, str],
    naive_tokens: int,
    naive_shared: int,
    round: int,
    note: str | None = None,
) -> None:
    """Record the request about to be sent (``round`` 0: the one the client's call caused; then
    the proxy's own context-tool rounds, which a client talking to the model directly would not
    have made). ``note``: what the proxy changed between ``context`` and what it sent, if
    anything. A record that cannot be written is logged, and the request goes out all the
    same."""
    first = round == 0
    facts = RequestFacts(
        api=api,
        model=body.get("model") if isinstance(body.get("model"), str) else None,
        client=client_name(headers),
        naive_tokens=naive_tokens if first else 0,
        naive_shared=naive_shared if first else 0,
        round=round,
        note=note,
    )
    try:
        service.record_request(session_id, context, facts)
    except SelfContextError as exc:
        log.warning("session %s: the request was not recorded: %s", session_id, exc)
