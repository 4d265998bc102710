"""The Pi coding agent (from npm, in its non-interactive mode) with the extension of
adapters/pi against the scripted model: the same task and the same checks as the real clients
of test_clients.py. Pi talks to the model itself; the extension feeds every turn through
``selfctx serve --stdio`` and registers the context tools, which Pi runs (their answers come from
the context manager)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from selfctx.adapters.proxy.scripted import Seen, Step
from selfctx.adapters.xtdb import XtdbNode
from selfctx.adapters.xtdb.secret import keys_dir
from tests.proxy.support import (
    ROOT,
    SECRET,
    activate_collapsed,
    client,
    client_env,
    fixed,
    make_repo,
    requests_text,
    run_client,
    scripted,
    selfctx,
    sessions,
)
from tests.proxy.test_clients import _FILES, _store

pytestmark = [pytest.mark.xtdb, pytest.mark.slow]

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


def test_the_extension_type_checks() -> None:
    tsc = client(PI_DIR / "node_modules" / ".bin" / "tsc")
    done = subprocess.run(
        [tsc, "--noEmit", "-p", str(PI_DIR)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_pi_with_the_extension(clients_node: XtdbNode, tmp_path: Path) -> None:
    pi = client(PI)
    repo = make_repo(tmp_path)
    home = tmp_path / "home"
    agent_dir = home / ".pi" / "agent"
    agent_dir.mkdir(parents=True)

    def bash(command: str, text: str = "") -> Step:
        return Step(text, (("bash", {"command": command}),))

    def script(seen: Seen) -> Step:
        if "bash" not in seen.tool_names():
            return Step("ok")
        steps = [
            bash("ls", "Listing the project."),
            Step(calls=(("read", {"path": "calc.py"}),)),
            bash("cat test_calc.py"),
            bash("python3 test_calc.py"),
            None,
            Step(
                calls=(
                    (
                        "edit",
                        {
                            "path": "calc.py",
                            "edits": [{"oldText": "return a - b", "newText": "return a + b"}],
                        },
                    ),
                )
            ),
            bash("python3 test_calc.py"),
            Step("Fixed: add() now adds."),
        ]
        step = steps[min(seen.turn, len(steps) - 1)]
        return activate_collapsed(seen, prefix="") if step is None else step

    store = _store(clients_node)
    with scripted(script) as (model, up):
        (agent_dir / "models.json").write_text(
            json.dumps(
                {
                    "providers": {
                        "scripted": {
                            "baseUrl": up + "/v1",
                            "api": "openai-completions",
                            "apiKey": SECRET,
                            "compat": {
                                "supportsDeveloperRole": False,
                                "supportsReasoningEffort": False,
                            },
                            "models": [{"id": "scripted-model"}],
                        }
                    }
                }
            )
        )
        env = client_env(
            home,
            PI_OFFLINE="1",
            SELFCTX_COMMAND=str(Path(sys.executable).parent / "selfctx"),
            SELFCTX_STORE=store,
            # the server Pi's extension spawns has Pi's environment, whose HOME is the test's:
            # it finds the node's secret where the node's launcher wrote it
            SELFCTX_XTDB_KEYS=str(keys_dir()),
            SELFCTX_POLICY="inline",
            SELFCTX_POLICY_OPTIONS=json.dumps(
                {"trigger_tokens": 200, "clear_at_least": 1, "keep_recent": 1}
            ),
        )
        out = run_client(
            [
                pi,
                "-p",
                "--provider",
                "scripted",
                "--model",
                "scripted-model",
                *PI_QUIET,
                "-e",
                str(PI_DIR / "selfctx.ts"),
                "Fix add() in calc.py so that the test passes.",
            ],
            repo,
            env,
        )
    assert fixed(repo)
    received = requests_text(model, "openai")
    assert len(received) >= 8, out[-3000:]
    assert any("collapsed:" in r for r in received), out[-3000:]
    files = {path for r in received for path in _FILES.findall(r.replace("\\n", "\n"))}
    assert str(repo / "calc.py") in files and str(repo / "test_calc.py") in files, files
    assert all('"name": "activate"' in r for r in received)  # the extension's tools
    # the context tool ran in Pi, answered by the context manager (an output brought back)
    answer = received[5]
    assert "Traceback" in answer or "README.md" in answer
    held = [s["session"] for s in sessions(store) if s["session"].startswith("pi-")]
    assert len(held) == 1
    shown = selfctx("show", held[0], "--store", store)
    assert shown.returncode == 0 and "calc.py" in shown.stdout
