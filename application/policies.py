"""The named layout and collapse policies a session can be started with.

``ssot`` is the original design's layout exactly (docs/specification.md §4): system prompt, metadata
pool, chat, active content, and the sliding window of 5 tool outputs per turn over 3 turns.
``inline`` is the cache-aware policy of docs/decisions/0008-cache-aware-layout.md: an append-only
prompt, collapsed in batches. Its numbers were chosen by ``selfctx bench context``
(docs/benchmarks.md); any field can be overridden.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from selfctx.domain.errors import InvalidInput
from selfctx.domain.session.state import POLICY_NAMES, PolicyConfig

__all__ = ["DEFAULT_POLICY", "POLICIES", "policy_by_name"]

POLICIES: Final[Mapping[str, PolicyConfig]] = {
    "ssot": PolicyConfig("ssot"),
    "inline": PolicyConfig("inline", trigger_tokens=5000, clear_at_least=2500, keep_recent=2),
    "relevance": PolicyConfig(
        "relevance",
        trigger_tokens=5000,
        clear_at_least=3000,
        keep_recent=1,
        seen_calls=1,
        keep_tokens=3000,
        recent_messages=20,
    ),
}
DEFAULT_POLICY: Final = "relevance"
"""The policy sessions get when none is named: the winner of ``selfctx bench context``
(docs/benchmarks.md, decision 0008). ``ContextService`` itself defaults to ``ssot`` — the design's
own behaviour — and the composition root (``selfctx.adapters.bootstrap.build_service``) applies this
one."""


def policy_by_name(name: str | None = None, **overrides: Any) -> PolicyConfig:
    """A named policy (default :data:`DEFAULT_POLICY`), with any fields overridden."""
    chosen = POLICIES.get(name or DEFAULT_POLICY)
    if chosen is None:
        raise InvalidInput("policy", name, f"known policies are {list(POLICY_NAMES)}")
    try:
        return attrs.evolve(chosen, **overrides)
    except TypeError as exc:
        raise InvalidInput("policy settings", overrides, str(exc)) from exc
