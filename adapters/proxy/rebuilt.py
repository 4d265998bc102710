"""Messages a client rebuilds are shown once, in the version it sends now.

Some clients rebuild part of their conversation on every request instead of appending to it:
aider pastes the current text of the files in the chat into a message it re-sends each time
("I have *added these files to the chat* ..."), adds its edit rules to the last user message
only, and moves finished exchanges before that message. Their list does not grow at its end, so
the session records each new version of such a message beside the old ones (nothing recorded is
ever dropped), and a rendering of the whole session would show every version: stale copies of the
files, each user message twice.

What the client sends is its conversation as it stands. So of each text message the client has
ever sent (user and assistant messages without tool calls, known by role and text), the managed
request shows as many copies as the client's latest request holds, the latest ones, and none of
those it no longer sends. Tool calls and their outputs are objects the policy shows or collapses
and are never dropped here; messages the proxy added (context calls, notes, summaries) were never
sent by the client and are kept.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator, Sequence

from selfctx.adapters.harness.cursor import SYSTEM_MARK
from selfctx.adapters.harness.messages import Message
from selfctx.domain.chat import AssistantMessage, UserMessage
from selfctx.domain.rendering import RenderedMessage
from selfctx.domain.session.state import SessionState

__all__ = ["TextKey", "shown_once", "stored_texts", "text_keys"]

TextKey = tuple[str, str]
Key = TextKey


def _key(message: Message) -> Key | None:
    if message.role == "user" and message.text:
        return ("user", message.text)
    if (
        message.role == "system" and message.text
    ):  # kept in mid-conversation as a marked user message
        return ("user", SYSTEM_MARK + message.text)
    if message.role == "assistant" and not message.tool_calls and message.text:
        return ("assistant", message.text)
    return None


def text_keys(messages: Iterable[Message]) -> Iterator[Key]:
    """The text messages among ``messages``, as (role, text) in the form the session records
    them."""
    return (k for k in map(_key, messages) if k is not None)


def stored_texts(state: SessionState) -> set[Key]:
    """The text messages a stored session holds (all sent by its client: the proxy's own
    messages are tool calls, notes and summaries)."""
    out: set[Key] = set()
    for turn in state.turns:
        for message in turn.messages:
            if isinstance(message, UserMessage) and message.text:
                out.add(("user", message.text))
            elif isinstance(message, AssistantMessage) and not message.tool_calls and message.text:
                out.add(("assistant", message.text))
    return out


def shown_once(
    chat: Sequence[RenderedMessage], current: collections.Counter[Key], sent: set[Key]
) -> tuple[RenderedMessage, ...] | None:
    """``chat`` without the copies of client text messages beyond what the client's request
    holds (``current``), the latest copies kept; None when nothing is dropped."""
    left = collections.Counter(current)
    dropped: set[int] = set()
    for position in range(len(chat) - 1, -1, -1):
        message = chat[position]
        if message.role not in ("user", "assistant") or message.tool_calls:
            continue
        key = (message.role, message.text)
        if key not in sent:
            continue
        if left[key] > 0:
            left[key] -= 1
        else:
            dropped.add(position)
    if not dropped:
        return None
    return tuple(m for n, m in enumerate(chat) if n not in dropped)
