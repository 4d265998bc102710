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
from collections.abc import Callable

import attrs
from pyrsistent import thaw

from selfctx.application.budget import SHED_FRACTION, TokenBudget, token_budget
from selfctx.application.ports.tokenizer import Tokenizer
from selfctx.application.runner import OpenSession
from selfctx.application.tokens import ContextCounter, context_tokens
from selfctx.application.usecases.base import Deps
from selfctx.application.usecases.collapse_order import NO_PLAN, CollapsePlan, plan_collapse
from selfctx.application.usecases.compaction import CompactChat
from selfctx.application.usecases.shedding import files_to_shed, shedding_note
from selfctx.domain.chat import AssistantMessage, ToolResult
from selfctx.domain.errors import SelfContextError
from selfctx.domain.inline import handle, render_inline
from selfctx.domain.objects import ToolcallObject
from selfctx.domain.relevance import SUPERSEDED, UNUSED
from selfctx.domain.rendering import AssembledContext, RenderedMessage, render_context
from selfctx.domain.session import commands as c
from selfctx.domain.session.state import SessionState

__all__ = ["AssembleContext", "BudgetExceeded"]


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
        if state.policy.inline_layout:
            return render_inline(state, session.objects, prompt, display, session.inline_cache)
        return render_context(state, session.objects, prompt, display, session.render_cache)

    def budget(self, session: OpenSession) -> TokenBudget:
        """The token-budget report of the context the model sees now."""
        context = self(session)
        return token_budget(context, session.state.policy, self._counter(session))

    def tokens(self, session: OpenSession, context: AssembledContext) -> int:
        """Tokens of ``context`` (reusing the counts of messages counted before)."""
        counter = session.context_counter
        if counter is None:
            counter = session.context_counter = ContextCounter(self._counter(session))
        return int(counter(context))

    def __call__(self, session: OpenSession) -> AssembledContext:
        policy = session.state.policy
        if policy.compaction_trigger_tokens is not None and self._compact is not None:
            self._compact(session, self._counter(session))
        context = self.render(session)
        if (
            policy.trigger_tokens is None
            and policy.budget_tokens is None
            and policy.max_input_tokens is None
        ):
            return context
        count = self._counter(session)
        if policy.seen_calls is not None and self._collapse_seen(session, count):
            context = self.render(session)
        total = self.tokens(session, context)
        trigger = policy.trigger_tokens
        if trigger is not None and total > trigger:
            spared = _newest_toolcalls(session, policy.keep_recent)
            plan = plan_collapse(
                session.state, session.objects, self._deps.mounts.display_path, count, spared
            )
            goal = max(policy.clear_at_least, total - trigger)
            if self._collapse(session, count, goal, plan, spared):
                context = self.render(session)
                total = self.tokens(session, context)
        limit = policy.max_input_tokens
        if limit is not None and total > SHED_FRACTION * limit:
            chosen, cleared = files_to_shed(session, count, total - int(SHED_FRACTION * limit))
            if chosen:
                note = shedding_note(session, chosen, cleared, total, limit)
                command = c.CollapseToFit(
                    tuple(chosen), note, reasons=tuple((i, "shed") for i in chosen)
                )
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
        return context

    def _collapse_seen(self, session: OpenSession, count: Callable[[str], int]) -> bool:
        """Collapse the outputs the agent has just answered ``seen_calls`` times and that show
        nothing it works on, and those of its last few answers that a later output shows again.
        They sit near the end of the prompt: the cached prefix breaks only a few messages before
        its end. No note: one per call would stay in the chat for good."""
        state = session.state
        seen = state.policy.seen_calls or 1
        window = _seen_toolcalls(state, max(seen, SUPERSEDED_NEAR_END))
        if not any(times >= seen for times in window.values()):
            return False
        spared = _newest_toolcalls(session, state.policy.keep_recent)
        plan = plan_collapse(state, session.objects, self._deps.mounts.display_path, count, spared)
        chosen = [
            i
            for i, times in window.items()
            if i in state.active
            and i not in state.pinned
            and i not in spared
            and (plan.always(i) or (times == seen and plan.key(i) <= UNUSED))
        ]
        if not chosen:
            return False
        newer = tuple((i, plan.superseded[i]) for i in chosen if i in plan.superseded)
        reasons = tuple((i, "seen:superseded" if plan.always(i) else "seen:unused") for i in chosen)
        command = c.CollapseToFit(tuple(state.ordered(frozenset(chosen))), "", newer, reasons)
        self._deps.runner.execute(session, lambda reads, st: command)
        return True

    def _collapse(
        self,
        session: OpenSession,
        count: Callable[[str], int],
        goal: int,
        plan: CollapsePlan,
        spared: set[str] | None,
    ) -> bool:
        """Collapse unpinned active objects until ``goal`` tokens are cleared, in the plan's
        order: for ``inline`` least recently used first, then (for a budget) largest first. A
        batch collapse (the trigger; ``spared`` given) spares the ``keep_recent`` newest tool
        outputs and what the plan keeps, and happens only if it clears at least
        ``clear_at_least`` tokens, so that each cache break pays for itself. Returns whether
        anything was collapsed."""
        state = session.state
        policy = state.policy
        inline = policy.inline_layout
        batch = spared is not None
        sizes: dict[str, int] = {}
        for object_id in state.active:
            obj = session.objects[object_id]
            if object_id in state.pinned or (batch and object_id in (spared or ())):
                continue
            if batch and plan.kept(object_id):
                continue  # it shows a file the agent works on
            if isinstance(obj, ToolcallObject):
                if any(ref in state.pinned for ref in obj.file_refs or ()):
                    continue  # it shows a pinned file
                size = count(obj.content or "")
                if inline:  # its long arguments are shortened too
                    size += count(json.dumps(thaw(obj.args), ensure_ascii=False)) // 2
            elif inline:
                continue  # inline shows files through the tool messages that read them
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
        if not chosen or (batch and cleared < policy.clear_at_least):
            return False
        names = ", ".join(handle(state, i) if inline else i for i in chosen)
        why = "the context grew" if batch else "of the token budget"
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
        reasons = tuple((i, _reason(plan, i, batch)) for i in chosen)
        command = c.CollapseToFit(tuple(chosen), note, newer, reasons)
        self._deps.runner.execute(session, lambda reads, st: command)
        return True


def _reason(plan: CollapsePlan, object_id: str, batch: bool) -> str:
    """The rule that chose ``object_id`` in a batch or a budget collapse (its event keeps it)."""
    if not batch:
        return "budget"
    if plan is NO_PLAN:
        return "batch:lru"
    tier = plan.key(object_id)
    if tier == SUPERSEDED:
        return "batch:superseded"
    return "batch:unused" if tier <= UNUSED else "batch:over-keep"


SUPERSEDED_NEAR_END = 4
"""A superseded output among the agent's last this many answers collapses at once."""


def _seen_toolcalls(state: SessionState, most: int) -> dict[str, int]:
    """The tool calls the agent has answered 1 to ``most`` times, with how many times."""
    answered = 0
    out: dict[str, int] = {}
    for turn in reversed(state.turns):
        for message in reversed(turn.messages):
            if isinstance(message, AssistantMessage):
                answered += 1
                if answered > most:
                    return out
            elif isinstance(message, ToolResult) and answered >= 1:
                out[message.toolcall_id] = answered
    return out


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
    context: AssembledContext, count: Callable[[str], int], budget: int
) -> AssembledContext:
    """Leave the oldest whole turns out of the prompt until it fits (cut only before a user
    message, so no tool result loses its call)."""
    chat = list(context.chat)
    fixed = context_tokens(attrs.evolve(context, chat=()), count)
    alone = attrs.evolve(context, system_prompt="", metadata=(), active=())
    sizes = [context_tokens(attrs.evolve(alone, chat=(m,)), count) for m in chat]
    total = fixed + sum(sizes)
    start = 0
    while total > budget and start < len(chat):
        nxt = start + 1
        while nxt < len(chat) and chat[nxt].role != "user":
            nxt += 1
        total -= sum(sizes[start:nxt])
        start = nxt
    note = RenderedMessage(
        "user", f"[context] {start} earlier messages left out to fit the budget of {budget} tokens"
    )
    return attrs.evolve(context, chat=(note, *chat[start:]))
