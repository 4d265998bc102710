"""``selfctx bench context --long-session``: the development trajectories as ONE session, so that
the chat alone outgrows a 32k budget; tokens, peak and cost with and without compaction.

The trajectories are concatenated in name order: the first one's system prompt, then every
message of each (its own system prompt left out); provider call ids that recur (``toolu_01``)
are told apart by the session's id scheme (decision 0030). Each task's first user message is a
change of topic, as a long real session has them. The contenders are the default layout policy
as it is, and the same with compaction (decision 0043) at a 32k input limit: the chat's share is
the compaction trigger.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

import attrs

from selfctx.adapters.bench.context import run_context_bench
from selfctx.adapters.harness.trajectories import Trajectory
from selfctx.adapters.harness.trajectories.model import ModelCall
from selfctx.application.policies import DEFAULT_POLICY, policy_by_name
from selfctx.application.ports.tokenizer import Tokenizer
from selfctx.application.service import ContextService

__all__ = ["BUDGET", "COMPACTION", "concatenate", "run_long_session"]

BUDGET: Final = 32_000
"""The model input limit of the long session."""
COMPACTION: Final[dict[str, Any]] = {
    "max_input_tokens": BUDGET,
    "compaction_trigger_tokens": 12_000,
    "verbatim_window_tokens": 4_000,
    "summary_budget_tokens": 500,
    "min_verbatim_exchanges": 2,
}
"""The compaction settings measured: seed 001's window, summary and exchanges, and a trigger at
three eighths of the 32k limit (seed 001's 24,000 is three sixteenths of a 128k one; a 32k window
leaves less room for everything else)."""


def concatenate(trajectories: Sequence[Trajectory]) -> Trajectory:
    """One session made of ``trajectories``, one after another."""
    if not trajectories:
        raise ValueError("no trajectories to concatenate")
    messages: list[Any] = []
    calls: list[ModelCall] = []
    first = trajectories[0]
    messages += [m for m in first.messages if m.get("role") == "system"][:1]
    for trajectory in trajectories:
        kept = [i for i, m in enumerate(trajectory.messages) if m.get("role") != "system"]
        offset = {index: len(messages) + n for n, index in enumerate(kept)}
        messages += [trajectory.messages[i] for i in kept]
        for call in trajectory.calls:
            if call.position in offset:
                calls.append(ModelCall(offset[call.position], call.recorded_prompt_tokens))
    return attrs.evolve(
        first,
        name=f"long-session ({len(trajectories)} trajectories)",
        format="concatenated",
        messages=tuple(messages),
        calls=tuple(calls),
        workspace="/",
        filesystem_id=None,
        recorded_total_prompt_tokens=None,
        notes=(),
    )


def run_long_session(
    trajectories: Sequence[Trajectory],
    make_service: Callable[[Trajectory], ContextService],
    tokenizer: Tokenizer,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Replay the concatenated session naive, under the default policy, and with compaction."""
    session = concatenate(trajectories)
    default = policy_by_name(DEFAULT_POLICY)
    policies = {
        DEFAULT_POLICY: default,
        f"{DEFAULT_POLICY}+compaction": attrs.evolve(default, **COMPACTION),
    }
    result = run_context_bench([session], make_service, tokenizer, policies, progress, limit=BUDGET)
    result.pop("per_call", None)
    result["default_policy"] = DEFAULT_POLICY
    result["budget"] = BUDGET
    result["compaction"] = dict(COMPACTION)
    result["calls"] = len(session.calls)
    result["messages"] = len(session.messages)
    return result
