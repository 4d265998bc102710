"""How big a prompt is, in tokens: one rule for the harness's own list and for ours.

The count is the sum, over every message of a request, of the tokens of the text a provider
tokenizes for it, without the JSON around it:

* a message's content (a string, or the text of its text parts/blocks; ``tool_result`` content);
* for each tool call: its name, and its arguments as JSON text (OpenAI: ``function.arguments``
  exactly as sent; Anthropic: ``tool_use.input`` serialised with ``json.dumps``);
* Anthropic's separate ``system`` blocks.

Not counted, on either side: roles and the provider's per-message framing (a few tokens each),
tool schemas, images. The figure is therefore a little below what a provider bills, by about the
same amount for the naive and the managed prompt. Each text is counted on its own and the counts
are added (token counts are not additive across concatenation, but a provider also encodes each
message separately). Counts are memoised per distinct text, so re-counting a harness's list that
grows by a few messages per call costs only the new messages.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from selfctx.application.ports.tokenizer import Tokenizer

__all__ = ["PromptCounter", "request_texts"]


def _content_texts(content: Any) -> Iterator[str]:
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for part in content:
            if not isinstance(part, Mapping):
                continue
            kind = part.get("type")
            if kind in ("text", "input_text", "output_text") and isinstance(part.get("text"), str):
                yield part["text"]
            elif kind == "tool_use":
                yield str(part.get("name") or "")
                yield json.dumps(part.get("input") or {}, ensure_ascii=False)
            elif kind == "tool_result":
                yield from _content_texts(part.get("content"))


def _responses_texts(items: Any) -> Iterator[str]:
    if isinstance(items, str):
        yield items
        return
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, Mapping):
            continue
        kind = item.get("type", "message")
        if kind == "message":
            yield from _content_texts(item.get("content"))
        elif kind == "function_call":
            yield str(item.get("name") or "")
            yield str(item.get("arguments") or "")
        elif kind == "function_call_output":
            yield from _content_texts(item.get("output"))


def request_texts(request: Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> Iterator[str]:
    """The texts a provider tokenizes in ``request``: an OpenAI or Anthropic request body (a
    mapping with ``messages``, and ``system`` for Anthropic), an OpenAI Responses body (``input``
    items and ``instructions``), or a bare message list."""
    if isinstance(request, Mapping):
        if "input" in request and "messages" not in request:
            yield from _content_texts(request.get("instructions"))
            yield from _responses_texts(request["input"])
            return
        yield from _content_texts(request.get("system"))
        messages: Iterable[Mapping[str, Any]] = request.get("messages") or ()
    else:
        messages = request
    for message in messages:
        yield from _content_texts(message.get("content"))
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            yield str(function.get("name") or "")
            arguments = function.get("arguments")
            yield arguments if isinstance(arguments, str) else json.dumps(arguments or {})


class PromptCounter:
    """Counts prompts with one tokenizer, by the rule of this module."""

    _MEMO_LIMIT = 200_000

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self._memo: dict[str, int] = {}

    @property
    def name(self) -> str:
        """The tokenizer's name, to print beside every figure."""
        return self.tokenizer.name

    def text(self, text: str) -> int:
        """Tokens of one text."""
        if not text:
            return 0
        count = self._memo.get(text)
        if count is None:
            if len(self._memo) >= self._MEMO_LIMIT:
                self._memo.clear()
            count = self._memo[text] = self.tokenizer.count(text)
        return count

    def __call__(self, request: Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> int:
        """Tokens of a request body or a message list."""
        return sum(self.text(t) for t in request_texts(request))
