"""The example session the project ships (``sample_session.json``), and how it was made.

A short agent session over the sample project (``sample/``: a calculator whose parser groups
``2 - 3 - 4`` to the right). The model's side is scripted; everything else is real: the shell
commands run in a copy of the sample tree, the editor edits its files, and the context tools are
answered by a live :class:`HarnessSession`, exactly as a harness would. Outputs are recorded the
way mini-swe-agent (``<returncode>``/``<output>``) and the SWE-agent/OpenHands editor (``cat -n``
views) present them, with the copy's location shown as ``/workspace``.

Regenerate with ``python -m selfctx.adapters.cli.sample_session`` (the test suite only replays the
shipped file; outputs such as test timings differ from run to run).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.harness.session import HarnessSession
from selfctx.adapters.harness.trajectories import OWN_FORMAT
from selfctx.adapters.memory import MemoryStore
from selfctx.application.policies import policy_by_name

SAMPLE = Path(__file__).with_name("sample")
OUTPUT = Path(__file__).with_name("sample_session.json")
ROOT = "/workspace"
"""Where the agent sees the project."""
SESSION = "replay-sample_session"
"""The session ``selfctx replay`` opens for the file by default (``session_id_for``)."""
FILESYSTEM = "selfctx-sample"
"""The agent's filesystem, fixed so that file ids in the session are stable."""
SYSTEM_PROMPT = (
    "You are a careful coding agent working on the project in /workspace. Run shell commands "
    "with the bash tool and view or edit files with str_replace_editor. Your context is managed: "
    "every file and tool output you have seen is listed by id on one line, and only active "
    "objects show their full content. Old tool outputs collapse to their line; use activate, "
    "deactivate, pin and unpin with an object's id to choose what you see."
)


class Recorder:
    """Builds the message list while running each tool for real."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT}]
        self.calls = 0
        service = build_service(
            store=MemoryStore(), workspace=str(workdir), default_filesystem_id=FILESYSTEM
        )
        # Recorded with the SSOT's layout: the context tools' answers in the file are its answers
        # (a replay under another policy hands the session's own answers over instead).
        # The session a plain replay of the file opens: a tool call's object id depends on its
        # session (decision 0030), and the answers in the file name those ids.
        self.session = HarnessSession(
            service, SESSION, cwd=ROOT, roots=[ROOT], policy=policy_by_name("ssot")
        )

    def file_id(self, path: str) -> str:
        return self.session.service.object_id_for(f"{ROOT}/{path}")

    def user(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})

    def say(self, text: str) -> None:
        self.messages.append({"role": "assistant", "content": text})

    def act(self, text: str, *calls: tuple[str, dict[str, Any]]) -> list[str]:
        """One model message with one or more tool calls, then each call's result. Returns the
        calls' ids: the harness's ids, which name the calls in any session replaying the file."""
        ids = []
        requests = []
        for name, arguments in calls:
            self.calls += 1
            ids.append(f"call_{self.calls:03d}")
            requests.append(
                {
                    "id": ids[-1],
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
            )
        self.messages.append({"role": "assistant", "content": text, "tool_calls": requests})
        for call_id, (name, arguments) in zip(ids, calls, strict=True):
            self.session.ingest(self.messages)
            output = self._run(name, arguments)
            self.messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
        self.session.ingest(self.messages)
        return ids

    def _run(self, name: str, arguments: dict[str, Any]) -> str:
        tools: dict[str, Callable[[dict[str, Any]], str]] = {
            "bash": self._bash,
            "str_replace_editor": self._editor,
        }
        if name in tools:
            return tools[name](arguments)
        return self.session.handle(name, arguments).message

    def _bash(self, arguments: dict[str, Any]) -> str:
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "LC_ALL": "C"}
        done = subprocess.run(
            arguments["command"],
            shell=True,
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        out = (done.stdout + done.stderr).replace(str(self.workdir), ROOT)
        return f"<returncode>{done.returncode}</returncode>\n<output>\n{out}</output>"

    def _editor(self, arguments: dict[str, Any]) -> str:
        path = arguments["path"]
        local = self.workdir / path.removeprefix(ROOT + "/")
        text = local.read_text(encoding="utf-8")
        if arguments["command"] == "view":
            return f"Here's the result of running `cat -n` on {path}:\n{_numbered(text)}\n"
        old, new = arguments["old_str"], arguments["new_str"]
        if text.count(old) != 1:
            return f"No replacement was performed: old_str occurs {text.count(old)} times."
        edited = text.replace(old, new)
        local.write_text(edited, encoding="utf-8")
        first = text[: text.index(old)].count("\n")
        lines = edited.split("\n")
        start = max(first - 3, 0)
        end = min(first + new.count("\n") + 4, len(lines))
        snippet = _numbered("\n".join(lines[start:end]), start + 1)
        return (
            f"The file {path} has been edited. Here's the result of running `cat -n` on a snippet "
            f"of {path}:\n{snippet}\nReview the changes and make sure they are as expected. Edit "
            "the file again if necessary."
        )


def _numbered(text: str, start: int = 1) -> str:
    return "\n".join(f"{n:6}\t{line}" for n, line in enumerate(text.split("\n"), start))


def _tests() -> tuple[str, dict[str, Any]]:
    return ("bash", {"command": "python3 -m unittest discover -s tests"})


def record(workdir: Path) -> dict[str, Any]:
    """Run the scripted session in ``workdir`` (a copy of the sample tree)."""
    r = Recorder(workdir)
    r.user(
        "In the calc project in /workspace, evaluate('2 - 3 - 4') returns 3 instead of -5. "
        "Find the bug, fix it and run the tests."
    )
    r.act(
        "Let me look at the layout of the project first.",
        ("bash", {"command": "find . -type f | sort"}),
    )
    r.act(
        "The README should say how the pieces fit together.", ("bash", {"command": "cat README.md"})
    )
    (failing,) = r.act("Let me run the tests to see the failure.", _tests())
    r.act(
        "Operators are grouped by the parser; let me read it.",
        ("str_replace_editor", {"command": "view", "path": f"{ROOT}/calc/parser.py"}),
    )
    r.act(
        "And the evaluator, to be sure it applies each operator to its left and right operand.",
        ("bash", {"command": "cat calc/evaluate.py"}),
    )
    r.act(
        "`expression` parses the right operand with `self.expression(PRECEDENCE[op])`, so an "
        "operator of the same precedence binds to the right: 2 - 3 - 4 becomes 2 - (3 - 4) = 3. "
        "The right operand may only take operators of strictly higher precedence. I'll pin the "
        "failing test output to compare against after the fix.",
        ("pin", {"id": failing}),
    )
    r.act(
        "Fixing it.",
        (
            "str_replace_editor",
            {
                "command": "str_replace",
                "path": f"{ROOT}/calc/parser.py",
                "old_str": "right = self.expression(PRECEDENCE[op])",
                "new_str": "right = self.expression(PRECEDENCE[op] + 1)",
            },
        ),
    )
    r.act("Running the tests again.", _tests())
    r.act(
        "All four tests pass now, test_left_associative included. The pinned failure has done "
        "its job.",
        ("unpin", {"id": failing}),
    )
    r.say(
        "Fixed: calc/parser.py now parses the right operand of a binary operator with "
        "`PRECEDENCE[op] + 1`, so operators of equal precedence associate to the left. "
        "2 - 3 - 4 is -5 and 64 / 8 / 2 is 4; all four tests pass."
    )

    r.user(
        "Is min_precedence used anywhere else? I want to be sure nothing relies on the old "
        "grouping."
    )
    r.act("Searching the whole project.", ("bash", {"command": "grep -rn min_precedence ."}))
    r.act(
        "I no longer need the README or the evaluator in view.",
        ("deactivate", {"id": r.file_id("README.md")}),
        ("deactivate", {"id": r.file_id("calc/evaluate.py")}),
    )
    r.say(
        "min_precedence appears only in Parser.expression in calc/parser.py: it is the parameter "
        "and the comparison that ends the loop. Nothing else depends on the old grouping."
    )

    r.user("Please add a regression test that mixes precedence levels, like 10 - 2 * 3 - 1.")
    r.act(
        "Let me view the test file.",
        ("str_replace_editor", {"command": "view", "path": f"{ROOT}/tests/test_calc.py"}),
    )
    r.act(
        "Adding test_mixed_precedence after test_left_associative.",
        (
            "str_replace_editor",
            {
                "command": "str_replace",
                "path": f"{ROOT}/tests/test_calc.py",
                "old_str": '        self.assertEqual(evaluate("64 / 8 / 2"), 4)\n',
                "new_str": '        self.assertEqual(evaluate("64 / 8 / 2"), 4)\n\n'
                "    def test_mixed_precedence(self):\n"
                '        self.assertEqual(evaluate("10 - 2 * 3 - 1"), 3)\n'
                '        self.assertEqual(evaluate("2 * 3 - 4 / 2 - 1"), 3)\n',
            },
        ),
    )
    r.act("Running the tests.", _tests())
    r.say("Added test_mixed_precedence to tests/test_calc.py; all five tests pass.")

    r.user("Great. Summarise the change for the commit message.")
    r.act(
        "Let me look at the original failure again to describe it exactly.",
        ("activate", {"id": failing}),
    )
    r.say(
        "calc: make binary operators left-associative\n\n"
        "Parser.expression parsed the right operand with the operator's own precedence, so "
        "operators of equal precedence grouped to the right: 2 - 3 - 4 evaluated to 3 and "
        "64 / 8 / 2 to 16 (test_left_associative failed). The right operand now takes only "
        "operators of higher precedence (PRECEDENCE[op] + 1). Adds test_mixed_precedence."
    )
    return {
        "format": OWN_FORMAT,
        "description": "selfctx example session: fixing left associativity in the sample calc "
        "project (adapters/cli/sample), generated by adapters/cli/sample_session.py",
        "workspace": ROOT,
        "cwd": ROOT,
        "filesystem_id": FILESYSTEM,
        "messages": r.messages,
    }


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="selfctx-sample-") as tmp:
        workdir = Path(tmp) / "workspace"
        shutil.copytree(SAMPLE, workdir, ignore=shutil.ignore_patterns("__pycache__"))
        data = record(workdir)
    OUTPUT.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {OUTPUT} ({len(data['messages'])} messages)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
