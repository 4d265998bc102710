"""Ingestion stays exactly-once when a commit's answer is lost (nothing lost, nothing
double-counted): the commit reached the store, the client saw an error, the harness retries."""

from __future__ import annotations

import pytest

from selfctx.adapters.harness.ingest import Ingestor
from selfctx.adapters.harness.messages import parse_openai
from selfctx.adapters.memory import MemoryStore
from selfctx.adapters.tokenizer import EstimateTokenizer
from selfctx.application.ports.store import StoreUnavailable
from selfctx.application.service import ContextService
from selfctx.domain.chat import AssistantMessage, ToolResult, UserMessage
from selfctx.domain.identifiers import toolcall_object_id
from selfctx.domain.mounts import MountTable
from tests.support import CountingClock, CountingIds, FakeFileReader, WrappedStore

HISTORY = [
    {"role": "system", "content": "You are an agent."},
    {"role": "user", "content": "Fix the bug."},
    {
        "role": "assistant",
        "content": "Looking.",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "output one"},
    {"role": "user", "content": "continue"},
]


def _service(store: WrappedStore) -> ContextService:
    return ContextService(
        store=store,
        clock=CountingClock(),
        ids=CountingIds(),
        files=FakeFileReader("host"),
        mounts=MountTable("container"),
        tokenizer=EstimateTokenizer(),
    )


def _chat(service: ContextService, sid: str) -> list[object]:
    return [m for t in service.state(sid).turns for m in t.messages]


@pytest.mark.parametrize("lost_at", [1, 2, 3, 4])
def test_a_lost_answer_then_a_retry_records_every_message_once(lost_at: int) -> None:
    store = WrappedStore(MemoryStore())
    service = _service(store)
    service.start_session("s", "You are an agent.")
    ingestor = Ingestor(service, "s")
    messages = parse_openai(HISTORY)
    ingestor.ingest(messages[:lost_at])  # the prompt and the first lost_at - 1 messages
    assert len(_chat(service, "s")) == lost_at - 1
    store.lose_acks = 1
    with pytest.raises(StoreUnavailable):
        ingestor.ingest(messages)  # the next commit lands, but its answer is lost
    ingestor.ingest(messages)  # the harness retries with the same list
    chat = _chat(service, "s")
    assert [type(m) for m in chat] == [UserMessage, AssistantMessage, ToolResult, UserMessage]
    assert [getattr(m, "text", getattr(m, "toolcall_id", None)) for m in chat] == [
        "Fix the bug.",
        "Looking.",
        toolcall_object_id("s", "c1", 1),
        "continue",
    ]
    # A second service resuming the session sees the same, and nothing more is recorded.
    other = _service(store)
    other.resume_session("s")
    assert Ingestor(other, "s").ingest(messages).consumed == 0
