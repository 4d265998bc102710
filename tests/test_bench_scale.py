"""``selfctx bench scale`` runs end to end at a small size and reports every figure (what they
measure is for docs/benchmarks.md, not for a test: nothing here looks at a duration)."""

from __future__ import annotations

import pytest

from selfctx.adapters.bench.scale import _median_of_rounds, print_scale, run_scale


def test_the_per_turn_figures_on_the_in_memory_store(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_scale(
        checkpoints=(4, 8, 12), window=2, stores=("memory",), modes=("list", "append"),
        parts=("per_turn",),
    )  # fmt: skip
    for key in ("memory/list", "memory/append"):
        figures = result["per_turn"][key]
        assert "unsupported" not in figures
        assert set(figures["checkpoints"]) == {"4", "8", "12"}
        for f in figures["checkpoints"].values():
            assert f["cpu_ms"] > 0 and f["reference_ms"] > 0 and f["ratio"] is not None
            assert f["cached_mchars"] > 0  # the server says what content it holds
            assert f["turns_measured"] == 2
        # the earlier checkpoints were measured again beside the last, in sessions of their own
        assert {t for t, f in figures["checkpoints"].items() if f.get("beside_turn") == 12} == {
            "4",
            "8",
        }
        assert all(f["alone_cpu_ms"] > 0 for t, f in figures["checkpoints"].items() if t != "12")
        assert figures["memory"]["turns"] == [4, 12]
        assert figures["memory"]["messages_mb_per_100_turns"] > 0
        assert figures["memory_late"]["turns"] == [8, 12]
    print_scale(result)
    out = capsys.readouterr().out
    assert "memory/append" in out and "memory, turns 8-12" in out
    assert "CPU per turn, turn 12 against turn 4" in out


@pytest.mark.xtdb
def test_agents_and_resume_on_a_node(xtdb_jars: object) -> None:
    result = run_scale(
        stores=("xtdb",), modes=("append",), checkpoints=(3,), window=1,
        agent_counts=(2,), agent_turns=6, agent_rounds=2, resume_objects=40,
        parts=("per_turn", "agents", "resume"),
    )  # fmt: skip
    assert result["per_turn"]["xtdb/append"]["disk"]["ratio"] > 0
    rows = result["agents"]["one_node"]
    assert [r["agents"] for r in rows] == [2]
    assert all("failures" not in r and r["requests_per_turn"] > 0 for r in rows)
    assert [len(r["rounds_turns_per_s"]) for r in rows] == [2]
    assert rows[0]["turns"] == 2 * 2 * 6  # two rounds of two agents' six turns
    resume = result["resume"]
    assert resume["digest_kept"] is True
    assert resume["resume_node_cpu_s"] > 0  # the node read the session
    assert resume["resent_list"] == {"diverged": False, "consumed": 0}


@pytest.mark.xtdb
def test_the_memory_part_runs_both_output_sizes_with_the_cache_it_names(
    xtdb_jars: object, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_scale(
        parts=("memory",), memory_checkpoints=(3, 6, 9), window=1, memory_budget=5_000
    )
    memory = result["memory"]
    assert memory["content_budget"] == 5_000
    for name in ("small", "large"):
        figures = memory[name]
        assert set(figures["checkpoints"]) == {"3", "6", "9"}
        assert figures["memory_late"]["turns"] == [6, 9]
        # the server was given the budget: it holds about that (and the object used last)
        assert figures["checkpoints"]["9"]["cached_mchars"] <= 0.1
    large, small = memory["large"], memory["small"]
    assert large["messages_bytes"] > max(2 * small["messages_bytes"], 150_000)
    print_scale(result)
    out = capsys.readouterr().out
    assert "content cache (files.content_budget) 5,000 characters" in out
    assert "large against small" in out


def test_an_agent_row_is_the_median_of_its_rounds() -> None:
    rounds = [
        {"agents": 4, "turns": 48, "turns_per_s": tps, "p50_ms": p50, "requests_per_turn": 4.0}
        for tps, p50 in ((20.0, 300.0), (31.0, 150.0), (29.0, 200.0))
    ]
    row = _median_of_rounds(rounds)
    assert row["agents"] == 4 and row["turns"] == 144
    assert row["turns_per_s"] == 29.0 and row["p50_ms"] == 200.0
    assert row["rounds_turns_per_s"] == [20.0, 31.0, 29.0]
    assert "failures" not in row
    failed = _median_of_rounds([*rounds[:2], {**rounds[2], "failures": ["agent 1: boom"]}])
    assert failed["failures"] == ["agent 1: boom"]
