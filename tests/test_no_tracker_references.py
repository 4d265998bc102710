"""The project's text is for readers outside the team: no code, comment, document or test points
at the team's issue tracker ("issue 14", "item 9") or calls the design by the team's nickname for
it. Cite a decision record (docs/decisions/) or docs/specification.md instead.

The whole source tree is read (every text file but installed, generated and cached ones, and this
file, whose examples are references), so a reference that comes back anywhere fails here with its
file and line.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_NICKNAME = "SS" + "OT"
PATTERNS: dict[str, re.Pattern[str]] = {
    # "issue 14", "issues 14 and 15", "Issue #5", "issue-24"; not "issues/2528" in a link
    "a tracker issue": re.compile(r"\bissues?[ _-]?#?[0-9]+", re.IGNORECASE),
    # "item 9", "items 2 and 3": the numbered items of a tracker issue
    "a tracker item": re.compile(r"\bitems? #?[0-9]+\b", re.IGNORECASE),
    # the design's nickname, in prose or in a name
    "the design's nickname": re.compile(_NICKNAME),
}
ADVICE = (
    "cite a decision record (docs/decisions/NNNN-*.md) or docs/specification.md, or say what the"
    " text means in its own words; for the original design, write 'the design'"
)

SKIPPED_DIRS = {"node_modules", "__pycache__", "build", "dist", "target", "cache"}
"""Installed, generated or cached trees (besides every directory whose name starts with a dot:
.git, .venv, .clients, the tools' caches)."""
TEXT_SUFFIXES = {
    ".py", ".pyi", ".md", ".toml", ".cfg", ".ini", ".txt", ".clj", ".edn", ".xml", ".ts", ".js",
    ".cjs", ".mjs", ".json", ".yml", ".yaml", ".sh", ".html", ".css", ".typed",
}  # fmt: skip
TEXT_NAMES = {"Makefile", "LICENSE", "run"}
LOCK_FILES = {"package-lock.json"}
"""Written by npm from the registry; they hold package names and addresses only."""


def source_files(root: Path = ROOT) -> list[Path]:
    """Every text file of the source tree, in a stable order."""
    found: list[Path] = []
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).parts
        if any(p.startswith(".") and p not in (".ci",) for p in relative[:-1]):
            continue
        if any(p in SKIPPED_DIRS or p.endswith(".egg-info") for p in relative[:-1]):
            continue
        if not path.is_file() or path.name in LOCK_FILES:
            continue
        if path.suffix in TEXT_SUFFIXES or path.name in TEXT_NAMES:
            found.append(path)
    return found


def tracker_references(text: str) -> list[tuple[int, str, str]]:
    """(line number, what was found, the line) for every tracker reference in ``text``."""
    hits = []
    for number, line in enumerate(text.splitlines(), start=1):
        for what, pattern in PATTERNS.items():
            if pattern.search(line):
                hits.append((number, what, line.strip()))
    return hits


@pytest.mark.parametrize(
    "line",
    [
        "Status: accepted (issue 16).",
        "(issues 6 and 14)",
        "the outsider's trial (Issue #15) found",
        "see issue-24",
        "(issue 15 items 2 and 3)",
        "# -- item 4: ids shaped like the store's own documents",
        "the " + _NICKNAME + "'s layout",
        _NICKNAME + "_SESSION_FIELDS = {",
    ],
)
def test_a_tracker_reference_is_found(line: str) -> None:
    assert tracker_references(line)


@pytest.mark.parametrize(
    "line",
    [
        "(https://github.com/xtdb/xtdb/issues/2528)",
        "Please solve this issue: evaluate('2 - 3 - 4') returns 3",
        "The example from the issue:",
        "the `ssot` layout (decision 0008)",
        "for item in items: total += 1",
        "docs/specification.md §3, Tracking",
    ],
)
def test_ordinary_text_is_not_a_tracker_reference(line: str) -> None:
    assert not tracker_references(line)


def test_the_tree_is_read() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in source_files()}
    for expected in ("README.md", "Makefile", "pyproject.toml", "domain/objects.py"):
        assert expected in names
    assert "tests/test_no_tracker_references.py" in names
    assert "xtdb/src/selfctx/http_server.clj" in names
    assert not any(n.startswith(".venv/") or "/node_modules/" in n for n in names)


def test_no_code_comment_document_or_test_refers_to_the_tracker() -> None:
    found = []
    for path in source_files():
        if path == Path(__file__).resolve():
            continue  # the examples above
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, what, line in tracker_references(text):
            found.append(f"{path.relative_to(ROOT)}:{number}: {what}: {line[:120]}")
    assert not found, f"{len(found)} tracker reference(s); {ADVICE}:\n" + "\n".join(found)
