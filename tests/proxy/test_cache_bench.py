"""The recorded client sessions through the proxy, billed by the providers' caching rules
(``selfctx bench cache``): managed cost within the goals, and no request larger than the client's.
The figures depend on the recordings and the rules only, not on the machine."""

from __future__ import annotations

import pytest

from selfctx.adapters.bench.cache import RECORDINGS, run_cache

pytestmark = pytest.mark.slow

GOALS = {
    "claude-code-28": 0.60,
    "claude-code-60": 0.50,
    "codex-28": 1.0,  # no worse than direct
    "pi-28": 1.0,
    "aider-28": 1.0,
}


def test_the_recorded_sessions_cost_less_through_the_proxy() -> None:
    paths = [RECORDINGS / f"{name}.jsonl.xz" for name in GOALS]
    result = run_cache(paths)
    for run in result["runs"]:
        name = run["recording"].removesuffix(".jsonl.xz")
        assert run["larger_requests"] == 0, name
        assert run["upstream_bytes"] <= run["client_bytes"], name
        for figures in run["apis"].values():
            assert figures["ratio"] <= GOALS[name], (name, figures)
