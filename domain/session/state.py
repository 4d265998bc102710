"""Session state: the four sets (docs/specification.md §2), the chat, the collapse bookkeeping."""

from __future__ import annotations

import contextlib
from collections.abc import Set as AbstractSet
from typing import Final

import attrs
from pyrsistent import PMap, PSet, PVector, pmap, pset, pvector

from selfctx.domain.chat import Turn
from selfctx.domain.errors import InvalidInput, UnknownPolicy
from selfctx.domain.session.columns import IndexedSet, IntColumn, KindColumn

__all__ = [
    "INITIAL",
    "POLICY_NAMES",
    "CollapseWindow",
    "PolicyConfig",
    "SessionState",
    "members",
]


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


POLICY_NAMES = ("ssot", "inline", "relevance")
"""Layout and collapse policies: ``ssot`` is the original design's four sections and sliding window;
``inline`` keeps the prompt append-only and collapses in batches (docs/decisions/0008);
``relevance`` lays it out as ``inline`` does and collapses by predicted use, keeping the files
the agent works on (docs/decisions/0021)."""


def _positive_or_none(value: int | None, what: str) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise InvalidInput(what, value, "must be a positive integer or None")


@attrs.frozen
class PolicyConfig:
    """How a session's context is laid out and collapsed; chosen when the session starts."""

    name: str = "ssot"
    """One of :data:`POLICY_NAMES`. ``PolicyConfig()`` without a name is the original design's
    layout: what a session stored before sessions had policies reads back as. New sessions get the
    registry's default instead (``selfctx.application.policies.DEFAULT_POLICY``)."""
    trigger_tokens: int | None = None
    """Collapse in a batch once the prompt exceeds this many tokens (None: never)."""
    clear_at_least: int = 0
    """A batch collapse clears at least this many tokens, so each cache break pays for itself."""
    budget_tokens: int | None = None
    """Hard limit: collapse (least recently used first, then largest) until the prompt fits."""
    keep_recent: int = 3
    """The most recent tool outputs a batch collapse never touches (the model may not have seen
    them yet)."""
    emergency_truncation: bool = False
    """When the chat alone exceeds the budget: drop the oldest whole turns from the prompt (never
    from the store) instead of raising ``BudgetExceeded``."""
    recent_messages: int = 8
    """``relevance``: the files named in this many of the agent's last messages (and in the
    traceback frames of their outputs) are its working set."""
    seen_calls: int | None = None
    """``relevance``: an output that shows nothing of the working set collapses, without a note,
    once the agent has answered after it this many times — while it is still near the end of the
    prompt, where collapsing it rewrites almost nothing of the cached prefix (None: only batches
    collapse)."""
    keep_tokens: int | None = None
    """``relevance``: outputs that show the working set are kept by batch collapses up to this
    many tokens, those of the most recently named files first (None: all of them)."""
    named_messages: int | None = None
    """``relevance``: an output stays, as a view of the working set does, while one of the
    agent's last this many messages names an identifier the output brought into the session (one
    with a digit or underscore in it, that no earlier output and no call of the agent had shown):
    the agent works with what it showed (None: only files make the working set)."""
    excerpt_lines: int | None = None
    """``relevance``: a tool output that collapses once answered or in a batch keeps, below its
    one-line reference, at most this many of its lines: those holding an identifier the agent
    named after it saw the output, with ``excerpt_context`` lines around each (decision 0075;
    None: the reference alone)."""
    excerpt_context: int = 2
    """Lines kept either side of each line an excerpt keeps for the name it holds."""
    payback_percent: int | None = None
    """A batch collapse is a cache break: the provider writes again everything after the first
    output it collapses. With this set, a batch takes only the outputs after the earliest point
    where what it clears, no longer read at every later request, pays for that write within as
    many later requests as this percentage of the tool calls the session has had (a session is
    expected to go on about as long as it has run); outputs before that point wait for a later
    batch (None: every batch that clears ``clear_at_least`` takes all it may)."""
    checkpoint_every: int | None = None
    """Take a checkpoint automatically before every N-th user message (before turns 1, 1+N, ...);
    None: only when asked."""
    max_input_tokens: int | None = None
    """The model's input limit (None: the hard budget, else 128,000); pre-request shedding drops
    files past 90% of it, and the budget report measures against it."""
    compaction_trigger_tokens: int | None = None
    """Compact the chat's older turns once the chat alone exceeds this many tokens (seed 001's
    trigger; None: never compact)."""
    verbatim_window_tokens: int = 4000
    """The most recent turns, up to about this many tokens, are never compacted."""
    summary_budget_tokens: int = 500
    """The longest summary a compaction writes, in tokens."""
    min_verbatim_exchanges: int = 2
    """At least this many of the latest user messages (with their turns) stay verbatim."""

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.name, str) or self.name not in POLICY_NAMES:
            raise UnknownPolicy(self.name, POLICY_NAMES)
        _positive_or_none(self.trigger_tokens, "trigger_tokens")
        _positive_or_none(self.budget_tokens, "budget_tokens")
        _positive_or_none(self.keep_tokens, "keep_tokens")
        _positive_or_none(self.seen_calls, "seen_calls")
        _positive_or_none(self.payback_percent, "payback_percent")
        _positive_or_none(self.named_messages, "named_messages")
        _positive_or_none(self.checkpoint_every, "checkpoint_every")
        _positive_or_none(self.max_input_tokens, "max_input_tokens")
        _positive_or_none(self.compaction_trigger_tokens, "compaction_trigger_tokens")
        for what in ("verbatim_window_tokens", "summary_budget_tokens"):
            _positive_or_none(getattr(self, what), what)
        _positive_or_none(self.excerpt_lines, "excerpt_lines")
        for what in (
            "clear_at_least",
            "keep_recent",
            "min_verbatim_exchanges",
            "recent_messages",
            "excerpt_context",
        ):
            value = getattr(self, what)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InvalidInput(what, value, "must be an integer >= 0")

    @property
    def uses_window(self) -> bool:
        """The sliding window applies only to the ssot policy."""
        return self.name == "ssot"

    @property
    def inline_layout(self) -> bool:
        """The prompt is laid out by ``render_inline`` (``inline`` and ``relevance``)."""
        return self.name in ("inline", "relevance")


def _turn_zero() -> PVector[Turn]:
    return pvector([Turn(number=0)])


@attrs.frozen
class SessionState:
    """Everything the session is, apart from object contents (those live in object versions).

    Invariants (checked by the tests after every step): active ⊆ pool ⊆ index; pinned ⊆ index; the
    index never shrinks; only content objects appear in any set. An object of the index that is not
    in the pool is "indexed only" (docs/specification.md §2): a rollback leaves there what the
    session had not met at its checkpoint.
    """

    session_id: str = ""
    """Empty until the session has started."""
    system_prompt_id: str = ""
    chat_id: str = ""
    window: CollapseWindow = CollapseWindow()
    policy: PolicyConfig = PolicyConfig()
    index: PVector[str] = attrs.field(factory=pvector)
    """Session index: every content object encountered, in first-encounter order."""
    positions: PMap[str, int] = attrs.field(factory=pmap)
    """Position of each id in ``index`` (membership test and ordering)."""
    kinds: KindColumn = attrs.field(factory=KindColumn)
    """Type of each indexed object: ``file`` or ``toolcall`` (a byte by position, decision
    0140)."""
    pool: IndexedSet = attrs.field(factory=IndexedSet)
    """Metadata pool (the index but the objects outside it, decision 0140)."""
    active: PSet[str] = attrs.field(factory=pset)
    """Active set."""
    pinned: PSet[str] = attrs.field(factory=pset)
    """Pinned set."""
    auto_active: PSet[str] = attrs.field(factory=pset)
    """Tool calls that are active only because they were auto-activated: the window may
    collapse them. An explicit activation removes an id from here."""
    turns: PVector[Turn] = attrs.field(factory=_turn_zero)
    """The chat, turn 0 being whatever came before the first user message."""
    toolcall_turn: IntColumn = attrs.field(factory=IntColumn)
    """Turn number of each tool call of the chat (by position, decision 0140)."""
    last_used: IntColumn = attrs.field(factory=IntColumn)
    """For each object ever activated, when it last was (a counter): "least recently used"
    (by position, decision 0140)."""
    use_clock: int = 0
    """Ticks at every activation."""
    superseded: PMap[str, str] = attrs.field(factory=pmap)
    """Tool outputs collapsed because a later output shows the same lines of their files again,
    with that later output (decision 0021): a fact about the two outputs, kept once made."""
    excerpts: PMap[str, str] = attrs.field(factory=pmap)
    """Collapsed tool outputs whose reference keeps some of their lines, with those lines
    (decision 0075); an output leaves it when it is activated again."""
    compacted: int = 0
    """Turns before this one are compacted: the chat shows ``summary`` in their place (they stay
    in ``turns``)."""
    summary: str = ""
    """What the chat shows in place of the compacted turns."""
    checkpoints: PVector[str] = attrs.field(factory=pvector)
    """Checkpoint labels, oldest first. A checkpoint stands for the session as it was right
    before the log entry that created it (the store keeps that state; a rollback restores it)."""

    @property
    def started(self) -> bool:
        return bool(self.session_id)

    @property
    def current_turn(self) -> int:
        return len(self.turns) - 1

    def in_index(self, object_id: str) -> bool:
        return object_id in self.positions

    def ordered(self, ids: AbstractSet[str]) -> list[str]:
        """The ids of a set in first-encounter (session index) order."""
        if len(ids) * _SCAN_RATIO >= len(self.index) > 0:
            # a large share of the index: one pass over it in C (sorting looks each id's
            # position up in a persistent map, in Python)
            inside = ids if isinstance(ids, frozenset) else members(ids)
            found = list(filter(inside.__contains__, self.index))
            if len(found) == len(ids):
                return found
        return sorted(ids, key=self.positions.__getitem__)


INITIAL: Final = SessionState()

_SCAN_RATIO = 8
""":meth:`SessionState.ordered` scans the index for a set of at least this fraction of it."""


_MEMBERS: dict[int, tuple[AbstractSet[str], frozenset[str]]] = {}
"""The last few sets :func:`members` was asked about, by identity, with their members."""
_MEMBERS_HELD = 8


def _frozen(ids: AbstractSet[str]) -> frozenset[str]:
    """``frozenset(ids)``, built from the persistent map under the set: its buckets walked
    directly, in the order the set's own iteration walks them (so the same frozenset, members
    inserted in the same order), at half the cost of the set's iterator."""
    try:
        buckets = ids._map._buckets  # type: ignore[attr-defined]
    except AttributeError:
        return frozenset(ids)
    return frozenset([key for bucket in buckets if bucket for key, _ in bucket])


def members(ids: AbstractSet[str]) -> frozenset[str]:
    """The members of one of a state's sets as a ``frozenset``, whose membership tests and set
    operations run in C (a persistent set's take several Python calls each). The same set object
    gives the same answer: the few asked for last are remembered by identity, so that the many
    passes of one assembly over the active set convert it once (decision 0080)."""
    held = _MEMBERS.get(id(ids))
    if held is not None and held[0] is ids:
        return held[1]
    found = ids.frozen() if isinstance(ids, IndexedSet) else _frozen(ids)
    if len(_MEMBERS) >= _MEMBERS_HELD:
        # the oldest goes (another thread may have changed the table meanwhile: no matter)
        with contextlib.suppress(RuntimeError, StopIteration):
            _MEMBERS.pop(next(iter(_MEMBERS)), None)
    _MEMBERS[id(ids)] = (ids, found)
    return found
