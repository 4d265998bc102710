"""The peers of ``selfctx bench context`` follow their sources' rules (docs/benchmarks.md)."""

from __future__ import annotations

from typing import Any

from selfctx.adapters.bench.context import replay_service_factory, run_context_bench
from selfctx.adapters.bench.peers import (
    AmortizedForgetting,
    ClearToolUses,
    ObservationMasking,
    default_peers,
)
from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.harness.trajectories import Trajectory
from selfctx.adapters.harness.trajectories.model import calls_of
from selfctx.adapters.tokenizer import EstimateTokenizer
from selfctx.application.policies import policy_by_name


def _session(outputs: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
    ]
    for n in range(outputs):
        call = {"id": f"c{n}", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
        messages += [
            {"role": "assistant", "content": f"step {n}", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{n}", "content": f"output {n}\nsecond line"},
        ]
    return messages


def _count(messages: Any) -> int:
    return 10 * len(messages)


def test_masking_keeps_the_last_outputs_and_says_how_many_lines_went() -> None:
    messages = _session(12)
    sent = ObservationMasking("m", keep=10).prompt(messages, frozenset(), _count)
    tools = [m["content"] for m in sent if m["role"] == "tool"]
    assert tools[:2] == ["Old environment output: (2 lines omitted)"] * 2
    assert tools[2:] == [f"output {n}\nsecond line" for n in range(2, 12)]
    assert [m["content"] for m in sent if m["role"] != "tool"] == [
        m["content"] for m in messages if m["role"] != "tool"
    ]


def test_masking_counts_observations_carried_by_user_messages() -> None:
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "ls"},
        {"role": "user", "content": "a\nb\nc"},
        {"role": "assistant", "content": "cat x"},
        {"role": "user", "content": "x"},
    ]
    sent = ObservationMasking("m", keep=1).prompt(messages, frozenset({3, 5}), _count)
    assert sent[3]["content"] == "Old environment output: (3 lines omitted)"
    assert sent[1]["content"] == "task" and sent[5]["content"] == "x"


def test_tool_result_clearing_waits_for_its_trigger_then_keeps_the_last_three() -> None:
    messages = _session(6)
    peer = ClearToolUses("c", trigger=10 * len(messages), keep=3)
    assert peer.prompt(messages, frozenset(), _count) == messages  # at the trigger: nothing
    more = _session(7)
    sent = peer.prompt(more, frozenset(), _count)
    tools = [m["content"] for m in sent if m["role"] == "tool"]
    assert tools[:4] == ["[cleared: an earlier tool result]"] * 4
    assert tools[4:] == [f"output {n}\nsecond line" for n in (4, 5, 6)]
    assert [m.get("tool_calls") for m in sent] == [m.get("tool_calls") for m in more]


def test_amortized_forgetting_halves_the_history_once_over_its_size_and_for_good() -> None:
    peer = AmortizedForgetting("a", max_size=10, keep_first=1)
    peer.start()
    messages = _session(5)  # 11 events after the system prompt: over 10
    sent = peer.prompt(messages, frozenset(), _count)
    assert sent[0]["content"] == "sys" and sent[1]["content"] == "task"  # the first event stays
    assert len(sent) == 1 + 5  # the system prompt, then half of max_size events
    # a result whose call was forgotten goes with it: the list starts with a call again
    assert sent[2]["role"] == "assistant"
    # forgotten for good: the next call grows from there
    longer = _session(6)
    again = peer.prompt(longer, frozenset(), _count)
    assert len(again) == len(sent) + 2
    peer.start()  # a new trajectory: nothing forgotten
    assert peer.prompt(_session(2), frozenset(), _count) == _session(2)


def test_the_bench_measures_the_peers_beside_the_policies() -> None:
    messages = [
        {**m, "content": m["content"] + " padding" * 50} if m["role"] == "tool" else m
        for m in _session(15)
    ]
    messages.append({"role": "assistant", "content": "output 0 is what I needed"})
    trajectory = Trajectory(
        name="t",
        format="openai-messages",
        messages=tuple(messages),
        calls=calls_of(messages),
        workspace="/w",
        cwd="/w",
    )
    tokenizer = EstimateTokenizer()
    result = run_context_bench(
        [trajectory],
        replay_service_factory(build_service, tokenizer),
        tokenizer,
        {"relevance": policy_by_name("relevance")},
        peers=default_peers(),
    )
    assert list(result["total"]) == [
        "naive",
        "relevance",
        "masking-10",
        "clear-tool-uses-100k",
        "clear-tool-uses-30k",
        "amortized-forgetting-100",
    ]
    for figures in result["total"].values():
        assert figures["tokens"] > 0 and figures["peak"] > 0 and figures["cost"] > 0
    masked = result["total"]["masking-10"]
    assert masked["tokens"] < result["total"]["naive"]["tokens"]
    assert result["total"]["clear-tool-uses-100k"] == result["total"]["naive"]  # never triggers
