"""Session state: the four sets of SSOT §3.1, the chat, and the collapse bookkeeping."""

from __future__ import annotations

from typing import Final

import attrs
from pyrsistent import PMap, PSet, PVector, pmap, pset, pvector

from domain.chat import Turn
from domain.errors import InvalidInput

__all__ = ["INITIAL", "CollapseWindow", "SessionState"]


@attrs.frozen
class CollapseWindow:
    """The sliding window of auto-collapse (§4.3)."""

    per_turn: int = 5
    """An auto-activated tool output stays active while among the last N of its turn."""
    turns: int = 3
    """... and while its turn is among the N most recent turns."""

    def __attrs_post_init__(self) -> None:
        sizes = (self.per_turn, self.turns)
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in sizes):
            raise InvalidInput("collapse window", sizes, "sizes must be integers")
        if self.per_turn < 1 or self.turns < 1:
            raise InvalidInput("collapse window", sizes, "sizes must be at least 1")


def _turn_zero() -> PVector[Turn]:
    return pvector([Turn(number=0)])


@attrs.frozen
class SessionState:
    """Everything the session is, apart from object contents (those live in object versions).

    Invariants (checked by the tests after every step): active ⊆ pool ⊆ index; pinned ⊆ index;
    the index never shrinks; only content objects appear in any set.
    """

    session_id: str = ""
    """Empty until the session has started."""
    system_prompt_id: str = ""
    chat_id: str = ""
    window: CollapseWindow = CollapseWindow()
    index: PVector[str] = attrs.field(factory=pvector)
    """Session index: every content object encountered, in first-encounter order."""
    positions: PMap[str, int] = attrs.field(factory=pmap)
    """Position of each id in ``index`` (membership test and ordering)."""
    kinds: PMap[str, str] = attrs.field(factory=pmap)
    """Type of each indexed object: ``file`` or ``toolcall``."""
    pool: PSet[str] = attrs.field(factory=pset)
    """Metadata pool."""
    active: PSet[str] = attrs.field(factory=pset)
    """Active set."""
    pinned: PSet[str] = attrs.field(factory=pset)
    """Pinned set."""
    auto_active: PSet[str] = attrs.field(factory=pset)
    """Tool calls that are active only because they were auto-activated: the window may
    collapse them. An explicit activation removes an id from here."""
    turns: PVector[Turn] = attrs.field(factory=_turn_zero)
    """The chat, turn 0 being whatever came before the first user message."""
    toolcall_turn: PMap[str, int] = attrs.field(factory=pmap)
    """Turn number of each tool call."""

    @property
    def started(self) -> bool:
        return bool(self.session_id)

    @property
    def current_turn(self) -> int:
        return len(self.turns) - 1

    def in_index(self, object_id: str) -> bool:
        return object_id in self.positions

    def ordered(self, ids: PSet[str] | frozenset[str]) -> list[str]:
        """The ids of a set in first-encounter (session index) order."""
        return sorted(ids, key=self.positions.__getitem__)


INITIAL: Final = SessionState()
