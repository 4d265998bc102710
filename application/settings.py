"""Settings a harness may tune; every default is what a user would expect without asking."""

from __future__ import annotations

from typing import Final

import attrs

from selfctx.application.cache_budget import CACHE_BUDGET, CacheShares, cache_shares
from selfctx.application.policies import as_policy, default_policy
from selfctx.domain.errors import InvalidInput
from selfctx.domain.session.state import CollapseWindow, PolicyConfig

__all__ = ["RENDERING_BUDGET", "Settings"]

RENDERING_BUDGET: Final = cache_shares().renderings
"""Chat messages, the last of the chat, whose provider rendering a session's request cache keeps
beside its text (decision 0117)."""


@attrs.frozen
class Settings:
    """Tunable limits and policies of a :class:`~selfctx.application.service.ContextService`."""

    window: CollapseWindow = CollapseWindow()
    """Auto-collapse window for new sessions (the design's default: 5 per turn, 3 turns)."""
    policy: PolicyConfig = attrs.field(factory=default_policy, converter=as_policy)
    """Layout and collapse policy for new sessions: a :class:`PolicyConfig` or a policy's name
    (default ``selfctx.application.policies.DEFAULT_POLICY``, ``relevance``)."""
    max_file_bytes: int = 2 * 1024 * 1024
    """Files larger than this are indexed as metadata only (content null, reason shown)."""
    max_output_bytes: int = 8 * 1024 * 1024
    """Tool outputs and file contents handed over by a harness larger than this are refused."""
    cache_budget: int = attrs.field(default=CACHE_BUDGET)
    """Bytes of the caches each open session keeps, split among them
    (``selfctx.application.cache_budget``, decision 0169): it gives the three budgets below
    their defaults, and the bounds of the remembered token counts, of relevance's known
    identifiers and of the tokenizer's memo."""
    content_budget: int = attrs.field(
        default=attrs.Factory(lambda s: cache_shares(s.cache_budget).content_chars, takes_self=True)
    )
    """Characters of content each open session keeps in memory (the objects used last); the
    rest is read again from the store when needed (``selfctx.application.objects``)."""
    metadata_budget: int = attrs.field(
        default=attrs.Factory(
            lambda s: cache_shares(s.cache_budget).metadata_calls, takes_self=True
        )
    )
    """Tool calls whose content was dropped and whose metadata each open session keeps in
    memory (the ones used last); an older one's is read again from the store when needed
    (decision 0111)."""
    rendering_budget: int = attrs.field(
        default=attrs.Factory(lambda s: cache_shares(s.cache_budget).renderings, takes_self=True)
    )
    """Chat messages, the last of the chat, whose rendering as a provider's item each session's
    request cache keeps by the message's identity (a re-rendering from an older message encodes
    again what it walks; decision 0117)."""

    @property
    def caches(self) -> CacheShares:
        """What :attr:`cache_budget` gives each cache (the three budgets above as set)."""
        return cache_shares(self.cache_budget)

    @cache_budget.validator
    def _check_cache_budget(self, _: object, value: int) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InvalidInput("cache_budget", value, "must be an integer >= 1")

    @metadata_budget.validator
    def _check_metadata_budget(self, _: object, value: int) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InvalidInput("metadata_budget", value, "must be an integer >= 0")

    @rendering_budget.validator
    def _check_rendering_budget(self, _: object, value: int) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InvalidInput("rendering_budget", value, "must be an integer >= 0")
