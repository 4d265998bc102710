"""AssembleContext (SSOT §4) under the session's layout and collapse policy.

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
from selfctx.application.usecases.compaction import CompactChat
from selfctx.application.usecases.shedding import files_to_shed, shedding_note
from selfctx.domain.errors import SelfContextError
from selfctx.domain.inline import handle, render_inline
from selfctx.domain.objects import ToolcallObject
from selfctx.domain.rendering import AssembledContext, RenderedMessage, render_context
from selfctx.domain.session import commands as c

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
        if state.policy.name == "inline":
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
        total = self.tokens(session, context)
        if policy.trigger_tokens is not None and total > policy.trigger_tokens:
            goal = max(policy.clear_at_least, total - policy.trigger_tokens)
            if self._collapse(session, count, goal, batch=True):
                context = self.render(session)
                total = self.tokens(session, context)
        limit = policy.max_input_tokens
        if limit is not None and total > SHED_FRACTION * limit:
            chosen, cleared = files_to_shed(session, count, total - int(SHED_FRACTION * limit))
            if chosen:
                note = shedding_note(session, chosen, cleared, total, limit)
                command = c.CollapseToFit(tuple(chosen), note)
                self._deps.runner.execute(session, lambda reads, st: command)
                context = self.render(session)
                total = self.tokens(session, context)
        budget = policy.budget_tokens
        if budget is not None and total > budget:
            if self._collapse(session, count, total - budget, batch=False):
                context = self.render(session)
                total = self.tokens(session, context)
            if total > budget:
                if not policy.emergency_truncation:
                    raise BudgetExceeded(session.session_id, budget, total)
                context = _truncate(context, count, budget)
        return context

    def _collapse(
        self,
        session: OpenSession,
        count: Callable[[str], int],
        goal: int,
        *,
        batch: bool,
    ) -> bool:
        """Collapse unpinned active objects until ``goal`` tokens are cleared: least recently
        used first, then (for a budget) largest first. A ``batch`` collapse (the trigger) spares
        the ``keep_recent`` newest tool outputs and happens only if it clears at least
        ``clear_at_least`` tokens, so that each cache break pays for itself. Returns whether
        anything was collapsed."""
        state = session.state
        policy = state.policy
        inline = policy.name == "inline"
        spared = _newest_toolcalls(session, policy.keep_recent) if batch else set()
        sizes: dict[str, int] = {}
        for object_id in state.active:
            obj = session.objects[object_id]
            if object_id in state.pinned or object_id in spared:
                continue
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
            sizes, key=lambda i: (state.last_used.get(i, 0), -sizes[i] if not batch else 0)
        )
        chosen, cleared = [], 0
        for object_id in order:
            if cleared >= goal:
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
        command = c.CollapseToFit(tuple(chosen), note)
        self._deps.runner.execute(session, lambda reads, st: command)
        return True


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
