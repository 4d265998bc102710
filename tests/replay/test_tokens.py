"""The one rule for prompt sizes (``selfctx.adapters.harness.tokens``): the texts a provider
tokenizes, counted the same way for a harness's list and for an assembled request in either
format."""

from __future__ import annotations

from typing import Any

from selfctx.adapters.harness.tokens import PromptCounter, request_texts
from selfctx.application.ports.tokenizer import Tokenizer


class WordTokenizer(Tokenizer):
    """One token per whitespace-separated word; remembers what it was asked."""

    name = "estimate:words"

    def __init__(self) -> None:
        self.asked: list[str] = []

    def count(self, text: str) -> int:
        self.asked.append(text)
        return len(text.split())


OPENAI: list[dict[str, Any]] = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": [{"type": "text", "text": "fix it"}, {"type": "image_url"}]},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"a": 1}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "one two three"},
]


def test_openai_texts_are_contents_and_tool_call_names_and_arguments() -> None:
    assert list(request_texts(OPENAI)) == [
        "be brief", "fix it", "bash", '{"a": 1}', "one two three"
    ]  # fmt: skip
    assert list(request_texts({"messages": OPENAI})) == list(request_texts(OPENAI))


def test_anthropic_texts_include_system_blocks_tool_use_and_results() -> None:
    request = {
        "system": [{"type": "text", "text": "be brief"}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "fix it"}]},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "c1", "name": "bash", "input": {"a": 1}}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "c1", "content": "one two three"}
                ],
            },
        ],
    }
    assert list(request_texts(request)) == list(request_texts(OPENAI))


def test_counter_sums_and_memoises_each_text() -> None:
    tokenizer = WordTokenizer()
    counter = PromptCounter(tokenizer)
    assert counter.name == "estimate:words"
    assert counter(OPENAI) == 2 + 2 + 1 + 2 + 3
    assert counter([*OPENAI, {"role": "user", "content": "more words"}]) == 12
    assert tokenizer.asked.count("one two three") == 1  # counted once, remembered
    assert counter([]) == 0 and counter.text("") == 0
