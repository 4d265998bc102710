"""The named layout and collapse policies a session can be started with: the one registry.

``ssot`` is the original design's layout exactly (docs/specification.md §4): system prompt,
metadata pool, chat, active content, and the sliding window of 5 tool outputs per turn over 3 turns.
``inline`` is the cache-aware policy of docs/decisions/0008-cache-aware-layout.md: an append-only
prompt, collapsed in batches. ``relevance`` (the default, decision 0021) lays the prompt out as
``inline`` does and collapses by predicted use. Their numbers were chosen by ``selfctx bench
context`` (docs/benchmarks.md); any field can be overridden.

Every entry point that takes a policy (``Settings``, ``ContextService.start_session``,
``HarnessSession``, ``session.open``, the command line) goes through :func:`as_policy`: a
:class:`PolicyConfig` as it is, a name from this registry, or :class:`UnknownPolicy`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from selfctx.domain.errors import InvalidInput, UnknownPolicy
from selfctx.domain.session.state import POLICY_NAMES, PolicyConfig

__all__ = [
    "DEFAULT_POLICY",
    "POLICIES",
    "POLICY_DESCRIPTIONS",
    "POLICY_NAMES",
    "as_policy",
    "default_policy",
    "policy_by_name",
]

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
        payback_percent=100,
        excerpt_lines=20,
        excerpt_context=6,
    ),
}
"""Every policy by name, with its settings."""

POLICY_DESCRIPTIONS: Final[Mapping[str, str]] = {
    "ssot": "The original design's layout (system prompt, metadata pool, chat, active content) "
    "and its sliding-window auto-collapse of tool outputs.",
    "inline": "Cache-aware: an append-only prompt, objects shown where they arrived with #n "
    "handles, older outputs collapsed in batches once a token trigger is crossed.",
    "relevance": "The inline layout, collapsing by predicted use: views of the files the agent "
    "works on stay, other outputs collapse once answered, views shown again collapse first.",
}
"""One line per policy, for people (``selfctx`` help texts, the stdio server's errors)."""

DEFAULT_POLICY: Final = "relevance"
"""The policy sessions get when none is named, everywhere (``ContextService``,
``build_service``, ``session.open``, ``selfctx proxy``, ``selfctx replay``): the winner of
``selfctx bench context`` (docs/benchmarks.md, decision 0021)."""


def policy_by_name(name: str | None = None, **overrides: Any) -> PolicyConfig:
    """A named policy (default :data:`DEFAULT_POLICY`), with any fields overridden."""
    chosen = (
        POLICIES.get(DEFAULT_POLICY if name is None else name)
        if isinstance(name, str | None)
        else None
    )
    if chosen is None:
        raise UnknownPolicy(name, POLICY_NAMES)
    try:
        return attrs.evolve(chosen, **overrides)
    except TypeError as exc:
        raise InvalidInput("policy settings", overrides, str(exc)) from exc


def default_policy() -> PolicyConfig:
    """The settings of :data:`DEFAULT_POLICY`."""
    return POLICIES[DEFAULT_POLICY]


def as_policy(policy: PolicyConfig | str | None) -> PolicyConfig:
    """``policy`` as a :class:`PolicyConfig`: itself, the registry's entry for a name, the
    default for None; anything else is refused with :class:`UnknownPolicy`."""
    if isinstance(policy, PolicyConfig):
        return policy
    if policy is None:
        return default_policy()
    if isinstance(policy, str):
        return policy_by_name(policy)
    raise UnknownPolicy(policy, POLICY_NAMES)


assert set(POLICIES) == set(POLICY_NAMES) == set(POLICY_DESCRIPTIONS), "one entry per policy"
