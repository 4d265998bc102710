"""``selfctx bench context --long-session`` : the trajectories as one session, with and
without compaction. The concatenation is checked on the shipped example; the figures' claim —
with compaction the chat stays within a 32k limit — on the development set when present."""

from __future__ import annotations

import pytest

from selfctx.adapters.bench.context import replay_service_factory
from selfctx.adapters.bench.long_session import BUDGET, concatenate, run_long_session
from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.cli.replay_cmd import SAMPLE_SESSION
from selfctx.adapters.harness.trajectories import load
from selfctx.adapters.tokenizer import EstimateTokenizer
from tests.replay.data import DEV_FILES


def test_concatenation_keeps_every_call_and_keeps_ids_apart() -> None:
    (sample,) = load(SAMPLE_SESSION)
    long = concatenate([sample, sample])
    assert len(long.calls) == 2 * len(sample.calls)
    assert [m["role"] for m in long.messages].count("system") == 1
    ids = [c["id"] for m in long.messages for c in m.get("tool_calls") or ()]
    assert len(ids) == 2 * len(set(ids))  # the same provider ids twice: the session tells them
    # apart (decision 0030), and the replay below records every call
    for call in long.calls:
        assert long.messages[call.position]["role"] == "assistant"
    with pytest.raises(ValueError):
        concatenate([])


def test_the_long_session_bench_reports_both_contenders() -> None:
    (sample,) = load(SAMPLE_SESSION)
    tokenizer = EstimateTokenizer()
    result = run_long_session(
        [sample, sample], replay_service_factory(build_service, tokenizer), tokenizer
    )
    default = result["default_policy"]
    assert set(result["total"]) == {"naive", default, f"{default}+compaction"}
    assert result["budget"] == BUDGET and result["calls"] == 2 * len(sample.calls)
    for figures in result["total"].values():
        assert figures["tokens"] > 0 and figures["peak"] > 0


if DEV_FILES:  # the development set extends the suite when present

    @pytest.mark.slow
    def test_with_compaction_the_development_set_fits_32k() -> None:
        from selfctx.adapters.bench.context import trajectories_in

        trajectories = trajectories_in(DEV_FILES)
        tokenizer = EstimateTokenizer()
        result = run_long_session(
            trajectories, replay_service_factory(build_service, tokenizer), tokenizer
        )
        total = result["total"]
        default = result["default_policy"]
        assert total[default]["peak"] > BUDGET  # the chat alone outgrows the limit ...
        assert total[f"{default}+compaction"]["peak"] <= BUDGET  # ... unless it is compacted
        assert total[f"{default}+compaction"]["cost"] < total[default]["cost"]
