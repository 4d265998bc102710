"""The documents stay true to the tree (decision 0046): the decision index lists every record,
and every benchmark command a report names exists."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from selfctx.adapters.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]
DECISIONS = ROOT / "docs" / "decisions"


def test_the_decision_index_lists_every_record_once() -> None:
    records = sorted(p.name for p in DECISIONS.glob("[0-9][0-9][0-9][0-9]-*.md"))
    index = (DECISIONS / "README.md").read_text()
    linked = re.findall(r"\]\((\d{4}-[^)]+\.md)\)", index)
    assert sorted(linked) == records
    numbers = [name[:4] for name in records]
    assert len(set(numbers)) == len(numbers), "two records share a number"


def _subcommands(parser: argparse.ArgumentParser, *path: str) -> set[str]:
    for name in path:
        actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        parser = actions[0].choices[name]
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(actions[0].choices)


def test_every_benchmark_a_report_names_exists() -> None:
    named = set(
        re.findall(r"selfctx bench ([a-z]+)", (ROOT / "docs" / "benchmarks.md").read_text())
    )
    assert named, "docs/benchmarks.md names no benchmark"
    assert named <= _subcommands(build_parser(), "bench")
