"""The policies users would otherwise pick, as contenders of ``selfctx bench context``.

Each peer rewrites the message list the harness sent for a model call into the one it would
send instead; the bench counts tokens, peak, cache-adjusted cost and recall of it exactly as it
does for naive and for our policies. What each does (docs/benchmarks.md, "The whole development
set", gives the sources):

* **Observation masking** (Lindenbauer et al. 2025, "The Complexity Trap", SWE-agent's
  ``LastNObservations``): the last ``keep`` (10) tool outputs stay; every older one is replaced
  by one line saying how many lines were left out. The agent's messages all stay.
* **Anthropic's tool result clearing** (``clear_tool_uses_20250919``): once a request is over
  ``trigger`` input tokens, every tool result but the ``keep`` (3) most recent is replaced by a
  placeholder; the tool calls stay. It is applied to each request on its own, as the API does
  (the client keeps the whole history).
* **OpenHands' amortized forgetting** (``AmortizedForgettingCondenser``): the history is a list
  of events (here: the messages after the system prompt); once it holds more than ``max_size``
  (100), it keeps the first ``keep_first`` (1) and the most recent ones, down to half of
  ``max_size``, and forgets the rest for good; it then grows again until the next time.

Observations of text-action harnesses (a user message that carries a command's output) count as
tool outputs here, as everywhere in the bench.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from selfctx.adapters.harness.tokens import request_texts

__all__ = ["AmortizedForgetting", "ClearToolUses", "ObservationMasking", "Peer", "default_peers"]

Message = Mapping[str, Any]


def _is_output(message: Message, observations: frozenset[int], position: int) -> bool:
    return message.get("role") == "tool" or position in observations


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(request_texts([{"role": "user", "content": content}]))


@attrs.define
class Peer:
    """A peer's rewriting of the harness's list, call after call of one trajectory."""

    name: str

    def start(self) -> None:
        """A new trajectory begins."""

    def prompt(
        self,
        messages: Sequence[Message],
        observations: frozenset[int],
        count: Callable[[Sequence[Message]], int],
    ) -> list[Message]:
        """What the peer sends instead of ``messages`` (the harness's list for one call);
        ``observations``: positions of the messages that are tool outputs without a tool role;
        ``count``: the tokens of a list."""
        raise NotImplementedError


@attrs.define
class ObservationMasking(Peer):
    keep: int = 10

    def prompt(
        self,
        messages: Sequence[Message],
        observations: frozenset[int],
        count: Callable[[Sequence[Message]], int],
    ) -> list[Message]:
        outputs = [n for n, m in enumerate(messages) if _is_output(m, observations, n)]
        masked = set(outputs[: max(0, len(outputs) - self.keep)])
        out = []
        for n, message in enumerate(messages):
            if n in masked:
                lines = _text(message.get("content")).count("\n") + 1
                message = {**message, "content": f"Old environment output: ({lines} lines omitted)"}
            out.append(message)
        return out


@attrs.define
class ClearToolUses(Peer):
    trigger: int = 100_000
    keep: int = 3

    def prompt(
        self,
        messages: Sequence[Message],
        observations: frozenset[int],
        count: Callable[[Sequence[Message]], int],
    ) -> list[Message]:
        if count(messages) <= self.trigger:
            return list(messages)
        outputs = [n for n, m in enumerate(messages) if _is_output(m, observations, n)]
        cleared = set(outputs[: max(0, len(outputs) - self.keep)])
        return [
            {**m, "content": "[cleared: an earlier tool result]"} if n in cleared else m
            for n, m in enumerate(messages)
        ]


@attrs.define
class AmortizedForgetting(Peer):
    max_size: int = 100
    keep_first: int = 1
    _forgotten: set[int] = attrs.field(factory=set)
    """Positions of the events forgotten so far (forgetting is for good)."""

    def start(self) -> None:
        self._forgotten = set()

    def prompt(
        self,
        messages: Sequence[Message],
        observations: frozenset[int],
        count: Callable[[Sequence[Message]], int],
    ) -> list[Message]:
        lead = 0
        while lead < len(messages) and messages[lead].get("role") == "system":
            lead += 1
        view = [n for n in range(lead, len(messages)) if n not in self._forgotten]
        if len(view) > self.max_size:
            head = view[: self.keep_first]
            tail = view[len(view) - (self.max_size // 2 - len(head)) :]
            self._forgotten |= set(view) - set(head) - set(tail)
            view = head + tail
        kept = [*range(lead), *view]
        # a tool result whose call was forgotten is left out with it
        calls = {
            c.get("id") for n in kept for c in messages[n].get("tool_calls") or () if c.get("id")
        }
        return [
            messages[n]
            for n in kept
            if messages[n].get("role") != "tool" or messages[n].get("tool_call_id") in calls
        ]


def default_peers() -> list[Peer]:
    """The peers the bench runs, with the settings their sources use or recommend."""
    return [
        ObservationMasking("masking-10", keep=10),
        ClearToolUses("clear-tool-uses-100k", trigger=100_000, keep=3),
        ClearToolUses("clear-tool-uses-30k", trigger=30_000, keep=3),
        AmortizedForgetting("amortized-forgetting-100", max_size=100, keep_first=1),
    ]
