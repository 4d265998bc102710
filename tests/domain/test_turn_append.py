"""A turn's messages are an immutable vector: a turn made from one holds it as it is, so that
appending a message to a long turn (every request of an agent's one long task) does not copy
all its messages again (decision 0168)."""

from __future__ import annotations

from unittest import mock

from pyrsistent import pvector

from selfctx.domain import chat
from selfctx.domain.chat import AssistantMessage, ToolResult, Turn, UserMessage


def _turn(length: int) -> Turn:
    messages: list[chat.ChatMessage] = [UserMessage(text="the task")]
    for n in range(length):
        messages.append(AssistantMessage(text=f"step {n}"))
        messages.append(ToolResult(toolcall_id=f"call-{n}"))
    return Turn(number=1, messages=messages)


def test_appending_to_a_turn_does_not_copy_its_messages() -> None:
    turn = _turn(1000)
    message = AssistantMessage(text="one more")
    with mock.patch.object(chat, "pvector", wraps=pvector) as made:
        longer = turn.append(message)
    assert made.call_count == 0  # main's tree copied the 2,001 messages into a new vector
    assert list(longer.messages) == [*turn.messages, message]
    assert longer == Turn(number=1, messages=[*turn.messages, message])
    assert len(turn.messages) == 2001  # the turn appended to is unchanged


def test_a_turn_made_from_a_list_or_a_vector_holds_a_vector() -> None:
    messages = list(_turn(3).messages)
    from_list = Turn(number=2, messages=messages)
    vector = pvector(messages)
    from_vector = Turn(number=2, messages=vector)
    assert type(from_list.messages) is type(vector)
    assert from_vector.messages is vector  # immutable: held as given
    assert from_list == from_vector
    assert hash(from_list) == hash(from_vector)
