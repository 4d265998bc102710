"""Compaction of the chat's older turns (seed 001's history compaction; decision 0043): pure rules.

Seed 001's two thresholds: compaction starts once the chat alone exceeds the *trigger*; the most
recent turns, up to the *verbatim window* in tokens and never fewer than *min verbatim exchanges*
user messages, are never compacted. A topic-boundary detector (a model, or the extractive
heuristic) says where the conversation changed subject:

* **truncate**: a confident boundary (≥ 0.5) inside the verbatim window or after it — everything
  before it is an earlier topic: it is compacted without a summary;
* **summarize**: a boundary before the window, a low-confidence one, or none — the turns before the
  window are compacted into a summary;
* **none**: below the trigger, nothing to compact, or not worth a cache break.

Compacting never removes a turn from the state: the chat keeps every turn, and rendering shows
one summary message in place of the compacted ones. Turns are compacted whole (a cut is always
right before a user message), so no tool result is separated from its call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Final, Literal, TypeAlias

import attrs

__all__ = [
    "CONFIDENT",
    "MAX_MESSAGES",
    "MAX_MESSAGE_CHARS",
    "SAFE_BOUNDARY",
    "SUMMARY_ID",
    "Case",
    "CompactionPlan",
    "TopicBoundary",
    "format_transcript",
    "parse_boundary",
    "plan_compaction",
    "summary_text",
    "verbatim_start",
]

Case: TypeAlias = Literal["none", "summarize", "truncate"]
CONFIDENT: Final = 0.5
"""A boundary at least this confident, in or after the verbatim window, truncates."""
MAX_MESSAGE_CHARS: Final = 1000
"""Each message shown to a boundary detector is cut to this many characters."""
MAX_MESSAGES: Final = 50
"""A boundary detector sees at most this many messages (the most recent)."""


@attrs.frozen
class TopicBoundary:
    """Where the conversation turned to a new topic, as a detector sees it."""

    index: int | None
    """The first message of the new topic, by its number in the transcript (None: none)."""
    reason: str = ""
    confidence: float = 0.0
    """0.0 to 1.0."""
    summary: str = ""
    """A summary of what came before, if the detector wrote one."""


SAFE_BOUNDARY: Final = TopicBoundary(None, "", 0.0, "")
"""What a failed or unparseable detection means: no boundary, no confidence."""


def format_transcript(
    messages: Sequence[tuple[int, str, str]], max_chars: int = MAX_MESSAGE_CHARS
) -> str:
    """``[N] ROLE: content`` per message, each cut to ``max_chars`` characters."""
    lines = []
    for number, role, text in messages:
        flat = " ".join(text.split())
        if len(flat) > max_chars:
            flat = flat[:max_chars] + "…"
        lines.append(f"[{number}] {role.upper()}: {flat}")
    return "\n".join(lines)


_FENCED = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)
_OBJECT = re.compile(r"\{.*\}", re.DOTALL)
_INDEX = re.compile(r'"boundary_index"\s*:\s*(null|-?\d+)')
_CONFIDENCE = re.compile(r'"confidence"\s*:\s*(-?\d+(?:\.\d+)?)')
_REASON = re.compile(r'"boundary_reason"\s*:\s*"((?:[^"\\]|\\.)*)"')


def _from_fields(data: dict[str, Any], known: set[int]) -> TopicBoundary:
    index = data.get("boundary_index")
    if isinstance(index, bool) or not isinstance(index, int) or index not in known:
        index = None
    confidence = data.get("confidence")
    if isinstance(confidence, bool) or not isinstance(confidence, int | float):
        confidence = 0.0
    confidence = min(1.0, max(0.0, float(confidence)))
    reason = data.get("boundary_reason")
    summary = data.get("summary")
    return TopicBoundary(
        index=index,
        reason=reason if isinstance(reason, str) else "",
        confidence=confidence if index is not None else 0.0,
        summary=summary if isinstance(summary, str) else "",
    )


def parse_boundary(text: object, known: Sequence[int]) -> TopicBoundary:
    """A detector's answer: clean JSON, JSON in a markdown fence or among prose, or — when none
    parses — the fields a regular expression can still find. An index that is not one of the
    ``known`` message numbers, and anything unreadable, give :data:`SAFE_BOUNDARY`'s values."""
    if not isinstance(text, str):
        return SAFE_BOUNDARY
    numbers = set(known)
    candidates = [m.group(1) for m in _FENCED.finditer(text)]
    found = _OBJECT.search(text)
    candidates += [text.strip()] + ([found.group(0)] if found else [])
    for candidate in candidates:
        try:
            data = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(data, dict):
            return _from_fields(data, numbers)
    index = _INDEX.search(text)
    if index is None:
        return SAFE_BOUNDARY
    fields: dict[str, Any] = {"boundary_index": None}
    if index.group(1) != "null":
        fields["boundary_index"] = int(index.group(1))
    confidence = _CONFIDENCE.search(text)
    if confidence is not None:
        fields["confidence"] = float(confidence.group(1))
    reason = _REASON.search(text)
    if reason is not None:
        fields["boundary_reason"] = reason.group(1)
    return _from_fields(fields, numbers)


def verbatim_start(turn_tokens: Sequence[int], window: int, min_exchanges: int) -> int:
    """The first turn of the verbatim window: the most recent turns whose tokens add up to at
    most ``window``, and at least the last ``min_exchanges`` turns begun by a user message."""
    last = len(turn_tokens) - 1
    start = last + 1
    total = 0
    while start > 0 and total + turn_tokens[start - 1] <= window:
        start -= 1
        total += turn_tokens[start]
    # Turns 1.. each begin with a user message; turn 0 is the preamble.
    floor = max(1, last - min_exchanges + 1) if last >= 1 else 0
    return max(0, min(start, floor))


@attrs.frozen
class CompactionPlan:
    """What to compact."""

    case: Case
    upto: int
    """Turns before this one are compacted (all of them, earlier compactions included)."""
    reason: str = ""


def plan_compaction(
    turn_tokens: Sequence[int],
    compacted: int,
    boundary_turn: int | None,
    boundary: TopicBoundary,
    *,
    window: int,
    min_exchanges: int,
) -> CompactionPlan:
    """Seed 001's cases, on turns (``boundary_turn``: the turn holding the boundary message)."""
    start = verbatim_start(turn_tokens, window, min_exchanges)
    last = len(turn_tokens) - 1
    floor = max(1, last - min_exchanges + 1) if last >= 1 else 0
    if (
        boundary_turn is not None
        and boundary.confidence >= CONFIDENT
        and boundary_turn >= start
        and min(boundary_turn, floor) > compacted
    ):
        reason = boundary.reason or "a new topic"
        return CompactionPlan("truncate", min(boundary_turn, floor), reason)
    if start > compacted:
        return CompactionPlan("summarize", start, "older turns")
    return CompactionPlan("none", compacted)


SUMMARY_ID: Final = "summary"
"""What the model passes to ``activate`` to see the compacted turns verbatim."""


def summary_text(compacted: int, summary: str) -> str:
    """The chat message that stands for the compacted turns (before turn ``compacted``)."""
    return (
        f"[context] turns up to {compacted - 1} are compacted; activate {SUMMARY_ID!r} shows "
        f"them verbatim, and search finds them.\n{summary}"
    )
