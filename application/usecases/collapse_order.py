"""In which order a batch collapse takes tool outputs, per policy (decisions 0008 and 0021).

``inline`` takes the least recently used first. ``relevance`` asks the domain which outputs a
later one shows again (superseded: always taken in a batch), which show nothing of the files the
agent works on (taken next, least recently used first), and which show its working set: those
are kept, up to ``keep_tokens`` — the outputs of the files the agent names most first — and
beyond that they may go after the unused ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import attrs

from selfctx.domain.objects import ContentObject, Source, ToolcallObject
from selfctx.domain.relevance import (
    KEEP,
    SUPERSEDED,
    UNUSED,
    Relevance,
    RelevanceMemo,
    relevance,
)
from selfctx.domain.session.state import SessionState

__all__ = [
    "COLLAPSE_RECORDS",
    "NO_PLAN",
    "OVER_KEEP",
    "CollapsePlan",
    "CollapseRecord",
    "plan_collapse",
    "remember_collapse",
]

OVER_KEEP = (UNUSED + KEEP) / 2
"""Tier of a working-set output beyond ``keep_tokens``: after the unused ones."""


@attrs.frozen
class CollapsePlan:
    """How a batch may collapse the session's active tool outputs."""

    tiers: Mapping[str, float]
    """Tier of each active tool output (lower goes first; :data:`KEEP` is never taken)."""
    superseded: Mapping[str, str]
    """Outputs a later output shows again, with that later output."""
    working: frozenset[str] = frozenset()
    """Active outputs that show a file of the working set."""
    stale: Mapping[str, str] = attrs.field(factory=dict)
    """Outputs every file of which a later call changed, with that call."""
    foreseen: Mapping[str, float] = attrs.field(factory=dict)
    """The tiers once the newest outputs are spared no more (the next request's plan if
    nothing else changed): the newest outputs ranked with the rest, so that a kept output a
    newest one displaces is not :data:`KEEP` here."""

    def newer(self, chosen: Iterable[str]) -> tuple[tuple[str, str], ...]:
        """``(output, later call)`` for the chosen outputs a later output shows again or a later
        call made stale: what their collapsed lines say (decision 0021)."""
        return tuple(
            (i, later)
            for i in chosen
            if (later := self.superseded.get(i) or self.stale.get(i)) is not None
        )

    def tier_name(self, object_id: str) -> str:
        """The tier of an output, as a word (``superseded``, ``unused``, ``kept``,
        ``over-keep``; ``any`` for a policy without tiers)."""
        if not self.tiers:
            return "any"
        tier = self.tiers.get(object_id, UNUSED)
        return _TIER_NAMES.get(tier, "unused")

    def key(self, object_id: str) -> float:
        return self.tiers.get(object_id, UNUSED)

    def always(self, object_id: str) -> bool:
        """Taken by any batch, whatever it has cleared already."""
        return self.tiers.get(object_id) == SUPERSEDED

    def kept(self, object_id: str) -> bool:
        return self.tiers.get(object_id) == KEEP


_TIER_NAMES = {SUPERSEDED: "superseded", UNUSED: "unused", OVER_KEEP: "over-keep", KEEP: "kept"}

NO_PLAN = CollapsePlan({}, {})
"""``inline``: every output is alike; least recently used first."""


def _weight(found: Relevance, obj: ContentObject) -> float:
    """The weight of the heaviest working-set file ``obj`` shows."""
    views = obj.file_views or () if isinstance(obj, ToolcallObject) else ()
    return max(
        (found.working_set.get(v.file, 0.0) for v in views), default=found.named.get(obj.id, 0.0)
    )


def plan_collapse(
    state: SessionState,
    objects: Mapping[str, ContentObject],
    display_path: Callable[[Source], str],
    count: Callable[[str], int],
    spared: Iterable[str],
    memo: RelevanceMemo | None = None,
) -> CollapsePlan:
    """The plan for ``state``'s policy (``spared``: the newest outputs, which no batch takes;
    ``memo``: what earlier turns learnt, so that this one looks only at what is new)."""
    policy = state.policy
    if policy.name != "relevance":
        return NO_PLAN
    found = relevance(
        state,
        objects,
        display_path,
        policy.recent_messages,
        memo,
        policy.named_messages,
        introduced=policy.excerpt_lines is not None,
    )
    tiers = _ranked(state, objects, found, count, set(spared))
    foreseen = _ranked(state, objects, found, count, set()) if spared else tiers
    working = frozenset(i for i in tiers if _weight(found, objects[i]) > 0)
    return CollapsePlan(tiers, found.superseded, working, found.stale, foreseen)


def _ranked(
    state: SessionState,
    objects: Mapping[str, ContentObject],
    found: Relevance,
    count: Callable[[str], int],
    exempt: set[str],
) -> dict[str, float]:
    """The tiers, the working-set outputs beyond ``keep_tokens`` over-keep (``exempt``: not
    ranked, neither taking room nor losing theirs)."""
    tiers: dict[str, float] = dict(found.tiers)
    kept = [i for i, tier in tiers.items() if tier == KEEP and i not in exempt]
    kept.sort(key=lambda i: (-_weight(found, objects[i]), -state.positions[i]))
    room = state.policy.keep_tokens
    for n, object_id in enumerate(kept):
        size = count(objects[object_id].content or "")
        if n == 0 and room is not None:  # the heaviest file's view stays, whatever its size
            room = max(0, room - size)
            continue
        if room is not None and size > room:
            room = 0  # strictly by rank: nothing after the first that does not fit
            tiers[object_id] = OVER_KEEP
        elif room is not None:
            room -= size
    return tiers


@attrs.frozen
class CollapseRecord:
    """Why assembly collapsed an output: what ``selfctx bench context --losses`` reports for a
    line the model later used. Kept in memory with the open session, never stored."""

    rule: str
    """``seen`` (answered, showing nothing the agent works on), ``batch`` (the prompt passed
    the trigger), ``budget`` (the hard budget), ``shed`` (the input limit)."""
    tier: str
    """The output's tier then (:meth:`CollapsePlan.tier_name`)."""
    working_set: bool
    """Whether it showed a file of the working set then."""
    seq: int
    """The session's log position right before the collapse."""


COLLAPSE_RECORDS = 4_096
"""How many :class:`CollapseRecord` an open session keeps, the latest: a diagnosis whose
memory is bounded by this, not by the session's length (decision 0152)."""


def remember_collapse(
    records: dict[str, CollapseRecord], object_id: str, record: CollapseRecord
) -> None:
    """Keep ``record`` as the latest of ``records``, letting the oldest go beyond
    :data:`COLLAPSE_RECORDS` (a dict keeps its keys in the order they were set)."""
    records.pop(object_id, None)
    records[object_id] = record
    while len(records) > COLLAPSE_RECORDS:
        del records[next(iter(records))]
