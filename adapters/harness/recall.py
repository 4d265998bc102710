"""Used-content recall: does the model still see the lines it goes on to use? (decision 0021)

For each model call of a recorded trajectory, the recorded response is the assistant message the
call produced: its text and every string value of its JSON-decoded tool-call arguments. A **used
line** is a line of that response (stripped, at least :data:`MIN_CHARS` characters) that is also
a line of an earlier tool output and not a line of an earlier assistant message: the recorded
model copied it from a tool output (into a ``sed`` edit, a ``python -c`` reproduction, a
``str_replace`` old string, an explanation). A used line is **visible** when it occurs somewhere
in the request a harness sends for that call (in any text of it, tool-call arguments decoded).
**Recall** is visible used lines over used lines. The harness's own list holds every earlier tool
output, so the naive prompt's recall is 1.0 by construction.

Recall is a proxy for what a model needs, measured offline on recorded sessions; it says nothing
about whether a model would solve the task.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from selfctx.domain.relevance import json_strings

__all__ = [
    "MIN_CHARS",
    "Recall",
    "message_strings",
    "request_strings",
    "used_lines",
    "visible_lines",
]

MIN_CHARS = 25
"""Shorter lines (``return x``, ``)``, ``else:``) are too common to say anything was copied."""


def _arguments(raw: Any) -> Iterator[str]:
    """The string values of one tool call's arguments (a JSON text, or already decoded); an
    argument text that is not JSON counts as the one string it is."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            yield raw
            return
    yield from json_strings(raw)


def _content(content: Any) -> Iterator[str]:
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for part in content:
            if not isinstance(part, Mapping):
                continue
            kind = part.get("type")
            if kind == "text" and isinstance(part.get("text"), str):
                yield part["text"]
            elif kind == "tool_use":
                yield from json_strings(part.get("input"))
            elif kind == "tool_result":
                yield from _content(part.get("content"))


def message_strings(message: Mapping[str, Any]) -> Iterator[str]:
    """The texts of one message (OpenAI or Anthropic): its content, and the decoded string
    values of its tool calls' arguments."""
    yield from _content(message.get("content"))
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        yield from _arguments(function.get("arguments"))


def request_strings(request: Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> Iterator[str]:
    """Every text of a request body (OpenAI, or Anthropic with its ``system``) or message list."""
    if isinstance(request, Mapping):
        yield from _content(request.get("system"))
        messages: Iterable[Mapping[str, Any]] = request.get("messages") or ()
    else:
        messages = request
    for message in messages:
        yield from message_strings(message)


def _lines(texts: Iterable[str]) -> set[str]:
    out: set[str] = set()
    for text in texts:
        for line in text.split("\n"):
            line = line.strip()
            if len(line) >= MIN_CHARS:
                out.add(line)
    return out


def used_lines(
    messages: Sequence[Mapping[str, Any]], positions: Sequence[int]
) -> list[tuple[str, ...]]:
    """The used lines of each model call, the calls given by the positions of the assistant
    messages they produced (in stream order), each call's lines sorted."""
    from_tools: set[str] = set()
    from_model: set[str] = set()
    done = 0
    out: list[tuple[str, ...]] = []
    for position in positions:
        for message in messages[done:position]:
            if message.get("role") == "tool":
                from_tools |= _lines(message_strings(message))
            elif message.get("role") == "assistant":
                from_model |= _lines(message_strings(message))
        done = max(done, position)
        response = _lines(message_strings(messages[position]))
        out.append(tuple(sorted((response & from_tools) - from_model)))
    return out


def visible_lines(
    request: Mapping[str, Any] | Iterable[Mapping[str, Any]], lines: Iterable[str]
) -> int:
    """How many of ``lines`` occur in some text of ``request``."""
    wanted = list(lines)
    if not wanted:
        return 0
    texts = list(request_strings(request))
    return sum(1 for line in wanted if any(line in text for text in texts))


@attrs.define
class Recall:
    """Used and visible lines, added up over calls (or trajectories)."""

    used: int = 0
    visible: int = 0

    def add(self, used: int, visible: int) -> None:
        self.used += used
        self.visible += visible

    @property
    def recall(self) -> float | None:
        """visible / used; None when nothing was used (no evidence either way)."""
        return self.visible / self.used if self.used else None

    def figures(self) -> dict[str, Any]:
        recall = self.recall
        return {
            "used": self.used,
            "visible": self.visible,
            "recall": round(recall, 4) if recall is not None else None,
        }
