"""The sweep chart of ``selfctx bench context --chart``: recall against tokens, one point per
contender, so the frontier is visible at a glance (docs/benchmarks.md).

Tokens are a share of the naive harness's; recall is the share of used lines the prompt held
(``selfctx.adapters.harness.recall``). Points no other point beats on both axes (fewer tokens
and at least the recall) form the frontier, drawn as a step line; the goal region (tokens at
most 0.50 of naive, recall at least 0.90) is shaded. matplotlib comes with the ``dev`` extra.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["frontier", "sweep_chart"]

TOKENS_GOAL = 0.50
RECALL_GOAL = 0.90


def frontier(points: Mapping[str, tuple[float, float]]) -> list[str]:
    """Names of the points (tokens, recall) no other point dominates, by tokens."""
    out = []
    for name, (tokens, recall) in points.items():
        beaten = any(
            (t <= tokens and r >= recall) and (t, r) != (tokens, recall)
            for other, (t, r) in points.items()
            if other != name
        )
        if not beaten:
            out.append(name)
    return sorted(out, key=lambda n: points[n])


def _family(name: str) -> str:
    return name.split("[", 1)[0].split("-", 1)[0]


def _steps(points: Mapping[str, tuple[float, float]], names: list[str]) -> tuple[list[float], ...]:
    xs: list[float] = []
    ys: list[float] = []
    for name in names:
        tokens, recall = points[name]
        if xs:  # a step: the recall reached so far holds until the next point
            xs.append(tokens)
            ys.append(ys[-1])
        xs.append(tokens)
        ys.append(recall)
    return xs, ys


def sweep_chart(path: str, total: Mapping[str, Any], default: str, tokenizer: str) -> None:
    """Write the chart of every contender in ``total`` (the bench's totals) to ``path``: the
    frontier before the relevance policy (``ssot``, ``inline`` and its variants) and after (every
    contender)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    naive = total["naive"]["tokens"]
    points = {
        name: (figures["tokens"] / naive, figures["recall"])
        for name, figures in total.items()
        if figures.get("recall") is not None
    }
    figure, axes = plt.subplots(figsize=(11, 6), dpi=120)
    axes.add_patch(
        matplotlib.patches.Rectangle(
            (0, RECALL_GOAL), TOKENS_GOAL, 1.05 - RECALL_GOAL, color="tab:green", alpha=0.12
        )
    )
    axes.text(
        0.02,
        RECALL_GOAL + 0.015,
        "goal: tokens <= 0.50, recall >= 0.90",
        fontsize=8,
        color="tab:green",
    )
    colours = {"naive": "black", "ssot": "tab:gray", "inline": "tab:blue"}
    markers = "osD^v<>phX"
    variants = 0
    for name, (tokens, recall) in sorted(points.items(), key=lambda item: item[1]):
        family = _family(name)
        colour = colours.get(family, "tab:red")
        if name == default:
            marker, size = "*", 260
        elif "[" in name or family != name:
            marker, size = markers[variants % len(markers)], 45
            variants += 1
        else:
            marker, size = "o", 90
        label = f"{name}  ({tokens:.2f}, {recall:.2f})" + (" default" if name == default else "")
        axes.scatter(
            tokens, recall, s=size, marker=marker, color=colour, zorder=3, alpha=0.85, label=label
        )
    before = {n: p for n, p in points.items() if _family(n) in ("naive", "ssot", "inline")}
    for chosen, colour, text in (
        (before, "tab:blue", "frontier before"),
        (points, "tab:red", "frontier after"),
    ):
        xs, ys = _steps(chosen, frontier(chosen))
        axes.plot(xs, ys, color=colour, linewidth=1.2, alpha=0.5, linestyle="--", label=text)
    axes.set_xlim(0, max(1.05, max(t for t, _ in points.values()) + 0.05))
    axes.set_ylim(0, 1.05)
    axes.set_xlabel(f"input tokens, share of naive ({tokenizer})")
    axes.set_ylabel("recall: share of used lines the prompt held")
    axes.set_title("Recall against tokens, per policy and variant (selfctx bench context)")
    axes.grid(alpha=0.3)
    axes.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=7, frameon=False)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
