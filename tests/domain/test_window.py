"""The auto-collapse window (docs/specification.md §2) in the pure session machine."""

from __future__ import annotations

from collections.abc import Iterable

from selfctx.domain.objects import SystemPromptObject, ToolcallObject
from selfctx.domain.session import commands as c
from selfctx.domain.session import events as e
from selfctx.domain.session.machine import decide, evolve, window_collapses
from selfctx.domain.session.state import INITIAL, CollapseWindow, SessionState


def start(per_turn: int = 5, turns: int = 3) -> SessionState:
    prompt = SystemPromptObject.build("system_prompt:s", "p")
    return run(INITIAL, [c.StartSession("s", prompt, "chat:s", CollapseWindow(per_turn, turns))])


def call(call_id: str) -> c.RecordToolCall:
    return c.RecordToolCall(
        ToolcallObject.build(call_id, tool="t", args={}, output="o", status="ok", chat_ref="chat:s")
    )


def run(state: SessionState, commands: Iterable[c.Command]) -> SessionState:
    for command in commands:
        for event in decide(state, command):
            state = evolve(state, event)
    return state


def collapsed_by_window(state: SessionState, command: c.Command) -> list[str]:
    return [
        ev.object_id
        for ev in decide(state, command)
        if isinstance(ev, e.ObjectDeactivated) and ev.by == "window"
    ]


def test_a_new_tool_call_pushes_the_oldest_of_its_turn_out() -> None:
    state = run(start(per_turn=2), [c.RecordUserMessage("u"), call("a"), call("b")])
    assert collapsed_by_window(state, call("c")) == ["a"]
    state = run(state, [call("c")])
    assert (set(state.active), set(state.auto_active)) == ({"b", "c"}, {"b", "c"})


def test_a_new_turn_pushes_old_turns_out_in_index_order() -> None:
    state = run(start(turns=2), [call("z"), c.RecordUserMessage("1"), call("a"), call("b")])
    assert set(state.active) == {"z", "a", "b"}
    assert collapsed_by_window(state, c.RecordUserMessage("2")) == ["z"]
    state = run(state, [c.RecordUserMessage("2")])
    assert collapsed_by_window(state, c.RecordUserMessage("3")) == ["a", "b"]


def test_the_per_turn_count_counts_every_tool_call_of_the_turn() -> None:
    # "b" is deactivated by the agent, yet still one of the last two tool calls of the turn.
    state = run(
        start(per_turn=2),
        [c.RecordUserMessage("u"), call("a"), call("b"), c.Deactivate("b")],
    )
    assert collapsed_by_window(state, call("c")) == ["a"]


def test_pinned_calls_are_exempt_until_unpinned() -> None:
    state = run(start(per_turn=1), [call("a"), c.Pin("a"), call("b")])
    assert set(state.active) == {"a", "b"}
    assert window_collapses(state) == []
    assert collapsed_by_window(state, c.Unpin("a")) == ["a"]


def test_explicit_activation_takes_a_call_out_of_the_window() -> None:
    state = run(start(per_turn=1), [call("a"), c.Activate("a"), call("b"), call("c")])
    assert set(state.active) == {"a", "c"}
    assert set(state.auto_active) == {"c"}
    state = run(state, [c.Activate("b")])
    assert set(state.active) == {"a", "b", "c"}
    assert decide(state, c.Activate("b")) == ()  # already explicitly active: nothing to do


def test_explicit_deactivation_is_final() -> None:
    state = run(start(per_turn=1), [call("a"), c.Deactivate("a")])
    assert "a" not in state.auto_active
    state = run(state, [call("b"), c.RecordUserMessage("u"), c.Pin("a"), c.Unpin("a")])
    assert set(state.active) == {"b"}


def test_a_call_recorded_without_activation_is_not_in_the_window() -> None:
    state = run(start(per_turn=1), [c.RecordToolCall(call("a").toolcall, activate=False)])
    assert (list(state.index), set(state.active), set(state.auto_active)) == (["a"], set(), set())
