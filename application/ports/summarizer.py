"""The summarizer port: topic-boundary detection and summaries for compaction (decision 0043).

Two adapters (``selfctx.adapters.summarizer``): an extractive one that needs no model (the
default; deterministic, so tests and benchmarks use it) and one that asks any OpenAI- or
Anthropic-compatible endpoint. A summarizer may fail: compaction then takes seed 001's safe
defaults (no boundary, no confidence) and the extractive summary.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

import attrs

from selfctx.domain.compaction import TopicBoundary
from selfctx.domain.errors import SelfContextError

__all__ = ["Excerpt", "Summarizer", "SummarizerError"]


class SummarizerError(SelfContextError):
    """A summarizer could not answer (unreachable, refused, timed out, or nonsense)."""

    kind = "summarizer_error"


@attrs.frozen
class Excerpt:
    """One message of the transcript a summarizer reads."""

    number: int
    """Its number in the transcript (what a boundary names)."""
    role: str
    """``user``, ``assistant``, ``tool`` or ``note``."""
    text: str


class Summarizer(abc.ABC):
    """Finds where the conversation changed topic, and summarises turns."""

    name: str = "summarizer"

    @abc.abstractmethod
    def detect_boundary(self, transcript: Sequence[Excerpt]) -> TopicBoundary:
        """Where the newest topic begins in ``transcript`` (an index that is one of its
        numbers), or no boundary. Raises :class:`SummarizerError` when it cannot tell."""

    @abc.abstractmethod
    def summarize(self, transcript: Sequence[Excerpt], previous: str, budget_tokens: int) -> str:
        """A summary of ``transcript`` (following on from the ``previous`` summary, which it
        replaces) in about ``budget_tokens`` tokens at most. Raises :class:`SummarizerError`."""
