"""``selfctx bench context --losses``: every used line a contender hid, where it came from, and why
it was not in the request."""

from __future__ import annotations

import json
from typing import Any

import pytest

from selfctx.adapters.bench.context import replay_service_factory, run_context_bench
from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.cli.main import main
from selfctx.adapters.harness.trajectories import Trajectory
from selfctx.adapters.harness.trajectories.model import calls_of
from selfctx.adapters.tokenizer import EstimateTokenizer
from selfctx.application.policies import policy_by_name

USED = "    def compute_the_answer(self, value):  # copied later"


def _call(call_id: str, command: str) -> dict[str, Any]:
    arguments = json.dumps({"command": command})
    return {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": arguments}}


def _trajectory() -> Trajectory:
    """An agent greps a function, answers, works on something else, then copies the line."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the bug."},
        {"role": "assistant", "content": "Look.", "tool_calls": [_call("c1", "echo hello")]},
        {"role": "tool", "tool_call_id": "c1", "content": f"header\n{USED}\nfooter\n"},
    ]
    for n in range(2, 6):
        messages += [
            {"role": "assistant", "content": f"Step {n}.", "tool_calls": [_call(f"c{n}", "ls")]},
            {"role": "tool", "tool_call_id": f"c{n}", "content": "x" * 2000 + f" {n}"},
        ]
    messages.append({"role": "assistant", "content": f"The function:\n{USED}\nis wrong."})
    return Trajectory(
        name="copied",
        format="openai-messages",
        messages=tuple(messages),
        calls=calls_of(messages),
        workspace="/w",
        cwd="/w",
    )


def test_a_hidden_line_names_its_output_and_the_rule_that_collapsed_it() -> None:
    tokenizer = EstimateTokenizer()
    result = run_context_bench(
        [_trajectory()],
        replay_service_factory(build_service, tokenizer),
        tokenizer,
        {"relevance": policy_by_name("relevance")},
        losses=["relevance"],
    )
    assert result["total"]["relevance"]["used"] == 1
    assert result["total"]["relevance"]["visible"] == 0  # collapsed once answered
    (entry,) = result["losses"]["relevance"]["lines"]
    assert entry["line"] == USED.strip()
    assert entry["trajectory"] == "copied" and entry["call"] == 6
    assert entry["tool"] == "bash" and entry["command"] == "echo hello"
    assert entry["program"] == "echo" and entry["view"] == "none" and entry["views"] == []
    assert entry["calls_back"] == 4  # arrived before call 2: calls 2 to 5 in between
    assert (entry["cause"], entry["tier"], entry["working_set"]) == ("seen", "unused", False)
    summary = result["losses"]["relevance"]["summary"]
    assert summary["hidden"] == 1 and summary["by_cause"] == {"seen/unused": 1}
    assert summary["by_calls_back"] == {"4-10": 1}


def test_naive_hides_nothing_and_no_losses_are_listed_unless_asked() -> None:
    tokenizer = EstimateTokenizer()
    result = run_context_bench(
        [_trajectory()],
        replay_service_factory(build_service, tokenizer),
        tokenizer,
        {"ssot": policy_by_name("ssot")},
    )
    assert "losses" not in result
    assert result["total"]["naive"]["visible"] == result["total"]["naive"]["used"] == 1


def test_the_command_line_prints_the_losses(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    trajectory = _trajectory()
    path = tmp_path / "copied.json"
    path.write_text(
        json.dumps(
            {"format": "openai-messages", "workspace": "/w", "messages": list(trajectory.messages)}
        )
    )
    assert main(["bench", "context", str(path), "--policy", "relevance", "--losses"]) == 0
    out = capsys.readouterr().out
    assert "hidden used lines of relevance: 1" in out
    assert "seen/unused" in out and "echo hello" in out
    assert "by cause: seen/unused 1" in out
    assert main(["bench", "context", str(path), "--policy", "nope"]) == 2
