"""``selfctx bench context``: tokens, peak and cache-adjusted cost of each layout policy against
the naive harness, replaying real trajectories.

For every model call of every trajectory, each contender's prompt is counted with one
:class:`PromptCounter` (the rule of ``selfctx.adapters.harness.tokens``): the *naive* prompt is the
list
the harness itself sent; a policy's is the request the context manager assembles. Per contender:

* ``tokens``: input tokens summed over all calls;
* ``peak``: the largest single prompt;
* ``cost``: what a provider with prompt caching bills, in token units — the longest common
  prefix with the previous call's prompt at 0.1 (a cache read), the rest at 1.25 (a cache write);
* ``used``, ``visible``, ``recall``: lines of each recorded response copied from an earlier tool
  output, how many of them the contender's prompt held, and their ratio
  (``selfctx.adapters.harness.recall``; naive is 1.0 by construction, and is measured all the
  same).

The common prefix is taken over the prompt's texts in order: every leading text equal to the
previous call's counts in full, and of the first one that differs, the tokens of its common
leading characters. After each replay every collapsed tool output is activated and compared, byte
for byte, with what the tool returned.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from selfctx.adapters.bench.losses import LossCollector, summarize
from selfctx.adapters.bench.peers import Peer
from selfctx.adapters.harness.recall import Recall, used_lines, visible_lines
from selfctx.adapters.harness.replay import replay, replay_filesystem_id
from selfctx.adapters.harness.tokens import PromptCounter, request_texts
from selfctx.adapters.harness.tools import handle_context_tool
from selfctx.adapters.harness.trajectories import (
    Trajectory,
    default_directory,
    load,
    trajectory_files,
)
from selfctx.application.ports.tokenizer import Tokenizer
from selfctx.application.service import ContextService
from selfctx.domain.objects import ToolcallObject
from selfctx.domain.session.state import PolicyConfig

__all__ = ["CACHE_READ", "CACHE_WRITE", "Contender", "run_context_bench", "trajectories_in"]

CACHE_READ = 0.1
CACHE_WRITE = 1.25


@attrs.define
class Contender:
    """Running figures of one contender (naive or a policy) over calls."""

    tokens: int = 0
    peak: int = 0
    cost: float = 0.0
    per_call: list[int] = attrs.field(factory=list)
    retrievable: int = 0
    collapsed: int = 0
    limit: int | None = None
    """The model's input limit, when the run has one: calls over it are counted."""
    over_limit: int = 0
    recall: Recall = attrs.field(factory=Recall)
    _previous: list[str] = attrs.field(factory=list)

    def add(self, texts: list[str], count: Callable[[str], int]) -> None:
        size = sum(count(t) for t in texts)
        shared = _common_prefix_tokens(self._previous, texts, count)
        self.tokens += size
        self.peak = max(self.peak, size)
        self.cost += CACHE_READ * shared + CACHE_WRITE * (size - shared)
        self.per_call.append(size)
        self._previous = texts
        if self.limit is not None and size > self.limit:
            self.over_limit += 1

    def figures(self) -> dict[str, Any]:
        out: dict[str, Any] = {"tokens": self.tokens, "peak": self.peak, "cost": round(self.cost)}
        out.update(self.recall.figures())
        if self.limit is not None:
            out["over_limit"] = self.over_limit
        if self.collapsed or self.retrievable:
            out["collapsed_outputs"] = self.collapsed
            out["retrievable"] = self.retrievable
        return out


def _common_prefix_tokens(
    previous: Sequence[str], current: Sequence[str], count: Callable[[str], int]
) -> int:
    shared = 0
    for old, new in zip(previous, current, strict=False):
        if old == new:
            shared += count(new)
            continue
        n = 0  # characters in common (not path components: these are prompt texts)
        for a, b in zip(old, new, strict=False):
            if a != b:
                break
            n += 1
        return shared + (count(new[:n]) if n else 0)
    return shared


def trajectories_in(paths: Iterable[str | os.PathLike[str]]) -> list[Trajectory]:
    """Every trajectory in the given files and directories (directories searched for the known
    formats), in name order."""
    out: list[Trajectory] = []
    for path in paths:
        p = Path(path)
        files = trajectory_files(p) if p.is_dir() else [p]
        for file in files:
            out.extend(load(file))
    return out


def _check_retrievable(
    service: ContextService, session_id: str, trajectory: Trajectory, figures: Contender
) -> None:
    """Activate every collapsed tool output and compare it with the tool's own output."""
    outputs = {
        str(m.get("tool_call_id")): m.get("content")
        for m in trajectory.messages
        if m.get("role") == "tool"
    }
    state = service.state(session_id)
    inline = state.policy.inline_layout
    for object_id in list(state.pool - state.active):
        obj = service.object(session_id, object_id)
        if not isinstance(obj, ToolcallObject):
            continue
        figures.collapsed += 1
        answer = handle_context_tool(service, session_id, "activate", {"id": object_id})
        shown: str | None
        if inline:
            shown = answer.message.split("\n", 1)[1] if "\n" in answer.message else ""
        else:
            blocks = {b.object_id: b.content for b in service.assemble(session_id).active}
            shown = blocks.get(object_id)
            service.deactivate(session_id, object_id)
        original = outputs.get(object_id, obj.content)
        if answer.ok and shown == obj.content and (original is None or shown == original):
            figures.retrievable += 1


def run_context_bench(
    trajectories: Sequence[Trajectory],
    make_service: Callable[[Trajectory], ContextService],
    tokenizer: Tokenizer,
    policies: Mapping[str, PolicyConfig],
    progress: Callable[[str], None] = lambda _: None,
    losses: Collection[str] = (),
    peers: Sequence[Peer] = (),
    limit: int | None = None,
) -> dict[str, Any]:
    """Replay every trajectory under naive and each policy; returns the JSON of
    ``selfctx bench context --json`` (without ``default_policy``) and per-call sizes. For the
    policies named in ``losses``, also every hidden used line and a summary by cause
    (``selfctx.adapters.bench.losses``). ``peers``: the policies users would otherwise pick
    (``selfctx.adapters.bench.peers``), measured on the harness's own lists as naive is.
    ``limit``: the model's input limit; each contender's figures count the calls over it."""
    counter = PromptCounter(tokenizer)
    count = counter.text

    def count_list(messages: Sequence[Mapping[str, Any]]) -> int:
        return sum(count(t) for t in request_texts(messages))

    names = ["naive", *policies, *(p.name for p in peers)]
    total = {name: Contender(limit=limit) for name in names}
    rows = []
    per_call: dict[str, dict[str, list[int]]] = {}
    hidden: dict[str, list[dict[str, Any]]] = {name: [] for name in losses if name in policies}
    for trajectory in trajectories:
        progress(f"{trajectory.name}: {len(trajectory.calls)} calls")
        figures = {name: Contender(limit=limit) for name in names}
        used = used_lines(
            trajectory.messages,
            [c.position for c in trajectory.calls],
            trajectory.observation_positions(),
        )
        observations = frozenset(
            p
            for p in trajectory.observation_positions()
            if trajectory.messages[p]["role"] != "tool"
        )
        for peer in peers:
            peer.start()
        for call, lines in zip(trajectory.calls, used, strict=True):
            prompt = trajectory.messages[: call.position]
            figures["naive"].add(list(request_texts(prompt)), count)
            figures["naive"].recall.add(len(lines), visible_lines(prompt, lines))
            for peer in peers:
                sent = peer.prompt(prompt, observations, count_list)
                figures[peer.name].add(list(request_texts(sent)), count)
                figures[peer.name].recall.add(len(lines), visible_lines(sent, lines))
        for name, policy in policies.items():
            service = make_service(trajectory)
            contender = figures[name]
            collector = (
                LossCollector(name, trajectory, trajectory.observation_positions())
                if name in hidden
                else None
            )

            def observe(n: int, call: Any, session: Any, request: Mapping[str, Any]) -> None:
                contender.add(list(request_texts(request)), count)  # noqa: B023 - used at once
                if collector is not None:  # noqa: B023
                    collector.observe(n, session, request, used[n - 1])  # noqa: B023

            report = replay(trajectory, service, counter, observe=observe, policy=policy)
            if collector is not None:
                hidden[name] += collector.entries
            contender.recall = report.recall
            _check_retrievable(service, report.session_id, trajectory, contender)
        row: dict[str, Any] = {
            "name": trajectory.name,
            "format": trajectory.format,
            "calls": len(trajectory.calls),
        }
        for name in names:
            row[name] = figures[name].figures()
            agg = total[name]
            agg.tokens += figures[name].tokens
            agg.peak = max(agg.peak, figures[name].peak)
            agg.cost += figures[name].cost
            agg.collapsed += figures[name].collapsed
            agg.retrievable += figures[name].retrievable
            agg.over_limit += figures[name].over_limit
            agg.recall.add(figures[name].recall.used, figures[name].recall.visible)
        if trajectory.recorded_prompt_tokens is not None:
            row["naive"]["recorded_prompt_tokens"] = trajectory.recorded_prompt_tokens
        rows.append(row)
        per_call[trajectory.name] = {name: figures[name].per_call for name in names}
    result: dict[str, Any] = {
        "tokenizer": tokenizer.name,
        "trajectories": rows,
        "total": {name: total[name].figures() for name in names},
        "per_call": per_call,
    }
    if hidden:
        result["losses"] = {
            name: {"summary": summarize(entries), "lines": entries}
            for name, entries in hidden.items()
        }
    return result


def replay_service_factory(
    build: Callable[..., ContextService], tokenizer: Tokenizer
) -> Callable[[Trajectory], ContextService]:
    """A fresh in-memory service per replay, on the trajectory's own (non-host) filesystem."""

    def make(trajectory: Trajectory) -> ContextService:
        return build(
            default_filesystem_id=replay_filesystem_id(trajectory),
            workspace="/",
            tokenizer=tokenizer,
        )

    return make


__all__ += ["default_directory", "replay_service_factory"]
