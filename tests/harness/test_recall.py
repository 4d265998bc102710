"""The used-content recall measure (decision 0021) on small hand-made message streams."""

from __future__ import annotations

import json
from typing import Any

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.harness.recall import (
    MIN_CHARS,
    Recall,
    request_strings,
    used_lines,
    visible_lines,
)
from selfctx.adapters.harness.replay import replay, replay_filesystem_id
from selfctx.adapters.harness.tokens import PromptCounter
from selfctx.adapters.harness.trajectories import convert
from selfctx.adapters.memory import MemoryStore
from selfctx.adapters.tokenizer import EstimateTokenizer
from selfctx.application.policies import policy_by_name

LINE_A = "def separability(model, left, right):"
LINE_B = "    return np.hstack([cleft, cright])"
LINE_C = "        raise ValueError('no such operator')"
SHORT = "x = 1"


def _call(call_id: str, command: str) -> dict[str, Any]:
    arguments = json.dumps({"command": command})
    return {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": arguments}}


def _stream() -> list[dict[str, Any]]:
    source = f"{LINE_A}\n{SHORT}\n{LINE_B}\n{LINE_C}\n"
    return [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "fix it"},
        {"role": "assistant", "content": "Read it.", "tool_calls": [_call("c1", "cat m.py")]},
        {"role": "tool", "tool_call_id": "c1", "content": source},
        # call 2: copies LINE_A into its text and LINE_B (indented) into a command's heredoc
        {
            "role": "assistant",
            "content": f"The function:\n{LINE_A}",
            "tool_calls": [_call("c2", f"python - <<'EOF'\n{LINE_B}\n{SHORT}\nEOF")],
        },
        {"role": "tool", "tool_call_id": "c2", "content": "ok"},
        # call 3: LINE_A again (an earlier assistant message has it: not used), LINE_C (used)
        {
            "role": "assistant",
            "content": f"{LINE_A}\n{LINE_C}\nnot in any output, long enough to count",
        },
    ]


def test_used_lines_follow_the_definition() -> None:
    messages = _stream()
    used = used_lines(messages, [2, 4, 6])
    assert used[0] == ()  # nothing seen yet
    # stripped, at least MIN_CHARS characters, from a tool output; SHORT is too short
    assert len(SHORT) < MIN_CHARS
    assert used[1] == tuple(sorted([LINE_A, LINE_B.strip()]))
    # LINE_A is a line of an earlier assistant message now: the model may have copied itself
    assert used[2] == (LINE_C.strip(),)


def test_arguments_count_as_decoded_strings_and_plain_text() -> None:
    nested = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "e",
                "type": "function",
                "function": {
                    "name": "str_replace_editor",
                    "arguments": json.dumps({"old_str": f"a\n{LINE_B}", "opts": [{"k": LINE_C}]}),
                },
            },
            {"id": "f", "type": "function", "function": {"name": "x", "arguments": "{not json"}},
        ],
    }
    assert list(request_strings([nested])) == [f"a\n{LINE_B}", LINE_C, "{not json"]


def test_visible_lines_anywhere_in_the_request() -> None:
    lines = [LINE_A, LINE_B.strip(), LINE_C.strip()]
    request = {
        "messages": [
            {"role": "tool", "tool_call_id": "c", "content": f"    12\t{LINE_A}"},  # numbered
            {"role": "assistant", "content": "", "tool_calls": [_call("d", LINE_B)]},
        ]
    }
    assert visible_lines(request, lines) == 2
    anthropic = {
        "system": [{"type": "text", "text": LINE_C}],
        "messages": [
            {"role": "user", "content": [{"type": "tool_result", "content": LINE_A}]},
            {"role": "assistant", "content": [{"type": "tool_use", "input": {"c": LINE_B}}]},
        ],
    }
    assert visible_lines(anthropic, lines) == 3
    assert visible_lines(request, []) == 0


def test_recall_sums_and_says_nothing_without_evidence() -> None:
    total = Recall()
    assert total.recall is None and total.figures()["recall"] is None
    total.add(4, 3)
    total.add(2, 0)
    assert total.figures() == {"used": 6, "visible": 3, "recall": 0.5}


def _trajectory() -> Any:
    """A session whose first output is long enough to collapse, and whose last response copies
    a line of it."""
    filler = "\n".join(f"line {n} of a long listing that fills the context" for n in range(300))
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [_call("c1", "python3 report.py")]},
        {"role": "tool", "tool_call_id": "c1", "content": f"{LINE_C}\n{filler}"},
    ]
    for n in range(2, 6):
        messages += [
            {"role": "assistant", "content": "", "tool_calls": [_call(f"c{n}", f"seq {n}")]},
            {"role": "tool", "tool_call_id": f"c{n}", "content": filler.replace("line", f"r{n}")},
        ]
    messages.append({"role": "assistant", "content": f"The error was:\n{LINE_C}"})
    return convert({"format": "openai-messages", "workspace": "/w", "messages": messages}, "t")


def _replayed(request_format: str = "openai", **options: Any) -> Any:
    trajectory = _trajectory()
    service = build_service(
        store=MemoryStore(),
        workspace="/",
        default_filesystem_id=replay_filesystem_id(trajectory),
        tokenizer=EstimateTokenizer(),
    )
    return replay(
        trajectory,
        service,
        PromptCounter(EstimateTokenizer()),
        request_format=request_format,
        policy=policy_by_name("inline", **options),
    )


def test_a_replay_counts_used_and_visible_lines_per_call() -> None:
    report = _replayed(trigger_tokens=3000, clear_at_least=500, keep_recent=1)
    assert [c.used_lines for c in report.calls] == [0, 0, 0, 0, 0, 1]
    # the output that held the line collapsed long before the last call: recall below 1
    assert report.calls[-1].visible_lines == 0
    assert report.recall == Recall(1, 0)
    assert report.total()["recall"] == 0.0
    # without a trigger nothing collapses: the line is there, in both request formats
    for request_format in ("openai", "anthropic"):
        kept = _replayed(request_format, trigger_tokens=None)
        assert kept.recall == Recall(1, 1)


def test_naive_recall_is_one_by_construction() -> None:
    trajectory = _trajectory()
    positions = [c.position for c in trajectory.calls]
    used = used_lines(trajectory.messages, positions)
    for position, lines in zip(positions, used, strict=True):
        assert visible_lines(trajectory.messages[:position], lines) == len(lines)
