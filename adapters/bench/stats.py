"""Small statistics helpers shared by the benchmarks."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

__all__ = ["percentile", "summary_ms"]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation between closest ranks."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary_ms(seconds: Sequence[float]) -> dict[str, float]:
    """Median and p95 of durations given in seconds, in milliseconds rounded to 3 places."""
    return {
        "median": round(statistics.median(seconds) * 1000, 3),
        "p95": round(percentile(seconds, 95) * 1000, 3),
    }
