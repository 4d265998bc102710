"""The real clients playing the long task of tests/proxy/tasks.py against a base URL: the
scripted model itself (a recording of what the client sends, tests/proxy/record.py) or
``selfctx proxy`` in front of it (the client matrix, tests/proxy/test_matrix.py).

Each ``Client`` knows its API, the script of the task in its tool names, and how to run itself
in a repository with a HOME of its own.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from selfctx.adapters.proxy.scripted import Seen, Step
from tests.proxy.support import (
    AIDER,
    NODE_BIN,
    ROOT,
    SECRET,
    client,
    client_env,
    run_client,
)
from tests.proxy.tasks import aider_input, make_task_repo, tool_script

__all__ = ["CLIENTS", "Client", "aider_script"]

TASK = "Fix add() in calc.py so that the test passes."
PI_DIR = ROOT / "adapters" / "pi"
PI = PI_DIR / "node_modules" / ".bin" / "pi"
PI_QUIET = (
    "--mode",
    "json",
    "--no-skills",
    "--no-context-files",
    "--no-prompt-templates",
    "--no-extensions",
)
AIDER_QUIET = (
    "--yes-always",
    "--no-check-update",
    "--no-analytics",
    "--no-show-model-warnings",
    "--no-pretty",
    "--no-fancy-input",
    "--no-auto-commits",
    "--stream",
)
NOTES_EDIT = "notes.md\n```\n<<<<<<< SEARCH\n{old}=======\n{new}>>>>>>> REPLACE\n```\n"
FIX_EDIT = (
    "calc.py\n```python\n<<<<<<< SEARCH\n    return a - b\n=======\n"
    "    return a + b\n>>>>>>> REPLACE\n```\n"
)


def aider_script(tag: str = "") -> Callable[[Seen], Step]:
    """aider's side of the task: each question about a log part is answered with a note added to
    notes.md (an edit, so the files aider pastes into every request change), the fix request with
    the fix. ``tag`` goes into every answer, to tell two runs apart."""

    def script(seen: Seen) -> Step:
        messages = seen.body.get("messages") or ()
        last = json.dumps(messages[-1]["content"]) if messages else ""
        if "SEARCH/REPLACE" not in seen.text or (
            "What stands out in part" not in seen.text and TASK not in seen.text
        ):
            return Step(f"ok{tag}")  # a summary or another request of aider's own
        if TASK in last:
            return Step(f"Fixing add(){tag}.\n\n" + FIX_EDIT)
        part = last.split("What stands out in part ", 1)[-1].split("?", 1)[0]
        notes = _notes_text(seen.text)
        old = notes.rsplit("\n", 2)[-2] + "\n" if notes.count("\n") >= 1 else notes
        new = old + f"- part {part}: nothing unusual{tag}\n"
        return Step(f"Noted part {part}{tag}.\n\n" + NOTES_EDIT.format(old=old, new=new))

    return script


def _notes_text(request_text: str) -> str:
    """notes.md as aider last pasted it into the request (decoded from the request's JSON)."""
    decoded = json.loads(request_text)
    text = ""
    for message in decoded.get("messages") or ():
        content = message.get("content")
        if isinstance(content, str) and "notes.md\n```" in content:
            text = content.split("notes.md\n```", 1)[1].split("```", 1)[0].lstrip("\n")
    return text or "# Notes\n"


@attrs.frozen
class Client:
    name: str
    api: str
    run: Callable[[str, Path, Path, int], str]
    """(base URL, repo, home, steps) -> the client's stdout; fails the test if it fails."""
    script: Callable[[int], Callable[[Seen], Step]]
    git: bool = False

    def repo(self, root: Path, steps: int, marker: str = "") -> Path:
        repo = make_task_repo(root, steps, git=self.git, marker=marker)
        if self.git:
            (repo / "notes.md").write_text("# Notes\n")
        return repo


def _claude(base: str, repo: Path, home: Path, _steps: int) -> str:
    env = client_env(
        home,
        ANTHROPIC_BASE_URL=base,
        ANTHROPIC_API_KEY=SECRET,
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        DISABLE_TELEMETRY="1",
    )
    argv = [client(NODE_BIN / "claude"), "-p", TASK, "--allowedTools", "Bash,Read,Edit"]
    argv += ["--output-format", "stream-json", "--verbose"]
    return run_client(argv, repo, env)


def _codex(base: str, repo: Path, home: Path, _steps: int) -> str:
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    (home / ".codex" / "config.toml").write_text(
        'model = "scripted-model"\nmodel_provider = "selfctx"\n\n'
        "[model_providers.selfctx]\n"
        'name = "selfctx"\n'
        f'base_url = "{base}/v1"\n'
        'env_key = "SCRIPTED_API_KEY"\n'
        'wire_api = "responses"\n'
    )
    env = client_env(home, SCRIPTED_API_KEY=SECRET, CODEX_HOME=str(home / ".codex"))
    # no sandbox: bubblewrap is not installed here, and the temporary repo is the test's own
    argv = [client(NODE_BIN / "codex"), "exec", "--json", "--skip-git-repo-check"]
    argv += ["--dangerously-bypass-approvals-and-sandbox", TASK]
    return run_client(argv, repo, env)


def pi_models(base: str) -> str:
    return json.dumps(
        {
            "providers": {
                "scripted": {
                    "baseUrl": base + "/v1",
                    "api": "openai-completions",
                    "apiKey": SECRET,
                    "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
                    "models": [{"id": "scripted-model"}],
                }
            }
        }
    )


def run_pi(
    base: str, repo: Path, home: Path, extension_env: Mapping[str, str] | None = None
) -> str:
    """Pi in print mode against ``base``; with ``extension_env``, with the selfctx extension."""
    agent_dir = home / ".pi" / "agent"
    agent_dir.mkdir(parents=True, exist_ok=True)
    (agent_dir / "models.json").write_text(pi_models(base))
    env = client_env(home, PI_OFFLINE="1", **(extension_env or {}))
    argv = [client(PI), "-p", "--provider", "scripted", "--model", "scripted-model", *PI_QUIET]
    if extension_env is not None:
        argv += ["-e", str(PI_DIR / "selfctx.ts")]
    return run_client([*argv, TASK], repo, env)


def _pi(base: str, repo: Path, home: Path, _steps: int) -> str:
    return run_pi(base, repo, home)


def _aider(base: str, repo: Path, home: Path, steps: int) -> str:
    env = client_env(
        home,
        OPENAI_API_KEY=SECRET,
        OPENAI_API_BASE=base + "/v1",
        LITELLM_LOCAL_MODEL_COST_MAP="True",  # no download of litellm's price list
    )
    argv = [client(AIDER), "--model", "openai/scripted-model", "--edit-format", "diff"]
    argv += [*AIDER_QUIET, "calc.py", "test_calc.py", "notes.md"]
    done = subprocess.run(
        argv,
        cwd=repo,
        env=env,
        input=aider_input(steps),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def _shell(
    tool: str, key: str, prefix: str = "context_", **extra: Any
) -> Callable[[int], Callable[[Seen], Step]]:
    return lambda steps: tool_script(
        steps, tool, lambda command: {key: command, **extra}, prefix=prefix
    )


def pi_extension_script(steps: int) -> Callable[[Seen], Step]:
    """Pi's task with the extension, whose context tools have no prefix."""
    return _shell("bash", "command", prefix="")(steps)


CLIENTS: Mapping[str, Client] = {
    "claude-code": Client(
        "claude-code", "anthropic", _claude, _shell("Bash", "command", description="Run")
    ),
    "codex": Client("codex", "responses", _codex, _shell("exec_command", "cmd")),
    "pi": Client("pi", "openai", _pi, _shell("bash", "command")),
    "aider": Client("aider", "openai", _aider, lambda _steps: aider_script(), git=True),
}
