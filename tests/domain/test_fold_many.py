"""``fold_many`` (a long run of events folded in place, decision 0087) gives exactly the state
``fold`` gives event by event: the same sets, maps, turns and order of iteration."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from selfctx.domain.chat import AssistantMessage, ToolCallRequest, Turn, UserMessage
from selfctx.domain.session import events as e
from selfctx.domain.session.machine import FOLD_IN_PLACE_FROM, fold, fold_many
from selfctx.domain.session.state import INITIAL, CollapseWindow, SessionState

_IDS = [f"o{n}" for n in range(12)]
_ids = st.sampled_from(_IDS)

_events = st.one_of(
    st.builds(e.ObjectEncountered, _ids, st.sampled_from(["file", "toolcall"])),
    st.builds(e.ObjectActivated, _ids, st.booleans()),
    st.builds(
        e.ObjectDeactivated,
        _ids,
        st.just("agent"),
        superseded_by=st.none() | _ids,
        kept=st.none() | st.sampled_from(["", "kept line"]),
    ),
    st.builds(e.ObjectDemoted, _ids),
    st.builds(e.ObjectPinned, _ids),
    st.builds(e.ObjectUnpinned, _ids),
    st.builds(e.ToolCallRecorded, _ids, st.just("h")),
    st.builds(
        e.AssistantMessageRecorded,
        st.builds(
            AssistantMessage,
            st.sampled_from(["", "ok"]),
            st.lists(st.builds(ToolCallRequest, _ids, st.just("bash")), max_size=2).map(tuple),
        ),
    ),
    st.builds(e.UserMessageRecorded, st.sampled_from(["next", "again"])),
    st.builds(e.ContextNoteRecorded, st.just("note")),
    st.builds(e.CheckpointCreated, st.sampled_from(["a", "b"]), st.booleans()),
    st.builds(e.ChatCompacted, st.integers(0, 2), st.just("c"), st.just("s"), _ids, st.just("h")),
    st.builds(
        e.ChatRestored, st.integers(0, 1), st.just((Turn(number=1, messages=(UserMessage("r"),)),))
    ),
    st.just(e.SessionResumed()),
)

_STARTED = SessionState(session_id="s", system_prompt_id="p", chat_id="c", window=CollapseWindow())


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_events, min_size=FOLD_IN_PLACE_FROM, max_size=150),
    st.sampled_from([_STARTED, INITIAL]),
)
def test_fold_many_is_fold(events: list[e.Event], start: SessionState) -> None:
    expected = fold(events, start)
    folded = fold_many(events, start)
    assert folded == expected
    # the same order of iteration, not only equal sets and maps
    for name in ("positions", "kinds", "pool", "active", "pinned", "auto_active", "last_used"):
        assert list(getattr(folded, name)) == list(getattr(expected, name)), name
    assert list(folded.excerpts.items()) == list(expected.excerpts.items())


def test_a_state_without_turns_takes_its_messages_as_fold_does() -> None:
    empty = SessionState(turns=INITIAL.turns.delete(0))
    events: list[e.Event] = [
        e.ObjectEncountered(f"o{n}", "toolcall") for n in range(FOLD_IN_PLACE_FROM)
    ]
    started = [*events, e.UserMessageRecorded("first"), e.ToolCallRecorded("o1", "h")]
    assert fold_many(started, empty) == fold(started, empty)
    early = [*events, e.ToolCallRecorded("o1", "h")]  # no turn to add it to: fold refuses
    with pytest.raises(IndexError):
        fold(early, empty)
    with pytest.raises(IndexError):
        fold_many(early, empty)
