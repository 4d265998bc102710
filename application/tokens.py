"""Counting a context in tokens, the same way wherever a figure or a budget needs it.

A prompt's size is the sum of the token counts of its texts: the system prompt, the metadata
block, every chat message (and every tool call's name and JSON arguments), and the active
content. Provider-specific framing (a few tokens per message) is left out: it is the same for
every layout, so comparisons and budgets are unaffected by it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

from pyrsistent import thaw

from domain.rendering import AssembledContext

__all__ = ["context_texts", "context_tokens"]


def context_texts(context: AssembledContext) -> Iterator[str]:
    """Every text of the context that a provider would tokenize, in prompt order."""
    yield context.system_prompt
    if context.metadata:
        yield context.metadata_text()
    for message in context.chat:
        yield message.text
        for call in message.tool_calls:
            yield call.name
            yield json.dumps(thaw(call.arguments), ensure_ascii=False)
    for block in context.active:
        yield block.text


def context_tokens(context: AssembledContext, count: Callable[[str], int]) -> int:
    """Tokens of the whole context, by ``count`` (pass a memoising counter for speed)."""
    return sum(count(text) for text in context_texts(context))
