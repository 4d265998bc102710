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


def _numbers_after(index: str, marker: str) -> set[int]:
    """The record numbers (and ranges) named in the index's paragraph that starts with
    ``marker`` (none if it has no such paragraph)."""
    if marker not in index:
        return set()
    paragraph = index.split(marker, 1)[1].split("\n\n", 1)[0]
    named: set[int] = set()
    for first, last in re.findall(r"(\d{4})(?:\s*[\u2013-]\s*(\d{4}))?", paragraph):
        named.update(range(int(first), int(last or first) + 1))
    return named


def test_every_unused_number_is_explained() -> None:
    used = {int(p.name[:4]) for p in DECISIONS.glob("[0-9][0-9][0-9][0-9]-*.md")}
    unused = set(range(1, max(used) + 1)) - used
    index = (DECISIONS / "README.md").read_text()
    # Never assigned, or held by work not merged yet (its record lands with it).
    gaps = _numbers_after(index, "**Gaps in the numbers.**")
    held = _numbers_after(index, "**Held:**")
    assert not held & used, "a held number has its record: drop it from the Held paragraph"
    assert gaps | (held & unused) == unused and not gaps & held


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


def test_the_readme_quotes_what_the_main_job_prints(tmp_path: Path) -> None:
    """``make demo`` on a fresh machine (no tokenizer data: estimated tokens) prints the totals
    the README's quick start shows."""
    import os
    import subprocess
    import sys

    readme = (ROOT / "README.md").read_text()
    command = [sys.executable, "-m", "selfctx.adapters.cli.main", "replay"]
    command.append(str(ROOT / "adapters" / "cli" / "sample_session.json"))
    env = {**os.environ, "SELFCTX_TIKTOKEN_DIR": str(tmp_path)}  # an empty one: estimates
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    quoted = [line for line in readme.splitlines() if line.startswith(("total: ", "recall: "))]
    printed = [line for line in out.splitlines() if line.startswith(("total: ", "recall: "))]
    assert quoted and quoted == printed
