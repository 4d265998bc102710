"""A made-up agent session for the scale benchmark: turns of an assistant message with one tool
call and its result, in OpenAI Chat Completions form, against real files in a workspace.

Each turn is one of three kinds, drawn with a seeded generator so that every run is the same:

* a shell command (60%), whose output is 2-20 KB of log-like text (no file effect);
* a whole-file read (25%, tool ``read_file``) of one of the workspace's files, whose output is
  the file's current text (the ingestor indexes the file from it);
* an edit (15%, tool ``edit``) of one of the workspace's files: the file is changed on disk
  first, as the agent's tool would, and the output says so (the ingestor indexes the new
  version, and a watcher sees the write).

Every tenth turn starts with a user message. The files are 2-20 KB of Python-like text; several
agents may share one workspace (the N-agent figures), each with its own generator.
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["Agent", "make_workspace", "message_bytes"]

_WORDS = tuple(
    [
        "error",
        "warning",
        "passed",
        "failed",
        "collected",
        "module",
        "function",
        "return",
        "value",
        "index",
        "cache",
        "request",
        "session",
        "object",
        "version",
        "commit",
        "store",
        "query",
        "token",
        "layout",
        "render",
        "prompt",
        "file",
        "path",
        "line",
        "test",
        "assert",
        "expected",
        "actual",
        "config",
        "option",
        "default",
        "import",
        "class",
        "method",
        "self",
        "args",
        "kwargs",
        "result",
    ]
)


def _line(rng: random.Random, n: int) -> str:
    words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 12)))
    return f"{n:5d} {words} {rng.randint(0, 10**6)}"


def _text(rng: random.Random, size: int) -> str:
    lines: list[str] = []
    total = 0
    while total < size:
        line = _line(rng, len(lines) + 1)
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines) + "\n"


def _source(rng: random.Random, size: int, name: str) -> str:
    lines = [f'"""Module {name}."""', ""]
    total = 0
    n = 0
    while total < size:
        n += 1
        body = " + ".join(rng.choice(["x", "y", "1", "2", "x * y"]) for _ in range(3))
        block = f"def {name}_f{n}(x, y):\n    # {rng.choice(_WORDS)} {n}\n    return {body}\n\n"
        lines.append(block)
        total += len(block)
    return "\n".join(lines)


def make_workspace(
    root: Path, files: int, *, seed: int = 7, sizes: tuple[int, int] = (2_000, 20_000)
) -> list[Path]:
    """Create ``files`` Python files of ``sizes`` bytes (2-20 KB) under ``root/src``; their
    paths."""
    rng = random.Random(seed)
    out = []
    for i in range(files):
        path = root / "src" / f"pkg{i % 10}" / f"mod_{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_source(rng, rng.randint(*sizes), f"mod_{i}"))
        out.append(path)
    return out


def message_bytes(messages: Sequence[Any]) -> int:
    """Bytes of a message list as JSON (UTF-8)."""
    return len(json.dumps(messages, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


class Agent:
    """One agent's conversation in OpenAI form; :meth:`turn` appends one turn's messages."""

    def __init__(
        self,
        name: str,
        files: Sequence[Path],
        *,
        seed: int = 1,
        system: str = "You are a coding agent. Fix the failing tests.",
        output_kb: tuple[float, float] = (2, 20),
        edit_files: bool = True,
        reads_in_order: bool = False,
    ) -> None:
        self.name = name
        self.files = list(files)
        self.rng = random.Random(seed)
        self.output_kb = output_kb
        self.edit_files = edit_files
        self.reads_in_order = reads_in_order
        """Read each file once, in order, on every fifth turn (and edit none): a session
        with as many file objects as files."""
        self._next_read = 0
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
        self.turns = 0

    def turn(self) -> list[dict[str, Any]]:
        """One more turn; returns the messages it added (also appended to ``messages``)."""
        rng = self.rng
        self.turns += 1
        n = self.turns
        new: list[dict[str, Any]] = []
        if n % 10 == 1:
            new.append({"role": "user", "content": f"Step {n}: " + _text(rng, 150).strip()})
        call_id = f"call_{self.name}_{n}"
        kind = rng.random()
        if self.reads_in_order:
            kind = 0.0 if n % 4 == 1 and self._next_read < len(self.files) else 0.99
        if kind < 0.25 and self.files:
            if self.reads_in_order:
                path = self.files[self._next_read]
                self._next_read += 1
            else:
                path = rng.choice(self.files)
            tool, args = "read_file", {"path": str(path)}
            output = path.read_text()
        elif kind < 0.40 and self.files and self.edit_files:
            path = rng.choice(self.files)
            old, new_text = self._edit(path)
            tool = "edit"
            args = {"path": str(path), "old_string": old, "new_string": new_text}
            output = f"The file {path} has been edited."
        else:
            low, high = self.output_kb
            tool = "bash"
            args = {"command": f"python -m pytest tests/test_{rng.choice(_WORDS)}.py -q"}
            output = _text(rng, rng.randint(int(low * 1000), int(high * 1000)))
        thought = "I will " + " ".join(rng.choice(_WORDS) for _ in range(rng.randint(8, 30)))
        call = {
            "id": call_id,
            "type": "function",
            "function": {"name": tool, "arguments": json.dumps(args)},
        }
        new.append({"role": "assistant", "content": thought, "tool_calls": [call]})
        new.append({"role": "tool", "tool_call_id": call_id, "content": output})
        self.messages += new
        return new

    def _edit(self, path: Path) -> tuple[str, str]:
        """Change one line of ``path`` on disk (a unique marker is added to a comment line)."""
        text = path.read_text()
        lines = text.split("\n")
        comments = [i for i, line in enumerate(lines) if line.lstrip().startswith("# ")]
        i = self.rng.choice(comments) if comments else 0
        old = lines[i]
        tag = "".join(self.rng.choice(string.ascii_lowercase) for _ in range(8))
        new = f"{old} {self.name}-{self.turns}-{tag}"
        if text.count(old) != 1:  # not unique: append a new line instead
            old = lines[-1] if lines[-1] else lines[-2]
            new = f"{old}\n# {self.name}-{self.turns}-{tag}"
            if text.count(old) != 1:
                old, new = text, text + f"# {self.name}-{self.turns}-{tag}\n"
        path.write_text(text.replace(old, new, 1))
        return old, new
