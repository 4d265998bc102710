"""The extractive summarizer: no model, deterministic (the default; decision 0043).

A boundary is the latest user message that announces a switch in so many words ("now let's
work on", "let's try something else", "forget that", "new task", "next, ..."), with confidence
0.6. A summary keeps, in order: the previous summary, then each turn's user request and the
first sentence of each assistant reply, the commands run and the files touched (with any error a
tool reported); when that exceeds the budget, the oldest lines (the previous summary's first) go
first, except the very first request (usually the task itself).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from selfctx.application.ports.summarizer import Excerpt, Summarizer
from selfctx.domain.compaction import SAFE_BOUNDARY, TopicBoundary

__all__ = ["SWITCH_CONFIDENCE", "ExtractiveSummarizer"]

SWITCH_CONFIDENCE: Final = 0.6
_SWITCH = re.compile(
    r"\b(now let'?s|let'?s (?:now |try something else|move on|switch)|forget (?:that|it|about)"
    r"|new task|next task|moving on|switch(?:ing)? to|different (?:topic|task)"
    r"|on another note|next,)",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"(.+?[.!?])(?:\s|$)", re.DOTALL)
_ERROR = re.compile(r"^.*(error|exception|failed|traceback).*$", re.IGNORECASE | re.MULTILINE)
_CHARS_PER_TOKEN: Final = 4


def _first_sentence(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    found = _SENTENCE.match(flat)
    sentence = found.group(1) if found else flat
    return sentence if len(sentence) <= limit else sentence[: limit - 1] + "…"


class ExtractiveSummarizer(Summarizer):
    """:class:`Summarizer` from the transcript's own sentences (see the module docstring)."""

    name = "extractive"

    def detect_boundary(self, transcript: Sequence[Excerpt]) -> TopicBoundary:
        for excerpt in reversed(transcript):
            if excerpt.role != "user":
                continue
            found = _SWITCH.search(excerpt.text)
            if found:
                said = " ".join(excerpt.text[found.start() :].split())[:120]
                return TopicBoundary(
                    excerpt.number, f"the user switched topic: {said}", SWITCH_CONFIDENCE
                )
        return SAFE_BOUNDARY

    def summarize(self, transcript: Sequence[Excerpt], previous: str, budget_tokens: int) -> str:
        lines: list[str] = []
        for excerpt in transcript:
            text = excerpt.text.strip()
            if not text:
                continue
            if excerpt.role == "user":
                lines.append(f"- user: {_first_sentence(text, 240)}")
            elif excerpt.role == "assistant":
                lines.append(f"  assistant: {_first_sentence(text, 160)}")
            elif excerpt.role == "tool":
                top, _, below = text.partition("\n")
                head = _first_sentence(top, 100)
                error = _ERROR.search(below)
                tail = f" — {_first_sentence(error.group(0), 100)}" if error else ""
                lines.append(f"  tool: {head}{tail}")
        budget = budget_tokens * _CHARS_PER_TOKEN
        lines = [line for line in previous.splitlines() if line.strip()] + lines
        task, rest = lines[:1], lines[1:]
        while rest and _size(task + rest) > budget:
            rest.pop(0)  # the oldest go first; the first request (usually the task) stays
        summary = "\n".join(task + rest)
        if len(summary) > budget:  # one line alone can be too long
            summary = summary[: budget - 1] + "…"
        return summary


def _size(lines: list[str]) -> int:
    return sum(len(line) + 1 for line in lines)
