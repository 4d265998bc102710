"""The long coding task every real client plays against the scripted model: list the project,
read the code, run the failing test, read many large log files (20-38 KB each), bring a collapsed
one back with a context tool, fix the bug, run the test again, finish.

The same task is recorded with each client talking straight to the scripted model (what
``selfctx bench cache`` replays, see tests/proxy/record.py) and run through the proxy by the
client matrix (tests/proxy/test_matrix.py). A script is a function of what the model was sent:
its step is the number of assistant turns in the request, so a context call the proxy answered
moves the script on by one, and a request of the client's own (a title, a summary) gets a short
answer.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from selfctx.adapters.proxy.scripted import Seen, Step
from tests.proxy.support import make_repo

__all__ = [
    "ACTIVATION_STEP",
    "aider_input",
    "log_text",
    "make_task_repo",
    "tool_script",
]

ACTIVATION_STEP = 8
"""The step that calls a context tool when the model is offered one."""
_WORDS = (
    "scheduler",
    "worker",
    "cache",
    "index",
    "batch",
    "request",
    "response",
    "queue",
    "shard",
    "replica",
    "lease",
    "commit",
    "snapshot",
    "compaction",
    "checkpoint",
    "reader",
    "writer",
    "socket",
    "buffer",
    "parser",
    "render",
    "session",
)
_LEVELS = ("INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR")
_COLLAPSED = re.compile(r"\[(#\d+) collapsed:")


def log_text(part: int) -> str:
    """The text of ``logs/partNN.txt``: 20-38 KB of log lines, the same on every machine."""
    size = 20_000 + (part * 7919) % 18_000
    lines: list[str] = []
    total, n = 0, 0
    while total < size:
        digest = hashlib.sha256(f"{part}:{n}".encode()).digest()
        words = " ".join(_WORDS[b % len(_WORDS)] for b in digest[:5])
        line = (
            f"2025-03-{1 + part % 28:02d} {digest[5] % 24:02d}:{digest[6] % 60:02d}:"
            f"{digest[7] % 60:02d}.{digest[8]:03d} {_LEVELS[digest[9] % len(_LEVELS)]:<5} "
            f"part{part:02d}[{digest[10] * 7 % 9000 + 1000}] {words} id={digest[11:15].hex()} "
            f"took={digest[15] * 3 % 997}ms"
        )
        lines.append(line)
        total += len(line) + 1
        n += 1
    return "\n".join(lines) + "\n"


def make_task_repo(root: Path, parts: int, *, git: bool = False, marker: str = "") -> Path:
    """The calculator project of ``make_repo`` with ``parts`` log files, a git repository when
    ``git`` (aider wants one); ``marker`` is written into calc.py and README.md, which every
    client reads, so that a test can tell whose text a request holds."""
    repo = make_repo(root)
    if marker:
        (repo / "calc.py").write_text(f"# {marker}\n" + (repo / "calc.py").read_text())
        (repo / "README.md").write_text((repo / "README.md").read_text() + f"\n{marker}\n")
    (repo / "logs").mkdir()
    for part in range(1, parts + 1):
        (repo / "logs" / f"part{part:02d}.txt").write_text(log_text(part))
    if git:
        env = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]
        for argv in (["git", "init", "-q"], [*env, "add", "."], [*env, "commit", "-qm", "start"]):
            subprocess.run(argv, cwd=repo, check=True, capture_output=True)
    return repo


def commands(steps: int) -> list[str | None]:
    """The shell commands of a task of ``steps`` model calls (the last answers in text, so
    ``steps - 1`` commands); None is the step that calls a context tool."""
    reads = steps - 8
    plan: list[str | None] = ["ls", "cat calc.py", "python3 test_calc.py"]
    plan += [f"cat logs/part{n:02d}.txt" for n in range(1, reads + 1)]
    plan.insert(ACTIVATION_STEP, None)
    plan += ["sed -i 's/a - b/a + b/' calc.py", "python3 test_calc.py", "cat README.md"]
    assert len(plan) == steps - 1, (len(plan), steps)
    return plan


def tool_script(
    steps: int,
    tool: str,
    arguments: Callable[[str], Mapping[str, Any]],
    *,
    prefix: str = "context_",
    done: str = "Fixed: add() now adds.",
) -> Callable[[Seen], Step]:
    """The task for a client whose shell tool is ``tool`` (its arguments made from a command);
    the activation step calls ``{prefix}activate`` on the latest collapsed output (a large log)
    when the request offers it, else reads one more file."""
    plan = commands(steps)

    def script(seen: Seen) -> Step:
        names = seen.tool_names()
        if tool not in names:
            return Step("ok")  # a side request of the client's (a title, a summary)
        if seen.turn >= len(plan):
            return Step(done)
        command = plan[seen.turn]
        if command is None:
            handles = _COLLAPSED.findall(seen.text)
            if f"{prefix}activate" in names and handles:
                return Step(
                    "Let me see that output again.",
                    ((f"{prefix}activate", {"id": handles[-1]}),),
                )
            command = "cat logs/part01.txt"
        text = "Reading the logs." if command.startswith("cat logs") else ""
        return Step(text, ((tool, arguments(command)),))

    return script


def aider_input(steps: int) -> str:
    """What is typed into aider, one line each: ``/run`` commands whose output aider adds to the
    chat, each followed by a question (one model call, answered with an edit of notes.md), then
    the fix request and a last test run: ``steps`` model calls in all."""
    lines = []
    for n in range(1, steps):
        lines.append(f"/run cat logs/part{n:02d}.txt")
        lines.append(f"What stands out in part {n}?")
    lines.append("Fix add() in calc.py so that the test passes.")
    lines.append("/run python3 test_calc.py")
    return "\n".join(lines) + "\n"
