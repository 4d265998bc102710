"""Counting a context in tokens, the same way wherever a figure or a budget needs it.

A prompt's size is the sum of the token counts of its texts: the system prompt, the metadata
block, every chat message (and every tool call's name and JSON arguments), and the active
content. Provider-specific framing (a few tokens per message) is left out: it is the same for
every layout, so comparisons and budgets are unaffected by it.
"""

from __future__ import annotations

import array
import collections
import itertools
import json
import operator
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from selfctx.domain.chat import thaw_json
from selfctx.domain.rendering import AssembledContext, RenderedMessage

__all__ = ["TEXT_BUDGET", "ContextCounter", "TokenCounts", "context_texts", "context_tokens"]

TEXT_BUDGET = 2_000_000
"""Characters of text whose token counts a session remembers (the texts counted last)."""

TEXT_ENTRIES = 16_384
"""Texts whose token counts a session remembers at most, however short they are: with the
texts themselves not kept, about 150 bytes each (decision 0086)."""


class TokenCounts:
    """Token counts of the texts a session's prompts held, remembered for the texts counted
    last up to ``budget`` characters of text and ``entries`` texts, so that what a long session
    once showed (outputs collapsed since) does not stay in memory for good. A text is known by
    its length and Python's hash of it (64 bits, cached in the string; never stored), not kept:
    the counts cost the same memory whether the texts were short or long (decision 0086). The
    two are one integer, the hash above the length's 64 bits (:func:`_text_key`): an entry
    holds that integer and the count, not a tuple of two integers (decision 0157)."""

    def __init__(self, budget: int = TEXT_BUDGET, entries: int = TEXT_ENTRIES) -> None:
        self.budget = budget
        self.entries = entries
        self._counts: collections.OrderedDict[int, int] = collections.OrderedDict()
        self.chars = 0

    def get(self, text: str) -> int | None:
        key = _text_key(text)
        n = self._counts.get(key)
        if n is not None:
            self._counts.move_to_end(key)
        return n

    def __setitem__(self, text: str, n: int) -> None:
        key = _text_key(text)
        if key not in self._counts:
            self.chars += len(text)
        self._counts[key] = n
        while (self.chars > self.budget or len(self._counts) > self.entries) and len(
            self._counts
        ) > 1:
            key, _ = self._counts.popitem(last=False)
            self.chars -= key & _LENGTH

    def __len__(self) -> int:
        return len(self._counts)


_LENGTH = (1 << 64) - 1
"""The bits of :func:`_text_key` that hold the text's length."""


def _text_key(text: str) -> int:
    """``text`` known by its hash and its length as one integer: the hash shifted above 64 bits
    of length (a length is below ``2**63``), so two texts share a key exactly when they share
    both, as a tuple of the two would."""
    return (hash(text) << 64) | len(text)


_JSON = json.JSONEncoder(ensure_ascii=False)
"""``json.dumps(value, ensure_ascii=False)``, without building an encoder for each call."""


def _arguments_text(arguments: Any) -> str:
    """A call's arguments as the text a provider tokenizes."""
    return _JSON.encode(thaw_json(arguments))


def context_texts(context: AssembledContext) -> Iterator[str]:
    """Every text of the context that a provider would tokenize, in prompt order."""
    yield context.system_prompt
    if context.metadata:
        yield context.metadata_text()
    for message in context.chat:
        yield message.text
        for call in message.tool_calls:
            yield call.name
            yield _arguments_text(call.arguments)
    for block in context.active:
        yield block.text


def context_tokens(context: AssembledContext, count: Callable[[str], int]) -> int:
    """Tokens of the whole context, by ``count`` (pass a memoising counter for speed)."""
    return sum(count(text) for text in context_texts(context))


def _message_texts(message: RenderedMessage) -> Iterator[str]:
    yield message.text
    for call in message.tool_calls:
        yield call.name
        yield _arguments_text(call.arguments)


def identical_prefix(old: Sequence[object], new: Sequence[object]) -> int:
    """How many leading items of ``new`` are the very objects of ``old`` (one pass in C, to the
    first difference)."""
    differ = map(operator.is_not, old, new)
    return next(itertools.compress(itertools.count(), differ), min(len(old), len(new)))


class ContextCounter:
    """:func:`context_tokens` for one session's successive contexts, counting again only the
    chat messages that are not the very objects counted last time.

    The renderers reuse the message objects of an unchanged prefix; a message they change may be
    followed by the same objects as before (an activation's answer rewritten in place), so the
    counted prefix is the run of identical objects from the start (identity tests, run in C: a
    request's cost is what changed in it, not the chat's length).
    """

    def __init__(self, count: Callable[[str], int], *, sent: int = 0) -> None:
        """``sent``: how many leading chat messages an earlier request sent (a resumed
        session's, whose requests another process made)."""
        self._count = count
        self._messages: list[RenderedMessage] = []
        self._counts = array.array("q")
        """The token count of each message held: machine integers, 8 bytes a message (a list
        held an integer object of each count above 256 besides its slot; decision 0157)."""
        self._chat_total = 0
        self._fresh_from = sent
        """Where the messages not yet sent begin: those after the context given to
        :meth:`sent` last, or changed since."""
        self._primed = False
        """The messages held were counted by :meth:`prime`, not for a request."""
        self._last: tuple[AssembledContext, int] | None = None
        """The context counted last and its count: the very same context is not counted
        again (an assembly counts the context it returns, and the request built from it asks
        for its size again; decision 0150)."""

    def __call__(self, context: AssembledContext) -> int:
        last = self._last
        if last is not None and last[0] is context:
            # counted as it is now (a frozen value): only what a count always leaves is set
            self._primed = False
            return last[1]
        count = self._count
        total = count(context.system_prompt)
        if context.metadata:
            total += count(context.metadata_text())
        messages, counts, chat = self._messages, self._counts, context.chat
        same = identical_prefix(messages, chat)
        if same < len(messages):
            self._chat_total -= sum(counts[same:])
            del messages[same:], counts[same:]
            if not self._primed:  # a primed message was never sent, nor changed since
                self._fresh_from = min(self._fresh_from, same)
        self._primed = False
        for message in chat[same:]:
            n = sum(count(t) for t in _message_texts(message))
            messages.append(message)
            counts.append(n)
            self._chat_total += n
        total += self._chat_total
        total += sum(count(block.text) for block in context.active)
        self._last = (context, total)
        return total

    def prime(self, context: AssembledContext) -> None:
        """Count ``context`` ahead of the first request (a resumed session's, decision 0110):
        that request then counts only the messages that differ from it, and what it finds was
        sent before is what it would have found without this count."""
        fresh = not self._messages
        self(context)
        self._primed = fresh

    def sent(self) -> None:
        """The context counted last is the one sent: a provider has its messages cached."""
        self._fresh_from = len(self._messages)

    def tails(self, context: AssembledContext) -> dict[str, int]:
        """For each tool message of ``context`` (the one last counted) that an earlier request
        sent, by the tool call it answers: the tokens from it to the end of the prompt that an
        earlier request sent too — what a provider writes to its cache again when that message
        changes. A message not sent before is in no cache: changing it breaks nothing, and what
        follows it is written either way."""
        if identical_prefix(self._messages, context.chat) != len(context.chat) or len(
            self._messages
        ) != len(context.chat):
            self(context)
        running = sum(self._count(block.text) for block in context.active)
        out: dict[str, int] = {}
        sent = min(self._fresh_from, len(self._messages))
        for message, n in zip(
            reversed(self._messages[:sent]), reversed(self._counts[:sent]), strict=True
        ):
            running += n
            if message.toolcall_id is not None:
                out[message.toolcall_id] = running  # the earliest, should it recur
        return out
