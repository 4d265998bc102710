"""CompactChat: when the chat alone outgrows its share, compact its older turns (decision 0043).

Run at assembly, before tool outputs collapse: once the chat's tokens pass the policy's trigger,
the turns before the verbatim window (or, after a confident topic boundary, before the boundary)
are replaced in the prompt by one summary message, as one command (``CompactChat``) whose
summary is a new version of the session's summary object. Nothing leaves the session: the turns
stay in the state, the log, search and ``selfctx show --at-turn``, and ``activate("summary")``
shows them verbatim.

A compaction is a cache break, so it happens only when it clears at least ``clear_at_least``
tokens (and at least one) net of its summary. The summarizer may fail or answer nonsense: the
boundary then defaults to none (seed 001's safe default) and the summary to the extractive one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Final

import attrs

from selfctx.application.ports.summarizer import Excerpt, Summarizer, SummarizerError
from selfctx.application.runner import OpenSession
from selfctx.application.usecases.base import Deps
from selfctx.domain.chat import (
    AssistantMessage,
    ContextNote,
    ToolResult,
    Turn,
    UserMessage,
    thaw_json,
)
from selfctx.domain.compaction import (
    MAX_MESSAGES,
    SAFE_BOUNDARY,
    Case,
    CompactionPlan,
    plan_compaction,
    summary_text,
)
from selfctx.domain.objects import SummaryObject, ToolcallObject
from selfctx.domain.rendering import toolcall_ref
from selfctx.domain.session import commands as c

__all__ = ["CompactChat", "CompactionReport", "excerpts", "turn_tokens"]

_TOOL_EXCERPT: Final = 600
"""Characters of a tool output a summarizer sees (its head; the output stays an object)."""
_CHARS_PER_TOKEN: Final = 4


def turn_tokens(session: OpenSession, turn: Turn, count: Callable[[str], int]) -> int:
    """About what a turn weighs in the prompt: its messages, a tool's output in full while it is
    active and its one-line reference once collapsed (both layouts render about that)."""
    state = session.state
    total = 0
    for message in turn.messages:
        if isinstance(message, UserMessage | ContextNote):
            total += count(message.text)
        elif isinstance(message, AssistantMessage):
            total += count(message.text)
            for call in message.tool_calls:
                total += count(call.name) + count(json.dumps(thaw_json(call.arguments)))
        elif message.toolcall_id in state.active:
            obj = session.objects.get(message.toolcall_id)
            if isinstance(obj, ToolcallObject):
                total += count(obj.content or "")
        else:  # its one-line reference: no content needed (not read again from the store)
            obj = session.objects.meta(message.toolcall_id)
            if isinstance(obj, ToolcallObject):
                total += count(toolcall_ref(obj))
    return total


def excerpts(session: OpenSession, turns: list[Turn]) -> tuple[list[Excerpt], dict[int, int]]:
    """The transcript of ``turns`` as a summarizer reads it, and the turn of each message."""
    out: list[Excerpt] = []
    turn_of: dict[int, int] = {}
    # The outputs' heads are read: what the session does not hold is read back in one batch.
    session.objects.load(
        m.toolcall_id for turn in turns for m in turn.messages if isinstance(m, ToolResult)
    )
    for turn in turns:
        for message in turn.messages:
            number = len(out)
            if isinstance(message, UserMessage):
                out.append(Excerpt(number, "user", message.text))
            elif isinstance(message, AssistantMessage):
                calls = "; ".join(
                    f"{call.name} {json.dumps(thaw_json(call.arguments), ensure_ascii=False)}"
                    for call in message.tool_calls
                )
                text = message.text + (f" [calls: {calls}]" if calls else "")
                out.append(Excerpt(number, "assistant", text))
            elif isinstance(message, ToolResult):
                obj = session.objects.get(message.toolcall_id)
                if not isinstance(obj, ToolcallObject):
                    continue
                head = (obj.content or "")[:_TOOL_EXCERPT]
                out.append(Excerpt(number, "tool", f"{obj.tool} ({obj.status}): {head}"))
            else:
                out.append(Excerpt(number, "note", message.text))
            turn_of[number] = turn.number
    return out, turn_of


@attrs.frozen
class CompactionReport:
    """What a compaction did."""

    case: Case
    """``summarize`` or ``truncate``."""
    upto: int
    """Turns before this one are compacted now."""
    summary: str
    cleared: int
    """Tokens the chat lost, net of the summary (an estimate by the session's tokenizer)."""


class CompactChat:
    """Compact the session's older turns when its chat is over the trigger (or, ``force``d,
    whenever there is anything to compact); the report, or None when nothing was done."""

    def __init__(self, deps: Deps, summarizer: Summarizer, fallback: Summarizer) -> None:
        self._deps = deps
        self._summarizer = summarizer
        self._fallback = fallback
        """Deterministic (the extractive summarizer): used when ``summarizer`` fails."""

    def __call__(
        self, session: OpenSession, count: Callable[[str], int], *, force: bool = False
    ) -> CompactionReport | None:
        state = session.state
        policy = state.policy
        trigger = policy.compaction_trigger_tokens
        if trigger is None and not force:
            return None
        sizes = [turn_tokens(session, turn, count) for turn in state.turns]
        old = count(summary_text(state.compacted, state.summary)) if state.compacted else 0
        if not force and sum(sizes[state.compacted :]) + old <= (trigger or 0):
            return None
        open_turns = list(state.turns[state.compacted :])
        transcript, turn_of = excerpts(session, open_turns)
        try:
            boundary = self._summarizer.detect_boundary(transcript[-MAX_MESSAGES:])
        except SummarizerError:
            boundary = SAFE_BOUNDARY
        plan = plan_compaction(
            sizes,
            state.compacted,
            turn_of.get(boundary.index) if boundary.index is not None else None,
            boundary,
            window=policy.verbatim_window_tokens,
            min_exchanges=policy.min_verbatim_exchanges,
        )
        if plan.case == "none":
            return None
        text = self._summary(session, plan)
        new = count(summary_text(plan.upto, text))
        cleared = sum(sizes[state.compacted : plan.upto]) + old - new
        if not force and cleared < max(1, policy.clear_at_least):
            return None  # a cache break that saves too little (asked for, it is made anyway)
        summary = SummaryObject.build(session.session_id, text, case=plan.case, upto=plan.upto)
        command = c.CompactChat(summary)
        self._deps.runner.execute(session, lambda reads, st: command)
        return CompactionReport(plan.case, plan.upto, text, cleared)

    def _summary(self, session: OpenSession, plan: CompactionPlan) -> str:
        state = session.state
        budget = state.policy.summary_budget_tokens
        limit = budget * _CHARS_PER_TOKEN
        if plan.case == "truncate":
            return f"(an earlier topic, left out without a summary: {plan.reason})"[:limit]
        covered, _ = excerpts(session, list(state.turns[state.compacted : plan.upto]))
        try:
            text = self._summarizer.summarize(covered, state.summary, budget)
        except SummarizerError:
            text = ""
        if not text.strip():
            text = self._fallback.summarize(covered, state.summary, budget)
        return text.strip()[:limit]
