"""The token-budget report (seed 001's ``get_token_budget``) and pre-request shedding's limit.

``max_input_tokens`` is the model's input limit: the session policy's, else its hard budget,
else :data:`DEFAULT_MAX_INPUT_TOKENS`. The chat's share of it, ``max_history_tokens``, is the
policy's compaction trigger when it has one, else a sixteenth of the input limit (seed 001's
rule). ``history_tokens`` counts the chat as the model sees it now (user and assistant messages,
tool messages as rendered, notes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import attrs

from selfctx.application.tokens import context_tokens
from selfctx.domain.rendering import AssembledContext
from selfctx.domain.session.state import PolicyConfig

__all__ = [
    "DEFAULT_MAX_INPUT_TOKENS",
    "HISTORY_SHARE",
    "SHED_FRACTION",
    "TokenBudget",
    "max_history_tokens",
    "max_input_tokens",
    "token_budget",
]

DEFAULT_MAX_INPUT_TOKENS: Final = 128_000
"""The input limit assumed when a session's policy names none (a common window today)."""
HISTORY_SHARE: Final = 16
"""Seed 001: the chat's share of the input limit is one sixteenth, unless a trigger says."""
SHED_FRACTION: Final = 0.9
"""Seed 001's pre-request shedding: past this fraction of the input limit, files drop."""


def max_input_tokens(policy: PolicyConfig) -> int:
    """The model's input limit for a session of this policy."""
    return policy.max_input_tokens or policy.budget_tokens or DEFAULT_MAX_INPUT_TOKENS


def max_history_tokens(policy: PolicyConfig) -> int:
    """The chat's share of the input limit: past it, the chat needs compacting."""
    return policy.compaction_trigger_tokens or max_input_tokens(policy) // HISTORY_SHARE


@attrs.frozen
class TokenBudget:
    """Where a session's prompt stands against its limits."""

    history_tokens: int
    """The chat, as the model sees it now."""
    max_history_tokens: int
    """The chat's share of the input limit."""
    max_input_tokens: int
    """The model's input limit."""
    prompt_tokens: int
    """The whole prompt: system prompt, metadata, chat, active content."""
    remaining: int
    """``max_input_tokens - prompt_tokens`` (negative when over)."""
    needs_compaction: bool
    """The chat is over its share and compaction is enabled."""
    compaction_enabled: bool


def token_budget(
    context: AssembledContext, policy: PolicyConfig, count: Callable[[str], int]
) -> TokenBudget:
    """The report for ``context`` assembled under ``policy``, counted with ``count``."""
    history = context_tokens(attrs.evolve(context, system_prompt="", metadata=(), active=()), count)
    prompt = context_tokens(context, count)
    limit = max_input_tokens(policy)
    share = max_history_tokens(policy)
    enabled = policy.compaction_trigger_tokens is not None
    return TokenBudget(
        history_tokens=history,
        max_history_tokens=share,
        max_input_tokens=limit,
        prompt_tokens=prompt,
        remaining=limit - prompt,
        needs_compaction=enabled and history > share,
        compaction_enabled=enabled,
    )
