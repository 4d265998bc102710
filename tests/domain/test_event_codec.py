"""The session-log codec: every event type survives encode -> JSON -> decode, without the object
versions it carries (those are stored as object documents)."""

from __future__ import annotations

import json
import typing
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from selfctx.application.persistence import decode_events, encode_events, entry_events, log_entry
from selfctx.domain.chat import (
    AssistantMessage,
    ContextNote,
    ToolCallRequest,
    ToolResult,
    Turn,
    UserMessage,
    message_from_json,
    message_to_json,
)
from selfctx.domain.errors import InvalidInput
from selfctx.domain.indexing import Outcome
from selfctx.domain.objects import SystemPromptObject
from selfctx.domain.session import events as e
from selfctx.domain.session.state import POLICY_NAMES, CollapseWindow, PolicyConfig

TEXT = st.text(max_size=10)
HASH = st.binary(min_size=32, max_size=32).map(bytes.hex)
ARGS = st.dictionaries(
    TEXT, st.none() | st.integers() | TEXT | st.lists(st.integers(), max_size=2), max_size=3
)

FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "session_id": TEXT,
    "system_prompt_id": TEXT,
    "chat_id": TEXT,
    "object_id": TEXT,
    "object_hash": HASH,
    "text": TEXT,
    "window": st.builds(CollapseWindow, st.integers(1, 9), st.integers(1, 9)),
    "policy": st.builds(
        PolicyConfig,
        name=st.sampled_from(POLICY_NAMES),
        trigger_tokens=st.none() | st.integers(1, 10**9),
        clear_at_least=st.integers(0, 10**6),
        budget_tokens=st.none() | st.integers(1, 10**9),
        emergency_truncation=st.booleans(),
        recent_messages=st.integers(0, 100),
        seen_calls=st.none() | st.integers(1, 9),
        keep_tokens=st.none() | st.integers(1, 10**6),
        named_messages=st.none() | st.integers(1, 99),
        excerpt_lines=st.none() | st.integers(1, 99),
        excerpt_context=st.integers(0, 9),
        payback_percent=st.none() | st.integers(1, 10**4),
        checkpoint_every=st.none() | st.integers(1, 99),
    ),
    "message": st.builds(
        AssistantMessage,
        TEXT,
        st.lists(st.builds(ToolCallRequest, TEXT, TEXT, ARGS), max_size=2).map(tuple),
        st.lists(
            st.fixed_dictionaries({"type": st.just("thinking"), "signature": TEXT}), max_size=2
        ),
    ),
    "images": st.lists(
        st.fixed_dictionaries({"type": st.just("image"), "url": TEXT}), max_size=2
    ).map(tuple),
    "outcome": st.sampled_from([Outcome.CREATED, Outcome.UPDATED]),
    "trigger": st.sampled_from(
        ["agent_read", "agent_view", "agent_write", "watcher", "resume", "activation", "restore"]
    ),
    "kind": st.sampled_from(["file", "toolcall"]),
    "auto": st.booleans(),
    "by": st.sampled_from(["agent", "window", "budget", "rollback"]),
    "label": TEXT,
    "keep": st.integers(0, 50),
    "turns": st.lists(
        st.builds(
            Turn,
            st.integers(0, 50),
            st.lists(
                st.one_of(
                    st.builds(UserMessage, TEXT),
                    st.builds(
                        AssistantMessage,
                        TEXT,
                        st.lists(st.builds(ToolCallRequest, TEXT, TEXT, ARGS), max_size=2).map(
                            tuple
                        ),
                    ),
                    st.builds(ToolResult, TEXT),
                    st.builds(ContextNote, TEXT),
                ),
                max_size=3,
            ),
        ),
        max_size=3,
    ).map(tuple),
    "conversation": st.booleans(),
    "compacted": st.integers(0, 50),
    "upto": st.integers(1, 50),
    "case": st.sampled_from(["summarize", "truncate"]),
    "summary": TEXT,
    "files": st.lists(TEXT, max_size=3).map(tuple),
    "superseded_by": st.none() | TEXT,
    "reason": st.none() | TEXT,
    "kept": st.none() | TEXT,
}
EVENT_TYPES = typing.get_args(e.Event)


def event_strategy(cls: type[Any]) -> st.SearchStrategy[Any]:
    kwargs = {f.name: FIELDS[f.name] for f in attrs.fields(cls) if f.name != "version"}
    return st.builds(cls, **kwargs)


EVENTS = st.one_of([event_strategy(cls) for cls in EVENT_TYPES])


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda cls: cls.__name__)
@given(data=st.data())
def test_each_event_type_round_trips(cls: type[Any], data: st.DataObject) -> None:
    # A KeyError in event_strategy names a field this test does not know yet.
    event = data.draw(event_strategy(cls))
    assert decode_events(json.loads(json.dumps(encode_events([event])))) == [event]


@given(st.lists(EVENTS, max_size=8))
def test_events_round_trip_through_json(events: list[Any]) -> None:
    encoded = encode_events(events)
    text = json.dumps(encoded, ensure_ascii=False, allow_nan=False)
    decoded = decode_events(json.loads(text))
    assert decoded == events
    assert [type(d) for d in decoded] == [type(ev) for ev in events]
    assert all(getattr(d, "version", None) is None for d in decoded)


def test_object_versions_are_left_out_of_the_log() -> None:
    prompt = SystemPromptObject.build("system_prompt:s", "a long prompt " * 20)
    event = e.SystemPromptSet(prompt.id, prompt.object_hash, prompt)
    [encoded] = encode_events([event])
    assert encoded == {
        "event": "SystemPromptSet",
        "object_id": "system_prompt:s",
        "object_hash": prompt.object_hash,
    }


def test_a_log_entry_holds_its_events_as_one_value() -> None:
    # One value, not a list: XTDB indexes every element of a top-level list (decision 0017).
    events: list[e.Event] = [e.ObjectActivated("file:a", auto=False), e.ObjectPinned("file:a")]
    entry = log_entry("s", 3, command="Pin", command_id="c", at="t", events=events)
    assert entry["events"] == {"list": encode_events(events)}
    assert decode_events(entry_events(entry)) == events


def test_entries_written_before_decision_0017_are_read_too() -> None:
    events = [e.ObjectActivated("file:a", auto=True)]
    assert (
        decode_events(entry_events({"xt/id": "log:s:1", "events": encode_events(events)})) == events
    )


@pytest.mark.parametrize("events", [None, "[]", {"list": None}, {"items": []}, 3])
def test_an_entry_without_a_list_of_events_is_refused(events: Any) -> None:
    with pytest.raises(InvalidInput, match="log:s:1"):
        entry_events({"xt/id": "log:s:1", "events": events})


def test_a_call_keeps_the_harness_id_it_was_mapped_from() -> None:
    mapped = ToolCallRequest("tc_0123", "bash", {"command": "ls"}, provider_id="call_0")
    plain = ToolCallRequest("call-1", "bash", {})
    data = message_to_json(AssistantMessage("", (mapped, plain)))
    assert [c.get("provider_id") for c in data["tool_calls"]] == ["call_0", None]
    assert "provider_id" not in data["tool_calls"][1]  # chats written before keep their form
    assert message_from_json(data) == AssistantMessage("", (mapped, plain))
