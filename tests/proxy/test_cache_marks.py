"""Anthropic requests through the proxy: the client's system blocks stay separate, byte for byte
and in order, with their cache marks; the proxy's own system text follows them; the conversation's
mark is on the last assistant block (on the last block too once outputs mostly stay, and before
the first older output the session may collapse next); never more than four marks (decision
0047)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx

from selfctx.adapters.proxy.providers import place_breakpoints
from selfctx.adapters.proxy.scripted import Seen, Step
from selfctx.adapters.proxy.sessions import ShownOutputs
from selfctx.domain.rendering import RenderedMessage
from tests.proxy.drive import Agent
from tests.proxy.support import scripted
from tests.proxy.test_proxy import proxy_for

MARK = {"type": "ephemeral"}
SYSTEM = [
    {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1; cc_entrypoint=sdk-cli;"},
    {"type": "text", "text": "You are a Claude agent.", "cache_control": MARK},
    {"type": "text", "text": "\nYou work in a repository. " * 50, "cache_control": MARK},
]


def _marks(body: Any) -> list[str]:
    found = []
    for n, tool in enumerate(body.get("tools") or ()):
        if "cache_control" in tool:
            found.append(f"tools[{n}]")
    for n, block in enumerate(body.get("system") or ()):
        if "cache_control" in block:
            found.append(f"system[{n}]")
    for m, message in enumerate(body.get("messages") or ()):
        for b, block in enumerate(
            message["content"] if isinstance(message["content"], list) else ()
        ):
            if "cache_control" in block:
                found.append(f"messages[{m}][{b}]")
    return found


def test_the_clients_system_blocks_go_up_as_they_came(tmp_path: Path) -> None:
    def script(seen: Seen) -> Step:
        if seen.turn < 4:
            return Step("Looking.", (("bash", {"command": f"cat part{seen.turn}.log"}),))
        return Step("Done.")

    output = "".join(f"{n}: a line of a log that is long enough to collapse\n" for n in range(300))
    with scripted(script) as (model, up), proxy_for(up, tmp_path, never_larger=True) as (_, base):
        agent = Agent("anthropic", base, stream=True, run_tool=lambda n, a: output)
        agent.system = SYSTEM  # type: ignore[assignment]
        with httpx.Client() as client:
            agent.run(client)
    managed = [r.body for r in model.requests if r.body.get("system") != SYSTEM]
    assert managed, "no request was managed"
    for body in managed:
        system = body["system"]
        assert system[:3] == SYSTEM  # separate, in order, byte for byte, with their marks
        assert json.dumps(system[:3]) == json.dumps(SYSTEM)
        assert all("cache_control" not in block for block in system[3:])  # the proxy's own
        marks = _marks(body)
        assert len(marks) <= 4
        assert marks[:2] == ["system[1]", "system[2]"]
        last_assistant = max(
            m for m, message in enumerate(body["messages"]) if message["role"] == "assistant"
        )
        assert any(mark.startswith(f"messages[{last_assistant}]") for mark in marks), marks


def _body(tool_marks: int, system_marks: int) -> dict[str, Any]:
    return {
        "tools": [
            {"name": f"t{n}", **({"cache_control": MARK} if n < tool_marks else {})}
            for n in range(3)
        ],
        "system": [
            {
                "type": "text",
                "text": f"s{n}",
                **({"cache_control": MARK} if n < system_marks else {}),
            }
            for n in range(3)
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "go"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "t", "signature": "s"},
                    {"type": "tool_use", "id": "a", "name": "t0", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "a", "content": "out"}],
            },
        ],
    }


def test_marks_go_on_the_last_assistant_block_within_four() -> None:
    one = _body(0, 2)
    place_breakpoints(one, 4)
    assert _marks(one) == ["system[0]", "system[1]", "messages[1][1]"]  # not on the thinking block
    two = _body(0, 2)
    place_breakpoints(two, 4, mark_last=True)
    assert _marks(two) == ["system[0]", "system[1]", "messages[1][1]", "messages[2][0]"]
    crowded = _body(2, 2)  # the client used all four: its earliest give way
    place_breakpoints(crowded, 4, mark_last=True)
    assert _marks(crowded) == ["system[0]", "system[1]", "messages[1][1]", "messages[2][0]"]


def _conversation(calls: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "go"}]}]
    for n in range(calls):
        messages += [
            {"role": "assistant", "content": [{"type": "tool_use", "id": f"c{n}", "name": "t"}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"c{n}"}]},
        ]
    return {"messages": messages}


def test_a_mark_also_goes_before_the_first_output_that_may_collapse_next() -> None:
    body = _conversation(3)  # c1's result (messages[4]) may go: the next request reads up to c1
    place_breakpoints(body, 4, before={"c1"})
    assert _marks(body) == ["messages[3][0]", "messages[5][0]"]
    several = _conversation(3)  # of several, the earliest in the prompt decides
    place_breakpoints(several, 4, before={"c2", "c1"})
    assert _marks(several) == ["messages[3][0]", "messages[5][0]"]
    nothing = _conversation(3)  # an id the request does not hold: the usual mark alone
    place_breakpoints(nothing, 4, before={"gone"})
    assert _marks(nothing) == ["messages[5][0]"]


def _state(active: set[str]) -> Any:
    return SimpleNamespace(active=frozenset(active))


def _chat(*ids: str) -> list[RenderedMessage]:
    return [RenderedMessage("tool", "out", toolcall_id=i) for i in ids]


def test_the_outputs_the_session_collapses_one_request_later_are_found_by_their_age() -> None:
    shown = ShownOutputs()
    shown.saw(_chat("a"), _state({"a"}))
    assert not shown.kept_newest() and shown.first_at_risk() is None  # nothing measured yet
    # each output stays one request more, and goes at the next: age 1 is where prefixes change
    shown.saw(_chat("a", "b"), _state({"a", "b"}))
    shown.saw(_chat("b", "c"), _state({"b", "c"}))
    assert shown.ages == {"b": 1, "c": 0}
    assert shown.kept_newest()
    assert shown.first_at_risk() == "b"
    # outputs that stay while they are active are not at risk at any age
    steady = ShownOutputs()
    for n in range(6):
        ids = [f"o{k}" for k in range(n + 1)]
        steady.saw(_chat(*ids), _state(set(ids)))
    assert steady.kept_newest() and steady.first_at_risk() is None


def test_the_policys_forecast_decides_the_marks_where_it_makes_one() -> None:
    shown = ShownOutputs()
    shown.saw(_chat("a"), _state({"a"}))
    shown.saw(_chat("a", "b"), _state({"a", "b"}))
    shown.saw(_chat("b", "c"), _state({"b", "c"}))  # "a" went at age 1: "b" is at risk
    assert shown.marks(None) == (frozenset({"b"}), True)  # no forecast: the history decides
    # nothing foreseen to go: the last block is marked (the newest is read next time)
    assert shown.marks(frozenset()) == (frozenset({"b"}), True)
    unsteady = ShownOutputs()  # the newest have gone at once lately: no mark after them
    for name in "abcd":
        unsteady.saw(_chat(name), _state({name}))
    assert not unsteady.kept_newest()
    assert unsteady.marks(frozenset()) == (frozenset(), False)
    # the newest foreseen to go once answered: no mark after it, one before it
    assert shown.marks(frozenset({"c"})) == (frozenset({"b", "c"}), False)
