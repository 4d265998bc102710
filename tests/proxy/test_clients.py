"""The real agents, unmodified, through ``selfctx proxy`` against the scripted model.

Each test plays one coding task: list the project, read files, run the failing test, call a
context tool once, edit, run the test again, finish. It asserts that

1. the client exits 0 and its own tools changed the repository as scripted (the test passes);
2. the model received managed requests: a collapsed output (the trigger is low) and the file
   objects of what was read;
3. no context tool reached the client: its own record of the session (its transcript files and
   output) never names one, nor holds the text the model sent with it;
4. the store holds the session (``selfctx sessions`` and ``selfctx show`` on it);
5. the API key reached the model and appears neither in the proxy's log nor in the store's view.

Versions are pinned (tests/clients/package-lock.json, the Makefile's AIDER_VERSION); ``make
clients`` installs them.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from selfctx.adapters.proxy.scripted import ScriptedModel, Seen, Step
from selfctx.adapters.xtdb import XtdbNode
from tests.proxy.support import (
    AIDER,
    NODE_BIN,
    SECRET,
    activate_collapsed,
    client,
    client_env,
    fixed,
    make_repo,
    proxy_process,
    requests_text,
    run_client,
    scripted,
    selfctx,
    sessions,
)

pytestmark = [pytest.mark.xtdb, pytest.mark.slow]

TASK = "Fix add() in calc.py so that the test passes."
CONTEXT_TEXT = "Let me see that output again."
STREAM_JSON = ("--output-format", "stream-json", "--verbose")
NO_SANDBOX = ("--dangerously-bypass-approvals-and-sandbox",)
AIDER_QUIET = (
    "--yes-always",
    "--no-check-update",
    "--no-analytics",
    "--no-show-model-warnings",
    "--no-pretty",
)
_FILES = re.compile(r"files #\d+ (\S+?)[,\]]")


def _store(node: XtdbNode) -> str:
    return "xtdb://" + node.url.removeprefix("http://")


def _check_managed(model: ScriptedModel, api: str, repo: Path) -> None:
    received = requests_text(model, api)
    assert len(received) >= 7
    assert any("collapsed:" in r for r in received), "no output was ever collapsed"
    files = {path for r in received for path in _FILES.findall(r.replace("\\n", "\n"))}
    assert str(repo / "calc.py") in files and str(repo / "test_calc.py") in files, files
    assert all("context_activate" in r for r in received)  # offered every time
    for request in model.of(api):
        assert SECRET in request.headers.get("x-api-key", "") + request.headers.get(
            "authorization", ""
        )


def _check_store(store: str, session_prefix: str, repo: Path, log: str) -> str:
    held = [s for s in sessions(store) if s["session"].startswith(session_prefix)]
    assert len(held) == 1, held
    session_id = str(held[0]["session"])
    shown = selfctx("show", session_id, "--store", store)
    assert shown.returncode == 0, shown.stderr
    assert "calc.py" in shown.stdout
    assert SECRET not in shown.stdout and SECRET not in log
    assert f"session={session_id}" in log
    return session_id


def _never_seen(texts: list[str]) -> None:
    for text in texts:
        assert "context_activate" not in text
        assert CONTEXT_TEXT not in text


def _shell_script(tool: str, key: str) -> object:
    def run(command: str, text: str = "") -> Step:
        return Step(text, ((tool, {key: command}),))

    def script(seen: Seen) -> Step:
        if tool not in seen.tool_names():
            return Step("ok")  # a side request of the client's (a title, a summary)
        steps = [
            run("ls", "Listing the project."),
            run("cat calc.py"),
            run("cat test_calc.py"),
            run("python3 test_calc.py"),
            None,
            run("sed -i 's/a - b/a + b/' calc.py"),
            run("python3 test_calc.py"),
            Step("Fixed: add() now adds."),
        ]
        step = steps[min(seen.turn, len(steps) - 1)]
        return activate_collapsed(seen) if step is None else step

    return script


def test_claude_code(clients_node: XtdbNode, tmp_path: Path) -> None:
    claude = client(NODE_BIN / "claude")
    repo = make_repo(tmp_path)
    home = tmp_path / "home"
    home.mkdir()

    def script(seen: Seen) -> Step:
        if "Bash" not in seen.tool_names():
            return Step("ok")
        steps = [
            Step("Listing the project.", (("Bash", {"command": "ls", "description": "List"}),)),
            Step(calls=(("Read", {"file_path": str(repo / "calc.py")}),)),
            Step(calls=(("Bash", {"command": "cat test_calc.py", "description": "Show"}),)),
            Step(calls=(("Bash", {"command": "python3 test_calc.py", "description": "Test"}),)),
            None,
            Step(
                calls=(
                    (
                        "Edit",
                        {
                            "file_path": str(repo / "calc.py"),
                            "old_string": "return a - b",
                            "new_string": "return a + b",
                        },
                    ),
                )
            ),
            Step(calls=(("Bash", {"command": "python3 test_calc.py", "description": "Test"}),)),
            Step("Fixed: add() now adds."),
        ]
        step = steps[min(seen.turn, len(steps) - 1)]
        return activate_collapsed(seen) if step is None else step

    store = _store(clients_node)
    with (
        scripted(script) as (model, up),
        proxy_process(up, store, repo, tmp_path / "proxy.log") as proxy,
    ):
        env = client_env(
            home,
            ANTHROPIC_BASE_URL=proxy.url,
            ANTHROPIC_API_KEY=SECRET,
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
            DISABLE_TELEMETRY="1",
        )
        out = run_client(
            [claude, "-p", TASK, "--allowedTools", "Bash,Read,Edit", *STREAM_JSON],
            repo,
            env,
        )
    assert fixed(repo)
    _check_managed(model, "anthropic", repo)
    transcripts = [p.read_text() for p in (home / ".claude").rglob("*.jsonl")]
    assert transcripts, "Claude Code kept no transcript"
    _never_seen([out, *transcripts])
    claude_session = re.search(r'"session_id":"([0-9a-f-]+)"', out)
    assert claude_session
    _check_store(store, claude_session.group(1) + ".", repo, proxy.log_text())


def test_codex_cli(clients_node: XtdbNode, tmp_path: Path) -> None:
    codex = client(NODE_BIN / "codex")
    repo = make_repo(tmp_path)
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    store = _store(clients_node)
    script = _shell_script("exec_command", "cmd")
    with (
        scripted(script) as (model, up),
        proxy_process(up, store, repo, tmp_path / "proxy.log") as proxy,
    ):
        (home / ".codex" / "config.toml").write_text(
            'model = "scripted-model"\nmodel_provider = "selfctx"\n\n'
            "[model_providers.selfctx]\n"
            'name = "selfctx"\n'
            f'base_url = "{proxy.url}/v1"\n'
            'env_key = "SCRIPTED_API_KEY"\n'
            'wire_api = "responses"\n'
        )
        env = client_env(home, SCRIPTED_API_KEY=SECRET, CODEX_HOME=str(home / ".codex"))
        out = run_client(
            # no sandbox: bubblewrap is not installed here, and the temp repo is the test's own
            [codex, "exec", "--json", "--skip-git-repo-check", *NO_SANDBOX, TASK],
            repo,
            env,
        )
    assert fixed(repo)
    _check_managed(model, "responses", repo)
    rollouts = [p.read_text() for p in (home / ".codex" / "sessions").rglob("*.jsonl")]
    assert rollouts, "Codex kept no rollout"
    _never_seen([out, *rollouts])
    thread = re.search(r'"thread_id":"([0-9a-f-]+)"', out)
    assert thread
    _check_store(store, thread.group(1) + ".", repo, proxy.log_text())


def test_aider(clients_node: XtdbNode, tmp_path: Path) -> None:
    """aider sends no tools and runs none: it pastes the files it was given into the
    conversation and applies edit blocks from the model's text, and runs the tests itself. So its
    requests have no tool outputs to collapse and no reads to index; what is checked is that its
    conversation goes through the proxy, managed, and that the context tool the model calls is
    answered by the proxy, never seen by aider."""
    aider = client(AIDER)
    repo = make_repo(tmp_path)
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]
    for argv in (["git", "init", "-q"], [*git, "add", "."], [*git, "commit", "-qm", "start"]):
        subprocess.run(argv, cwd=repo, check=True, capture_output=True)
    home = tmp_path / "home"
    home.mkdir()
    edit = (
        "calc.py\n```python\n<<<<<<< SEARCH\n    return a - b\n=======\n"
        "    return a + b\n>>>>>>> REPLACE\n```\n"
    )

    def script(seen: Seen) -> Step:
        if "commit message" in seen.text:
            return Step("Fix add()")  # aider's own request for a commit message
        called = [
            call["function"]["name"]
            for message in seen.body.get("messages") or ()
            for call in message.get("tool_calls") or ()
        ]
        if "context_pin" not in called:
            return Step(CONTEXT_TEXT, (("context_pin", {"id": "#1"}),))
        return Step("Fixing add().\n\n" + edit)

    store = _store(clients_node)
    with (
        scripted(script) as (model, up),
        proxy_process(up, store, repo, tmp_path / "proxy.log") as proxy,
    ):
        env = client_env(
            home,
            OPENAI_API_KEY=SECRET,
            OPENAI_API_BASE=proxy.url + "/v1",
            LITELLM_LOCAL_MODEL_COST_MAP="True",  # no download of litellm's price list
        )
        out = run_client(
            [
                aider,
                "--model",
                "openai/scripted-model",
                "--edit-format",
                "diff",
                *AIDER_QUIET,
                "--test-cmd",
                f"{sys.executable} test_calc.py",
                "--auto-test",
                "--message",
                TASK,
                "calc.py",
                "test_calc.py",
            ],
            repo,
            env,
        )
    assert fixed(repo)
    assert "tests passed" in out  # aider ran the test command itself
    received = requests_text(model, "openai")
    task_requests = [r for r in received if "commit message" not in r]
    assert len(task_requests) == 2  # the proxy's round after the context call
    assert all("context_pin" in r for r in received)
    assert "Context handles:" in task_requests[0]  # the inline policy's guide: managed
    assert "tool call #1" in task_requests[1] or "no object" in task_requests[1]
    history = (repo / ".aider.chat.history.md").read_text()
    _never_seen([out, history])
    held = [s["session"] for s in sessions(store) if s["session"].startswith("openai.")]
    log = proxy.log_text()
    assert any(f"session={s}" in log for s in held)
    assert SECRET not in log
