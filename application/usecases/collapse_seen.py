"""Which outputs the collapse of answered outputs has looked at (``RelevanceMemo.answered``)."""

from __future__ import annotations

from selfctx.domain.chat import AssistantMessage, ToolResult
from selfctx.domain.session.state import SessionState

__all__ = ["SUPERSEDED_NEAR_END", "answered_earlier", "seen_toolcalls", "sent_earlier"]

SUPERSEDED_NEAR_END = 4
"""A superseded output among the agent's last this many answers collapses at once."""


def seen_toolcalls(state: SessionState, most: int) -> dict[str, int]:
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


def answered_earlier(state: SessionState) -> set[str]:
    """The outputs that a server which assembled after each of the agent's answers has looked at
    before its next request: those answered more than ``seen_calls`` times (it looks at each
    once, at the first request after the agent answered it that often). What a resumed session
    knows of them, so that its first request collapses what the uninterrupted session's would
    (without it, every output of the last few answers would be looked at again)."""
    seen = state.policy.seen_calls
    if seen is None:
        return set()
    window = seen_toolcalls(state, max(seen, SUPERSEDED_NEAR_END))
    return {i for i, times in window.items() if times > seen and i in state.active}


def sent_earlier(state: SessionState) -> int:
    """How many leading messages of the rendered chat the request before the agent's last answer
    held: everything before that answer (and the summary of compacted turns, which is one
    message). A resumed session's provider cache holds them, as the uninterrupted session's
    counter knows."""
    turns = state.turns
    before = 1 if state.compacted else 0
    last = None
    for number in range(state.compacted, len(turns)):
        for index, message in enumerate(turns[number].messages):
            if isinstance(message, AssistantMessage):
                last = before + index
        before += len(turns[number].messages)
    return last if last is not None else before
