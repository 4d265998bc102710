"""AssembleContext (docs/specification.md §4) under the session's layout and collapse policy.

Both policies render through the domain (``render_context`` for ``ssot``, ``render_inline`` for
``inline``). Token-driven collapses are then decided here, because they need a tokenizer:

* ``trigger_tokens`` (batch collapse): once the prompt exceeds it, collapse the least recently
  used unpinned tool outputs until at least ``clear_at_least`` tokens (and at least the excess)
  are cleared, so each cache break pays for itself;
* ``budget_tokens`` (hard budget): collapse unpinned active objects, least recently used first and
  then largest, until the prompt fits; chat and pinned objects are never dropped silently.

Each collapse is a command (``CollapseToFit``) with a one-line note for the model, so it is in the
log and the context can be rebuilt exactly. If the chat alone exceeds the budget, assembly raises
:class:`BudgetExceeded`, or — with ``emergency_truncation`` — leaves the oldest whole turns out of
the prompt (never out of the store) and says so in the first line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

import attrs

from selfctx.application.budget import SHED_FRACTION, TokenBudget, token_budget
from selfctx.application.ports.tokenizer import Tokenizer
from selfctx.application.runner import OpenSession
from selfctx.application.tokens import ContextCounter, context_tokens
from selfctx.application.usecases.base import Deps
from selfctx.application.usecases.collapse_order import (
    NO_PLAN,
    OVER_KEEP,
    CollapsePlan,
    CollapseRecord,
    plan_collapse,
    remember_collapse,
)
from selfctx.application.usecases.collapse_seen import SUPERSEDED_NEAR_END, seen_toolcalls
from selfctx.application.usecases.compaction import CompactChat
from selfctx.application.usecases.shedding import files_to_shed, shedding_note
from selfctx.domain.chat import thaw_json
from selfctx.domain.errors import SelfContextError
from selfctx.domain.excerpt import excerpt, excerpt_ranges
from selfctx.domain.inline import handle, render_inline
from selfctx.domain.objects import ToolcallObject
from selfctx.domain.prompt_cache import ANTHROPIC
from selfctx.domain.relevance import KEEP, SUPERSEDED, UNUSED, answer_names
from selfctx.domain.rendering import (
    ActiveBlock,
    AssembledContext,
    RenderedMessage,
    render_context,
)
from selfctx.domain.session import commands as c
from selfctx.domain.session.state import PolicyConfig, SessionState, members

__all__ = ["AssembleContext", "BudgetExceeded", "foreseen_collapses"]

_V = TypeVar("_V")

_ROOM = (KEEP, OVER_KEEP)
"""Tiers of the outputs that show the working set: they share the room of the kept ones."""


class BudgetExceeded(SelfContextError):
    """Even with every unpinned object collapsed, the prompt exceeds the token budget."""

    kind = "budget_exceeded"

    def __init__(self, session_id: str, budget: int, needed: int) -> None:
        self.session_id = session_id
        self.budget = budget
        self.needed = needed
        super().__init__(
            f"session {session_id!r} needs {needed} tokens with everything collapsed that may be; "
            f"the budget is {budget} (raise it, unpin objects, or enable emergency truncation)"
        )


class AssembleContext:
    """Render the session's context and enforce its policy's token limits."""

    def __init__(
        self, deps: Deps, tokenizer: Tokenizer, compact: CompactChat | None = None
    ) -> None:
        self._deps = deps
        self._tokenizer = tokenizer
        self._compact = compact
        """Compacts the chat's older turns when a policy asks (None: never)."""

    def counter(self, session: OpenSession) -> Callable[[str], int]:
        """Tokens of a text, memoised for the session's prompts."""
        return self._counter(session)

    def _counter(self, session: OpenSession) -> Callable[[str], int]:
        cache = session.token_cache
        shares = self._deps.settings.caches
        # the entry-bounded caches of the session take their shares of the cache budget here,
        # where every assembly passes (a rollback makes new ones; decision 0169)
        cache.entries = shares.token_counts
        session.relevance_memo.known.limit = shares.known_names
        count = self._tokenizer.count

        def counted(text: str) -> int:
            n = cache.get(text)
            if n is None:
                n = cache[text] = count(text)
            return n

        return counted

    def render(self, session: OpenSession) -> AssembledContext:
        """The context as the policy lays it out, without enforcing token limits."""
        state = session.state
        display = self._deps.mounts.display_path
        prompt = session.system_prompt.content
        # The renderers read the content of what they show in full, the active objects, and
        # only the metadata of the rest: what is not in memory is not read again for it.
        objects = session.objects.showing(state.active)
        if state.policy.inline_layout:
            return render_inline(state, objects, prompt, display, session.inline_cache)
        return render_context(state, objects, prompt, display, session.render_cache)

    def budget(self, session: OpenSession) -> TokenBudget:
        """The token-budget report of the context the model sees now."""
        context = self(session)
        return token_budget(context, session.state.policy, self._counter(session))

    def context_counter(self, session: OpenSession) -> ContextCounter:
        """The session's counter of successive contexts."""
        counter = session.context_counter
        if not isinstance(counter, ContextCounter):
            counter = session.context_counter = ContextCounter(
                self._counter(session), sent=session.sent_before
            )
        return counter

    def tokens(self, session: OpenSession, context: AssembledContext) -> int:
        """Tokens of ``context`` (reusing the counts of messages counted before)."""
        return int(self.context_counter(session)(context))

    def prepare(self, session: OpenSession) -> AssembledContext:
        """What the next assembly of ``session`` would find in its caches, made now, deciding
        and recording nothing (decision 0110): the context rendered as the state is, every
        message of it counted, and the relevance plan's facts about the session's outputs
        learnt. A resumed session calls it once, so that its first assembly costs what an
        ordinary one does; an assembly after it renders, counts and looks again only at what
        changed since, as every assembly does."""
        context = self._prepare(session)
        # what every assembly ends with: the metadata of old outputs beyond the budget goes
        # (decision 0111), now rather than in the first assembly (decision 0129)
        session.objects.trim()
        return context

    def _prepare(self, session: OpenSession) -> AssembledContext:
        policy = session.state.policy
        context = self.render(session)
        if _unbudgeted(policy):
            return context
        count = self._counter(session)
        if session.context_counter is None:
            self.context_counter(session).prime(context)
        if policy.seen_calls is not None or policy.trigger_tokens is not None:
            # the plan is not kept (an assembly plans again, on the state it finds): what it
            # learnt of each output on the way, in the memo, is what the next plan reads
            plan_collapse(
                session.state,
                session.working_objects(),
                self._deps.mounts.display_path,
                count,
                _newest_toolcalls(session, policy.keep_recent),
                session.relevance_memo,
            )
        return context

    def __call__(self, session: OpenSession) -> AssembledContext:
        context = self._assemble(session)
        if session.context_counter is not None:
            session.context_counter.sent()  # what the next request finds cached (_paying)
        session.objects.trim()  # the metadata of old outputs beyond the budget (decision 0111)
        return context

    def _assemble(self, session: OpenSession) -> AssembledContext:
        policy = session.state.policy
        if policy.compaction_trigger_tokens is not None and self._compact is not None:
            self._compact(session, self._counter(session))
        session.plan = None
        if _unbudgeted(policy):
            return self.render(session)
        count = self._counter(session)
        before = session.state
        # The seen collapse decides from the state and the working objects, not from a
        # rendering: the context is rendered once, after it (decision 0156).
        collapsed = policy.seen_calls is not None and self._collapse_seen(session, count)
        context = self.render(session)
        total = self.tokens(session, context)
        trigger = policy.trigger_tokens
        if trigger is not None and total > trigger:
            spared = _newest_toolcalls(session, policy.keep_recent)
            # the seen collapse's plan, when it made one, is this state's plan as it is (it
            # collapsed nothing) or without what it collapsed (decision 0080)
            plan = _after_seen(session, before) if collapsed else None
            if not collapsed and session.plan is not None and session.state is before:
                plan = session.plan
            if plan is None:
                plan = plan_collapse(
                    session.state,
                    session.working_objects(),
                    self._deps.mounts.display_path,
                    count,
                    spared,
                    session.relevance_memo,
                )
            session.plan = plan
            goal = max(policy.clear_at_least, total - trigger)
            plan = _displaced_now(session, plan, spared, count)
            if self._collapse(session, count, goal, plan, spared, context=context):
                context = self.render(session)
                total = self.tokens(session, context)
        limit = policy.max_input_tokens
        if limit is not None and total > SHED_FRACTION * limit:
            chosen, cleared = files_to_shed(session, count, total - int(SHED_FRACTION * limit))
            if chosen:
                note = shedding_note(session, chosen, cleared, total, limit)
                reasons = _record(session, chosen, "shed", NO_PLAN)
                command = c.CollapseToFit(tuple(chosen), note, reasons=reasons)
                self._deps.runner.execute(session, lambda reads, st: command)
                context = self.render(session)
                total = self.tokens(session, context)
        budget = policy.budget_tokens
        if budget is not None and total > budget:
            if self._collapse(session, count, total - budget, NO_PLAN, None):
                context = self.render(session)
                total = self.tokens(session, context)
            if total > budget:
                if not policy.emergency_truncation:
                    raise BudgetExceeded(session.session_id, budget, total)
                context = _truncate(context, count, budget)
                total = self.tokens(session, context)
        if limit is not None and total > limit:
            # The model refuses a request over its input limit: whatever shedding left, what a
            # budget may take goes, and then, in this request only, the oldest messages.
            newest = _newest_toolcalls(session, max(policy.keep_recent, 1))
            if self._collapse(
                session, count, total - limit, NO_PLAN, None, never=newest, why="input limit"
            ):
                context = self.render(session)
                total = self.tokens(session, context)
            if total > limit:  # the newest output is shortened, rather than collapsed unseen
                context = _truncate(context, count, limit, "the model's input limit")
        return context

    def _collapse_seen(self, session: OpenSession, count: Callable[[str], int]) -> bool:
        """Collapse the outputs the agent has just answered ``seen_calls`` times and that show
        nothing it works on, and those of its last few answers that a later output shows again.
        They sit near the end of the prompt: the cached prefix breaks only a few messages before
        its end. No note: one per call would stay in the chat for good."""
        state = session.state
        seen = state.policy.seen_calls or 1
        window = seen_toolcalls(state, max(seen, SUPERSEDED_NEAR_END))
        if not any(times >= seen for times in window.values()):
            return False
        spared = _newest_toolcalls(session, state.policy.keep_recent)
        memo = session.relevance_memo
        objects = session.working_objects()  # what is not in memory is not read again for it
        plan = plan_collapse(state, objects, self._deps.mounts.display_path, count, spared, memo)
        session.plan = plan
        # each output once, at the first request after the agent answered it (exactly then
        # when requests follow answers one for one; later when a list came in at once)
        first = [i for i, times in window.items() if times >= seen and i not in memo.answered]
        chosen = [
            i
            for i, times in window.items()
            if i in state.auto_active  # not one the agent activated: that stays
            and i not in state.pinned
            and i not in spared
            and (plan.always(i) or (i in first and not plan.kept(i)))
        ]
        memo.answered.update(i for i in first if i not in spared)
        if not chosen:
            return False
        reasons = _record(session, chosen, "seen", plan)
        ordered = tuple(state.ordered(frozenset(chosen)))
        kept = _excerpts(session, chosen, plan)
        command = c.CollapseToFit(ordered, "", plan.newer(chosen), reasons, kept)
        self._deps.runner.execute(session, lambda reads, st: command)
        return True

    def _collapse(
        self,
        session: OpenSession,
        count: Callable[[str], int],
        goal: int,
        plan: CollapsePlan,
        spared: set[str] | None,
        never: set[str] | None = None,
        why: str = "",
        context: AssembledContext | None = None,
    ) -> bool:
        """Collapse unpinned active objects until ``goal`` tokens are cleared, in the plan's
        order: for ``inline`` least recently used first, then (for a budget) largest first. A
        batch collapse (the trigger; ``spared`` given) spares the ``keep_recent`` newest tool
        outputs and what the plan keeps, and happens only if it clears at least
        ``clear_at_least`` tokens, so that each cache break pays for itself; with the policy's
        ``payback_percent`` (and the batch's ``context``) it takes only the outputs after the
        earliest point where the break pays for what it writes again (:func:`_paying`). Returns
        whether anything was collapsed."""
        state = session.state
        policy = state.policy
        inline = policy.inline_layout
        batch = spared is not None
        auto, pinned = members(state.auto_active), members(state.pinned)
        sizes: dict[str, int] = {}
        for object_id in state.active:
            obj = session.objects[object_id]
            if object_id in pinned or (batch and object_id in (spared or ())):
                continue
            if never and object_id in never:
                continue
            explicit = state.kinds.get(object_id) == "toolcall" and object_id not in auto
            if batch and (explicit or plan.kept(object_id)):
                # the agent activated it (it stays until the agent deactivates it or a budget
                # forces it out), or it shows a file the agent works on
                continue
            if isinstance(obj, ToolcallObject):
                if any(ref in pinned for ref in obj.file_refs or ()):
                    continue  # it shows a pinned file
                size = count(obj.content or "")
                if inline:  # its long arguments are shortened too
                    size += _argument_tokens(session, obj, count) // 2
            elif inline and (batch or object_id in session.inline_cache.viewed):
                continue  # inline shows files through the tool messages that read them; one
                # that none shows is shown after the chat, and only a budget takes it
            else:
                size = count(obj.content or "")
            sizes[object_id] = size
        order = sorted(
            sizes,
            key=lambda i: (
                plan.key(i),
                state.last_used.get(i, 0),
                -sizes[i] if not batch else 0,
                state.positions[i],
            ),
        )
        chosen, cleared = [], 0
        for object_id in order:
            # what a later output shows again always goes: a batch breaks the cache anyway
            if cleared >= goal and not plan.always(object_id):
                break
            chosen.append(object_id)
            cleared += sizes[object_id]
        payback = policy.payback_percent if batch else None
        # (a batch that clears too little goes nowhere anyway: no need to weigh it)
        if (
            payback is not None
            and context is not None
            and chosen
            and cleared >= policy.clear_at_least
        ):
            tails = self.context_counter(session).tails(context)
            requests = len(state.toolcall_turn) * payback / 100
            chosen = _paying(chosen, sizes, tails, requests)
            cleared = sum(sizes[i] for i in chosen)
        if not chosen or (batch and cleared < policy.clear_at_least):
            return False
        names = ", ".join(handle(state, i) if inline else i for i in chosen)
        why = "the context grew" if batch else f"of the {why or 'token budget'}"
        note = (
            f"collapsed {len(chosen)} older outputs (about {cleared} tokens) because {why}: "
            f"{names}. activate(id) shows any of them again."
        )
        newer = tuple((i, plan.superseded[i]) for i in chosen if i in plan.superseded)
        if newer:
            are = "is" if len(newer) == 1 else "are"
            note += f" {len(newer)} of them {are} shown again by later outputs: " + ", ".join(
                f"{handle(state, i)} by {handle(state, by)}" for i, by in newer
            )
            note += "."
        reasons = _record(session, chosen, "batch" if batch else "budget", plan)
        kept = _excerpts(session, chosen, plan) if batch else ()
        command = c.CollapseToFit(tuple(chosen), note, plan.newer(chosen), reasons, kept)
        self._deps.runner.execute(session, lambda reads, st: command)
        return True


def _excerpts(
    session: OpenSession, chosen: list[str], plan: CollapsePlan
) -> tuple[tuple[str, str], ...]:
    """For each of ``chosen`` (tool outputs about to collapse) that no later output shows again,
    the lines its reference keeps showing (decision 0075): those holding an identifier the
    output brought into the session that the agent named in its answer to it, with
    ``excerpt_context`` lines around each, ``excerpt_lines`` at most."""
    state = session.state
    policy = state.policy
    most = policy.excerpt_lines
    if most is None:
        return ()
    introduced = session.relevance_memo.introduced
    named: dict[str, frozenset[str]] = {}
    for object_id in chosen:
        if plan.always(object_id) or object_id in plan.stale:
            continue  # a later output shows its lines, or a later call changed its files
        own = introduced.get(object_id)
        if own and (
            said := own & answer_names(state, object_id, _call_message(session, object_id))
        ):
            named[object_id] = said
    if not named:
        return ()
    objects = session.objects.showing(named)  # whole, whatever the memory held of them
    out = []
    for object_id, names in named.items():
        obj = objects.get(object_id)
        content = obj.content if isinstance(obj, ToolcallObject) else None
        if not content:
            continue
        ranges = excerpt_ranges(content, names, context=policy.excerpt_context, most_lines=most)
        if ranges:
            out.append((object_id, excerpt(content, ranges)))
    return tuple(out)


def _call_message(session: OpenSession, object_id: str) -> tuple[int, int] | None:
    """The turn and index of the message that made the call ``object_id``, as the inline
    rendering placed it (None: not rendered), so that finding its answer reads from there."""
    cache = session.inline_cache
    position = cache.positions.get(object_id)
    if position is None or position >= len(cache.origin):
        return None
    return cache.origin[position]


def _record(
    session: OpenSession, chosen: list[str], rule: str, plan: CollapsePlan
) -> tuple[tuple[str, str], ...]:
    """Remember why each of ``chosen`` is collapsed (``selfctx bench context --losses``), and
    give the reasons its event keeps (the inspector shows them)."""
    for object_id in chosen:
        record = CollapseRecord(
            rule, plan.tier_name(object_id), object_id in plan.working, session.seq
        )
        remember_collapse(session.collapses, object_id, record)
    return tuple((i, _reason(rule, plan, i)) for i in chosen)


def _reason(rule: str, plan: CollapsePlan, object_id: str) -> str:
    """The rule that chose ``object_id``: ``shed``, ``budget``, ``seen:...`` or ``batch:...``."""
    if rule == "seen":
        return "seen:superseded" if plan.always(object_id) else "seen:unused"
    if rule != "batch":
        return rule
    if plan is NO_PLAN:
        return "batch:lru"
    tier = plan.key(object_id)
    if tier == SUPERSEDED:
        return "batch:superseded"
    return "batch:unused" if tier <= UNUSED else "batch:over-keep"


def _paying(
    chosen: list[str], sizes: dict[str, int], tails: dict[str, int], requests: float
) -> list[str]:
    """The outputs of ``chosen`` at and after the earliest one where collapsing them pays for the
    cache break: a provider writes again the ``tails`` of the prompt after the break (at
    ``CACHE_WRITE`` a token instead of ``CACHE_READ``), and each of the next ``requests``
    requests reads ``cleared`` tokens fewer (``CACHE_READ`` each). An output not in ``tails``
    (not in the chat, or new in this request: in no cache yet) breaks nothing and always goes.
    None if no point pays."""
    placed = sorted((i for i in chosen if i in tails), key=lambda i: -tails[i])
    free = [i for i in chosen if i not in tails]
    after = sum(sizes[i] for i in placed)
    for n, first in enumerate(placed):
        written = tails[first] - after
        if CACHE_READ * after * requests >= (CACHE_WRITE - CACHE_READ) * written:
            taken = set(placed[n:]) | set(free)
            return [i for i in chosen if i in taken]
        after -= sizes[first]
    return [i for i in chosen if i in free]


CACHE_READ = ANTHROPIC.read
"""What a token read from a provider's prompt cache costs, in input tokens."""
CACHE_WRITE = ANTHROPIC.write
"""What a token written to it costs (Anthropic's write premium; OpenAI's is 1.0: the stricter
of the two is the one a batch must pay for)."""


def _displaced_now(
    session: OpenSession, plan: CollapsePlan, spared: set[str], count: Callable[[str], int]
) -> CollapsePlan:
    """The batch's plan with the kept views that the newest outputs displace from the working
    set's room taken now (decision 0069), each that clears ``clear_at_least`` on its own: the
    next request's batch would collapse them, and a collapse breaks the provider's cached prefix
    at the collapsed output, so everything after it is written again. Made in the request the
    newest output arrives, the break comes before the newest is ever written, which is then
    written once instead of twice. A smaller view waits for the next request, as before (a
    forecast can be wrong: the agent's next message changes the working set)."""
    least = session.state.policy.clear_at_least
    now = {
        object_id: plan.foreseen[object_id]
        for object_id, tier in plan.tiers.items()
        if tier == KEEP
        and plan.foreseen.get(object_id, KEEP) != KEEP
        and object_id not in spared
        and count(getattr(session.objects.get(object_id), "content", None) or "") >= least
    }
    if not now:
        return plan
    return attrs.evolve(plan, tiers={**plan.tiers, **now})


def foreseen_collapses(session: OpenSession, count: Callable[[str], int]) -> frozenset[str] | None:
    """The active tool outputs the last assembly's plan expects the next request to collapse
    if the agent goes on as it did (None: its policy makes no such plan): the newest outputs
    that will not be kept once the agent has answered them (the seen collapse), and the kept
    outputs the newest displace from the working set's room (``CollapsePlan.foreseen``) when
    together they clear what a batch must (``clear_at_least``). What places the provider's
    cache marks reads it (decision 0069): a mark before an output about to go is read by the
    next request; one after it is not."""
    plan = session.plan
    if plan is None or not plan.foreseen:
        return None
    state = session.state
    newest = _newest_toolcalls(session, state.policy.keep_recent)
    answered, displaced = set(), set()
    for object_id in state.active:
        if object_id not in state.auto_active or object_id in state.pinned:
            continue  # the agent activated it, or pinned it: it stays
        tier = plan.foreseen.get(object_id)
        if tier is None or tier == KEEP:
            continue
        if object_id in newest:
            answered.add(object_id)
        elif plan.tiers.get(object_id) == KEEP:
            displaced.add(object_id)
    batch = sum(count(getattr(session.objects.get(i), "content", None) or "") for i in displaced)
    if batch < state.policy.clear_at_least:
        displaced.clear()
    return frozenset(answered | displaced)


def _after_seen(session: OpenSession, before: SessionState) -> CollapsePlan | None:
    """The plan of the state the seen collapse left, from the plan it made on ``before``
    (None: plan again). That collapse changes only the active set, and only by outputs that
    the plan does not keep: the facts the plan is made of (what later outputs show again,
    which files changed, the working set's weights, the identifiers each output brought in)
    belong to the outputs and the chat, and the room of the kept ones is taken by the same
    outputs, so the plan of what stays active is the old one without the collapsed outputs
    (decision 0080)."""
    plan, after = session.plan, session.state
    if not isinstance(plan, CollapsePlan) or not plan.tiers:
        return None
    if not (
        after.turns is before.turns
        and after.index is before.index
        and after.positions is before.positions
        and after.toolcall_turn is before.toolcall_turn
        and after.policy is before.policy
    ):
        return None
    active = members(after.active)
    gone = members(before.active) - active
    if any(plan.tiers.get(i) in _ROOM or plan.foreseen.get(i) in _ROOM for i in gone):
        return None  # it took room among the kept ones: their ranks may change, plan again
    if not _shown(session, gone) <= _shown(session, active):
        return None  # a file only it showed leaves the working set's candidates: plan again
    session.relevance_memo.forget(active)  # what planning again would forget

    def kept(table: Mapping[str, _V]) -> dict[str, _V]:
        return {i: v for i, v in table.items() if i in active}

    tiers = kept(plan.tiers)
    foreseen = tiers if plan.foreseen is plan.tiers else kept(plan.foreseen)
    working = frozenset(i for i in plan.working if i in active)
    return CollapsePlan(tiers, kept(plan.superseded), working, kept(plan.stale), foreseen)


def _shown(session: OpenSession, object_ids: Iterable[str]) -> set[str]:
    """The files the views of these tool outputs show (not those they changed)."""
    out: set[str] = set()
    for object_id in object_ids:
        obj = session.objects.meta(object_id)
        if isinstance(obj, ToolcallObject):
            out.update(v.file for v in obj.file_views or () if v.kind != "change")
    return out


def _argument_tokens(session: OpenSession, obj: ToolcallObject, count: Callable[[str], int]) -> int:
    """Tokens of a tool call's arguments as JSON, remembered by version: a batch weighs every
    active output at every request (the memo keeps what is active, decision 0080)."""
    memo = session.argument_tokens
    held = memo.get(obj.id)
    if held is not None and held[0] == obj.object_hash:
        return held[1]
    n = count(json.dumps(thaw_json(obj.args), ensure_ascii=False))
    if len(memo) >= 2 * len(session.state.active) + 16:
        active = members(session.state.active)
        for object_id in [i for i in memo if i not in active]:
            del memo[object_id]
    memo[obj.id] = (obj.object_hash, n)
    return n


def _newest_toolcalls(session: OpenSession, keep: int) -> set[str]:
    """Ids of the ``keep`` most recently recorded tool calls."""
    out: set[str] = set()
    kinds = session.state.kinds
    for object_id in reversed(session.state.index):
        if len(out) >= keep:
            break
        if kinds.get(object_id) == "toolcall":
            out.add(object_id)
    return out


def _truncate(
    context: AssembledContext,
    count: Callable[[str], int],
    budget: int,
    why: str = "the budget",
) -> AssembledContext:
    """Leave the oldest messages out of the prompt (never out of the store) until it fits, and
    say so in its first chat line. Whole turns go first (the cut before a user message); should
    the latest turn alone be too long, its oldest exchanges go (the cut before an assistant
    message, with its tool results), the latest staying. Should that not be enough (one output
    larger than the limit), the longest texts left are shortened, each saying how much of it
    was left out."""
    chat = list(context.chat)
    fixed = context_tokens(attrs.evolve(context, chat=()), count)
    alone = attrs.evolve(context, system_prompt="", metadata=(), active=())
    sizes = [context_tokens(attrs.evolve(alone, chat=(m,)), count) for m in chat]
    # the latest exchange: the last assistant message and its tool results (else the last
    # user message)
    last = max((n for n, m in enumerate(chat) if m.role == "assistant"), default=-1)
    if last < 0:
        last = max((n for n, m in enumerate(chat) if m.role == "user"), default=0)
    note_size = count(_truncation_note(len(chat), budget, why))
    total = fixed + sum(sizes) + note_size
    start = 0
    for cut in (("user",), ("user", "assistant")):  # whole turns first, then exchanges
        while total > budget and start < last:
            nxt = start + 1
            while nxt < last and chat[nxt].role not in cut:
                nxt += 1
            if cut == ("user",) and chat[nxt].role != "user":
                break  # no later turn: the latest one stays whole, unless it must not
            total -= sum(sizes[start:nxt])
            start = nxt
    kept: list[RenderedMessage | ActiveBlock] = [*chat[start:], *context.active]
    sizes = sizes[start:] + [count(b.text) for b in context.active]
    stuck: set[int] = set()  # items whose text no longer shrinks (their calls' arguments weigh)
    while total > budget:
        open_items = [n for n in range(len(kept)) if n not in stuck]
        longest = max(open_items, key=sizes.__getitem__, default=None)
        if longest is None or sizes[longest] <= _SHORTEST:
            break  # what is left is the system prompt, not the chat
        item = kept[longest]
        body = item.text if isinstance(item, RenderedMessage) else item.content or ""
        keep_chars = len(body) * max(0, sizes[longest] - (total - budget)) // sizes[longest]
        keep_chars = min(keep_chars, len(body) // 2)
        shortened = (
            f"{body[:keep_chars]}\n[... {len(body) - keep_chars} characters left out to fit {why}]"
        )
        if isinstance(item, RenderedMessage):
            message = attrs.evolve(item, text=shortened)
            kept[longest] = message
            size = context_tokens(attrs.evolve(alone, chat=(message,)), count)
        else:
            block = attrs.evolve(item, content=shortened)
            kept[longest] = block
            size = count(block.text)
        if size >= sizes[longest]:
            kept[longest] = item  # shortening its text cannot make it smaller: as it was
            stuck.add(longest)
            continue
        total -= sizes[longest] - size
        sizes[longest] = size
    messages = [m for m in kept if isinstance(m, RenderedMessage)]
    blocks = tuple(b for b in kept if isinstance(b, ActiveBlock))
    note = RenderedMessage("user", _truncation_note(start, budget, why))
    return attrs.evolve(context, chat=(note, *messages), active=blocks)


_SHORTEST = 50
"""Messages of this many tokens or fewer are never shortened."""


def _truncation_note(left_out: int, budget: int, why: str) -> str:
    return f"[context] {left_out} earlier messages left out to fit {why} of {budget} tokens"


def _unbudgeted(policy: PolicyConfig) -> bool:
    """Whether ``policy`` sets no token limit: the context is then shown as rendered, and nothing
    is counted or planned."""
    return (
        policy.trigger_tokens is None
        and policy.budget_tokens is None
        and policy.max_input_tokens is None
    )
