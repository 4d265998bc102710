"""The Pi coding agent (from npm, in its non-interactive mode) with the extension of adapters/pi:
the long task of tests/proxy/tasks.py, once without the extension and once with it, against the
scripted model. Pi talks to the model itself; the extension feeds every turn through
``selfctx serve --stdio`` and registers the context tools, which Pi runs (their answers come from
the context manager). Checked: exit 0 and the task done, every request valid, the activation
answers with the output exactly, no request's messages larger than without the extension at the
same step, no text of the other run, the session in the store."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from selfctx.adapters.harness.render import validate_openai
from selfctx.adapters.proxy.passthrough import PassThrough
from selfctx.adapters.proxy.scripted import ScriptedModel
from selfctx.adapters.proxy.serving import serve_in_thread
from selfctx.adapters.xtdb import XtdbNode
from selfctx.adapters.xtdb.secret import keys_dir
from tests.proxy.clients import CLIENTS, PI_DIR, pi_extension_script, run_pi
from tests.proxy.support import client, fixed, selfctx, sessions

pytestmark = [pytest.mark.xtdb, pytest.mark.slow]

STEPS = 28
TAG = "x-run"


def test_the_extension_type_checks() -> None:
    tsc = client(PI_DIR / "node_modules" / ".bin" / "tsc")
    done = subprocess.run(
        [tsc, "--noEmit", "-p", str(PI_DIR)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _tagger(run: str) -> Callable[[str, dict[str, str], bytes], dict[str, str]]:
    return lambda _path, _headers, _body: {TAG: run}


def _messages_bytes(body: Any) -> int:
    """The conversation's bytes, without Pi's system prompt (which lists the tools Pi has, the
    extension's among them, like the request's tool list)."""
    messages = [m for m in body.get("messages") or () if m.get("role") != "system"]
    return len(json.dumps(messages, ensure_ascii=False).encode())


def test_pi_with_the_extension(clients_node: XtdbNode, tmp_path: Path) -> None:
    store = "xtdb://" + clients_node.url.removeprefix("http://")
    model = ScriptedModel(pi_extension_script(STEPS))
    # markers of one length: the runs are compared byte for byte
    runs = {"plain": "marker-of-pi-run-one-31b0", "extension": "marker-of-pi-run-two-e4a7"}
    repos = {}
    with serve_in_thread(model.app) as up:
        for run, marker in runs.items():
            folder = tmp_path / marker  # paths of one length: they are in the outputs
            repo = repos[run] = CLIENTS["pi"].repo(folder, STEPS, marker)
            home = folder / "home"
            home.mkdir()
            relay = PassThrough(up, _tagger(run))
            extension = None
            if run == "extension":
                extension = {
                    "SELFCTX_COMMAND": str(Path(sys.executable).parent / "selfctx"),
                    "SELFCTX_STORE": store,
                    # the server Pi's extension spawns has Pi's environment, whose HOME is the
                    # test's: it finds the node's secret where the node's launcher wrote it
                    "SELFCTX_XTDB_KEYS": str(keys_dir()),
                }
            with serve_in_thread(relay.app) as base:
                run_pi(base, repo, home, extension)
    for repo in repos.values():
        assert fixed(repo)
    # the task's requests (Pi may also ask for a summary of the session, without tools)
    task = [r for r in model.requests if "bash" in json.dumps(r.body.get("tools"))]
    plain = [r for r in task if r.headers.get(TAG) == "plain"]
    managed = [r for r in task if r.headers.get(TAG) == "extension"]
    assert len(plain) >= 25 and len(managed) == len(plain), (len(plain), len(managed))
    outputs = [
        m["content"]
        for r in plain
        for m in r.body["messages"]
        if m.get("role") == "tool" and isinstance(m.get("content"), str)
    ]
    activated = 0
    for n, (without, with_extension) in enumerate(zip(plain, managed, strict=True)):
        text = json.dumps(with_extension.body, ensure_ascii=False)
        validate_openai(with_extension.body)
        assert runs["plain"] not in text
        assert _messages_bytes(with_extension.body) <= _messages_bytes(without.body), (
            n,
            [m for m in with_extension.body["messages"] if m.get("role") != "system"],
            [m for m in without.body["messages"] if m.get("role") != "system"],
        )
        calls = {
            c["id"]
            for m in with_extension.body["messages"]
            for c in m.get("tool_calls") or ()
            if c["function"]["name"] == "activate"
        }
        for m in with_extension.body["messages"]:
            if m.get("role") == "tool" and m.get("tool_call_id") in calls:
                answer = str(m["content"])
                if "collapsed:" not in answer.split("\n", 1)[0]:
                    shown = [o for o in outputs if len(o) > 10_000 and o in answer]
                    activated += bool(shown)
    assert activated, "the extension's activate never brought an output back"
    assert any("collapsed:" in json.dumps(r.body) for r in managed)
    held = [s["session"] for s in sessions(store) if s["session"].startswith("pi-")]
    assert held
    shown_session = selfctx("show", held[-1], "--store", store)
    assert shown_session.returncode == 0 and "calc.py" in shown_session.stdout
