"""The command examples of README.md and docs/harness.md print what the pages say they print.

Every fenced block marked ``console`` is run: its ``$ `` lines are commands, the lines after each
are what the page claims the command prints (stdout, then stderr). A line ``…`` stands for any
lines, and ``…`` inside a line for any text; blank lines are not compared. The claimed lines must
appear in that order. Each page runs in a fresh checkout (the files git knows, nothing the
Makefile installs) with state of its own (XDG folders under a temporary directory), so a page's
``--store auto`` starts its own XTDB node, and without tokenizer data (estimated tokens), as on a
fresh machine.

Blocks that need what a test machine does not have (a model API key, an agent) are plain blocks,
not ``console``: they are not run.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from selfctx.adapters.xtdb import paths

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("README.md", "docs/harness.md")
GAP = "…"


@attrs.frozen
class Command:
    page: str
    line: int
    command: str
    claimed: tuple[str, ...]


def console_blocks(text: str, page: str) -> list[list[Command]]:
    """The ``console`` blocks of a page, each as its commands with their claimed output."""
    blocks: list[list[Command]] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        if lines[index].strip() != "```console":
            index += 1
            continue
        block: list[Command] = []
        index += 1
        while index < len(lines) and lines[index].strip() != "```":
            line = lines[index]
            if line.startswith("$ "):
                block.append(Command(page, index + 1, line[2:], ()))
            elif block and line.strip():
                last = block[-1]
                block[-1] = attrs.evolve(last, claimed=(*last.claimed, line.rstrip()))
            index += 1
        blocks.append(block)
    return blocks


def _pattern(claimed: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in claimed.split(GAP)))


def unmatched(claimed: tuple[str, ...], printed: list[str]) -> str | None:
    """The first claimed line not found, in order, among the printed lines (None: all found)."""
    position = 0
    for line in claimed:
        if line.strip() == GAP:
            continue
        pattern = _pattern(line)
        while position < len(printed) and not pattern.fullmatch(printed[position]):
            position += 1
        if position == len(printed):
            return line
        position += 1
    return None


def test_the_matching_rules() -> None:
    printed = ["a 1", "b 22", "c", "d 333"]
    assert unmatched(("a 1", GAP, "d …"), printed) is None
    assert unmatched(("b …", "c"), printed) is None
    assert unmatched(("c", "b 22"), printed) == "b 22"  # order matters
    assert unmatched(("e",), printed) == "e"
    blocks = console_blocks("x\n```console\n$ echo hi\nhi\n\n$ true\n```\n", "p")
    assert blocks == [[Command("p", 3, "echo hi", ("hi",)), Command("p", 6, "true", ())]]


def test_every_page_has_console_blocks() -> None:
    for page in PAGES:
        assert console_blocks((ROOT / page).read_text(encoding="utf-8"), page), page


def test_make_demo_runs_the_command_the_readme_shows() -> None:
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    ran = next(line.strip() for line in recipe.splitlines()[1:] if "selfctx" in line)
    shown = console_blocks((ROOT / "README.md").read_text(encoding="utf-8"), "README.md")[0][0]
    assert shlex.split(ran)[1:] == shlex.split(shown.command)[1:]


@pytest.mark.slow
@pytest.mark.xtdb
@pytest.mark.parametrize("page", PAGES)
def test_the_commands_print_what_the_page_says(
    page: str, fresh_checkout: Path, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SELFCTX_", "XDG_"))}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    for name in ("XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        env[name] = str(tmp_path / name.lower())
    env["SELFCTX_XTDB_HOME"] = str(paths.xtdb_home())  # the jars make deps-test fetched
    env["SELFCTX_TIKTOKEN_DIR"] = str(tmp_path / "no-tokenizer-data")
    env["COLUMNS"] = "100"
    failures = []
    try:
        for block in console_blocks((ROOT / page).read_text(encoding="utf-8"), page):
            for command in block:
                done = subprocess.run(
                    ["bash", "-c", command.command],
                    cwd=fresh_checkout, env=env, capture_output=True, text=True, timeout=900,
                )  # fmt: skip
                printed = [
                    line.rstrip()
                    for line in (done.stdout + "\n" + done.stderr).splitlines()
                    if line.strip()
                ]
                missing = unmatched(command.claimed, printed)
                if done.returncode != 0 or missing is not None:
                    failures.append(
                        f"{page}:{command.line}: $ {command.command}\n"
                        f"  exit status {done.returncode}; not printed: {missing!r}\n"
                        + "\n".join(f"  | {line}" for line in printed[:60])
                    )
    finally:
        subprocess.run(
            ["bash", "-c", "selfctx xtdb stop; selfctx xtdb stop --in-memory"],
            cwd=fresh_checkout, env=env, capture_output=True, timeout=120,
        )  # fmt: skip
    assert not failures, "\n\n".join(failures)
