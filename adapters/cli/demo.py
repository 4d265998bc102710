"""``selfctx demo``: a scripted, realistic session on a copy of a small sample project.

The "agent" is a script, but everything it does is real: shell commands run in a temporary copy
of the sample tree, files are read from and written to disk, and every step goes through the
``ContextService`` a real harness would embed. After each turn the assembled context is printed.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from selfctx.adapters.bootstrap import build_service, open_store
from selfctx.adapters.cli.stores import STORE_HELP
from selfctx.adapters.config import setting
from selfctx.adapters.filesystem.identity import host_filesystem_id
from selfctx.application.service import ContextService
from selfctx.domain.chat import ToolCallRequest
from selfctx.domain.mounts import MountMapping

SAMPLE = Path(__file__).with_name("sample")
AGENT_ROOT = "/workspace"
"""Where the (pretend-sandboxed) agent sees the project: a mount mapping translates it."""
SESSION = "demo"
SYSTEM_PROMPT = (
    "You are a careful coding agent. Objects you have seen are listed by id; only active objects "
    "show their content. Use activate, deactivate, pin and unpin to manage your context."
)


class ScriptedAgent:
    """Plays the model's part: each step is a tool call whose result is real."""

    def __init__(self, service: ContextService, workspace: Path) -> None:
        self.service = service
        self.workspace = workspace
        self.calls = 0

    def say(self, text: str) -> None:
        self.service.record_assistant_message(SESSION, text)

    def _call(self, text: str, tool: str, args: dict[str, Any], run: Callable[[], str]) -> str:
        self.calls += 1
        call_id = f"call_{self.calls:03d}"
        self.service.record_assistant_message(SESSION, text, [ToolCallRequest(call_id, tool, args)])
        output = run()
        self.service.record_tool_call(SESSION, call_id, tool=tool, args=args, output=output)
        return call_id

    def bash(self, text: str, command: str, discover: bool = False) -> str:
        def run() -> str:
            done = subprocess.run(
                command, shell=True, cwd=self.workspace, capture_output=True, text=True, timeout=60
            )
            return f"exit code {done.returncode}\n{done.stdout}{done.stderr}"

        call_id = self._call(text, "bash", {"command": command}, run)
        if discover:  # paths printed by find/grep -l become discovery stubs
            output = self.service.object(SESSION, call_id).content or ""
            paths = [line.split(":", 1)[0] for line in output.splitlines()[1:] if line.strip()]
            found = [f"{AGENT_ROOT}/{p.removeprefix('./')}" for p in paths]
            self.service.discover(SESSION, found, strict=False)
        return call_id

    def read(self, text: str, relative: str) -> str:
        def run() -> str:
            result = self.service.index_file(SESSION, f"{AGENT_ROOT}/{relative}")
            return f"{relative}: object {result.object_id[:12]}... ({result.outcome}), now active"

        return self._call(text, "read", {"path": relative}, run)

    def write(self, text: str, relative: str, old: str, new: str) -> str:
        path = self.workspace / relative

        def run() -> str:
            source = path.read_text(encoding="utf-8")
            path.write_text(source.replace(old, new, 1), encoding="utf-8")
            result = self.service.index_file(SESSION, f"{AGENT_ROOT}/{relative}")
            return f"edited {relative} ({result.outcome})"

        return self._call(text, "edit", {"path": relative, "old": old, "new": new}, run)

    def context_tool(self, text: str, tool: str, object_id: str) -> str:
        def run() -> str:
            action = getattr(self.service, tool)
            return str(action(SESSION, object_id).message)

        return self._call(text, tool, {"id": object_id}, run)

    def file_id(self, relative: str) -> str:
        path = str((self.workspace / relative).resolve())
        for object_id in self.service.state(SESSION).index:
            source = getattr(self.service.object(SESSION, object_id), "source", None)
            if source is not None and source.path == path:
                return object_id
        raise LookupError(relative)


def show(service: ContextService, turn: int, out: Any) -> None:
    context = service.assemble(SESSION)
    state = service.state(SESSION)
    metadata_only = len(state.pool) - len(state.active)
    text = context.to_text()
    print(
        f"\n{'=' * 20} after turn {turn}: {len(text)} characters; objects: "
        f"{len(state.active)} active, {metadata_only} metadata only, {len(state.pinned)} pinned "
        f"{'=' * 20}\n",
        file=out,
    )
    print(text, file=out)


def run_demo(service: ContextService, workspace: Path, out: Any = sys.stdout) -> None:
    """The scripted session (four turns) against ``service``; prints the context per turn."""
    agent = ScriptedAgent(service, workspace)
    service.start_session(SESSION, SYSTEM_PROMPT)

    service.record_user_message(
        SESSION, "evaluate('2 - 3 - 4') returns 3 instead of -5. Find the bug and fix it."
    )
    agent.bash("Let me see the project layout.", "find . -name '*.py' -o -name '*.md' | sort", True)
    agent.read("The README first.", "README.md")
    agent.read("Subtraction is parsed in the parser.", "calc/parser.py")
    tests = agent.bash("Run the tests to see the failure.", "python3 -m unittest discover -s tests")
    agent.say("test_left_associative fails: equal-precedence operators group to the right.")
    show(service, 1, out)

    service.record_user_message(SESSION, "Go ahead and fix it. Keep the failing output around.")
    agent.context_tool("Pinning the failing test output.", "pin", tests)
    agent.context_tool("The README is no longer needed.", "deactivate", agent.file_id("README.md"))
    agent.context_tool(
        "Checking how the tree is walked.", "activate", agent.file_id("calc/evaluate.py")
    )
    agent.write(
        "Bind equal precedence to the left.",
        "calc/parser.py",
        "self.expression(PRECEDENCE[op])",
        "self.expression(PRECEDENCE[op] + 1)",
    )
    agent.bash("Run the tests again.", "python3 -m unittest discover -s tests")
    agent.say("All four tests pass now.")
    show(service, 2, out)

    service.record_user_message(SESSION, "Thanks. Is min_precedence used anywhere else?")
    agent.bash("Searching.", "grep -rn min_precedence calc", True)
    agent.context_tool("Done with the failing output.", "unpin", tests)
    agent.say("Only in calc/parser.py, where the fix is.")
    show(service, 3, out)

    service.record_user_message(SESSION, "Great, please summarise the change.")
    agent.context_tool(
        "The evaluator is no longer needed.", "deactivate", agent.file_id("calc/evaluate.py")
    )
    agent.say("parser.py now recurses with PRECEDENCE[op] + 1, so '-' and '/' associate left.")
    show(service, 4, out)


def _run(args: argparse.Namespace) -> int:
    args.store = setting("store", args.store)
    with tempfile.TemporaryDirectory(prefix="selfctx-demo-") as tmp:
        workspace = Path(tmp) / "calc"
        shutil.copytree(SAMPLE, workspace)
        service = build_service(
            store=open_store(args.store),
            workspace=str(workspace),
            mounts=[MountMapping(AGENT_ROOT, str(workspace.resolve()), host_filesystem_id())],
        )
        run_demo(service, workspace)
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo", help="run a scripted agent session on a sample project and print its context"
    )
    parser.add_argument("--store", default=None, help=STORE_HELP)
    parser.set_defaults(handler=_run)
