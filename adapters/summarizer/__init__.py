"""Summarizers for compaction: extractive (no model; the default) and HTTP (any OpenAI- or
Anthropic-compatible endpoint)."""

from selfctx.adapters.summarizer.extractive import ExtractiveSummarizer
from selfctx.adapters.summarizer.http import HttpSummarizer, summarizer_from_env

__all__ = ["ExtractiveSummarizer", "HttpSummarizer", "summarizer_from_env"]
