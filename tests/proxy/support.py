"""What the proxy's tests share: the scripted model on a thread, ``selfctx proxy`` as a process,
the real clients' paths, and the small repository every client works on.

The clients are installed by ``make clients`` (tests/clients for the npm ones, .clients/aider for
aider); a test that finds one missing fails and says so rather than skipping.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import attrs
import pytest

from selfctx.adapters.proxy.scripted import ScriptedModel, Seen, Step
from selfctx.adapters.proxy.serving import serve_in_thread

ROOT = Path(__file__).resolve().parents[2]
NODE_BIN = ROOT / "tests" / "clients" / "node_modules" / ".bin"
AIDER = ROOT / ".clients" / "aider" / "bin" / "aider"
SECRET = "sk-test-secret-3f9a1c7e5b2d"
"""The API key the clients send: it must reach the upstream and appear nowhere else."""

CALC = "def add(a, b):\n    return a - b\n"
TEST = "from calc import add\n\nassert add(2, 3) == 5, add(2, 3)\nprint('tests passed')\n"


def client(path: Path) -> str:
    """A client's executable, or a failure that says how to install it."""
    if not path.exists():
        pytest.fail(f"{path} is not installed: run `make clients` (it installs the real agents)")
    return str(path)


def make_repo(root: Path) -> Path:
    """The project every scripted task works on: add() subtracts, and its test says so."""
    repo = root / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "calc.py").write_text(CALC)
    (repo / "test_calc.py").write_text(TEST)
    (repo / "README.md").write_text("# calc\n\nA calculator with one bug.\n")
    (repo / "docs" / "notes.txt").write_text("Nothing to see here.\n" * 40)
    return repo


def fixed(repo: Path) -> bool:
    """The task is done: add() adds and the test passes when run here."""
    run = subprocess.run(
        [sys.executable, "test_calc.py"], cwd=repo, capture_output=True, text=True, timeout=60
    )
    return "a + b" in (repo / "calc.py").read_text() and run.returncode == 0


_COLLAPSED = re.compile(r"\[(#\d+) collapsed:")


def activate_collapsed(seen: Seen, prefix: str = "context_") -> Step:
    """The step that calls a context tool: bring back the first collapsed output it was shown."""
    handles = _COLLAPSED.findall(seen.text)
    return Step(
        "Let me see that output again.",
        ((f"{prefix}activate", {"id": handles[0] if handles else "#1"}),),
    )


@attrs.frozen
class ProxyRun:
    """A running ``selfctx proxy``."""

    url: str
    log: Path
    store: str

    def log_text(self) -> str:
        return self.log.read_text()


@contextlib.contextmanager
def scripted(script: Any) -> Iterator[tuple[ScriptedModel, str]]:
    """The scripted model, served on 127.0.0.1; yields it and its base URL."""
    model = ScriptedModel(script)
    with serve_in_thread(model.app) as url:
        yield model, url


LOW_TRIGGER = (
    "--policy",
    "inline",
    "--policy-option",
    "trigger_tokens=200",
    "--policy-option",
    "clear_at_least=1",
    "--policy-option",
    "keep_recent=1",
)


@contextlib.contextmanager
def proxy_process(
    upstream: str,
    store: str,
    workspace: Path,
    log: Path,
    *extra: str,
    policy: Sequence[str] = LOW_TRIGGER,
) -> Iterator[ProxyRun]:
    """``selfctx proxy`` as the user runs it, on a free port; by default with a low collapse
    trigger so that a short task crosses it (``policy=()``: the default policy). Stopped with
    SIGINT (a clean shutdown) at the end."""
    argv = [
        sys.executable,
        "-m",
        "selfctx.adapters.cli.main",
        "proxy",
        "--port",
        "0",
        "--store",
        store,
        "--workspace",
        str(workspace),
        "--upstream-anthropic",
        upstream,
        "--upstream-openai",
        upstream + "/v1",
        *policy,
        *extra,
    ]
    with log.open("w") as errors:
        process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=errors, text=True, cwd=workspace
        )
        try:
            first = _readline(process.stdout, 60)
            match = re.search(r"listening on (http://\S+)", first)
            if not match:
                raise AssertionError(f"selfctx proxy did not start: {first!r}\n{log.read_text()}")
            yield ProxyRun(match.group(1), log, store)
        finally:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _readline(stream: IO[str] | None, timeout: float) -> str:
    assert stream is not None
    import selectors

    selector = selectors.DefaultSelector()
    selector.register(stream, selectors.EVENT_READ)
    if not selector.select(timeout):
        return ""
    return stream.readline()


def run_client(argv: Sequence[str], repo: Path, env: Mapping[str, str]) -> str:
    """A real client run to its end in ``repo``, no terminal, at most five minutes; its stdout.
    The test fails with the end of its output if it does not exit 0."""
    done = subprocess.run(
        list(argv),
        cwd=repo,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def selfctx(*argv: str) -> subprocess.CompletedProcess[str]:
    """A ``selfctx`` command, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "selfctx.adapters.cli.main", *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )


def sessions(store: str) -> list[dict[str, Any]]:
    """``selfctx sessions --json`` on ``store``."""
    done = selfctx("sessions", "--store", store, "--json")
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout))


def client_env(home: Path, **extra: str) -> dict[str, str]:
    """A clean environment for a client: its own HOME, no proxy settings of the machine's."""
    keep = ("PATH", "LANG", "LC_ALL", "TERM", "SYSTEMROOT", "TMPDIR")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(HOME=str(home), NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    env.update(extra)
    return env


def requests_text(model: ScriptedModel, api: str) -> list[str]:
    """Each request an API got, as JSON text."""
    return [json.dumps(r.body, ensure_ascii=False) for r in model.of(api)]


def tool_names_seen(lines: Sequence[str]) -> set[str]:
    """Tool names in a client's JSON-lines output (whatever the nesting)."""
    names: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if value.get("type") in ("tool_use", "function_call") and "name" in value:
                names.add(str(value["name"]))
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for line in lines:
        with contextlib.suppress(json.JSONDecodeError):
            walk(json.loads(line))
    return names
