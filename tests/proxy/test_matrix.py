"""The client matrix: the real, pinned agents (Claude Code, Codex CLI, aider twice at once, Pi)
each play the long task of tests/proxy/tasks.py (28 model calls, outputs of 20-38 KB, streamed)
through one ``selfctx proxy`` (default policy, XTDB store) in front of the scripted model.

Between each client and the proxy sits a pass-through relay that keeps what the client sent and
tags it, so that every request the model got is paired with the client request it was made for.
Each run checks:

1. the client exits 0 and its task is done (the test passes in its repository);
2. every request the proxy changed is a valid request of its API (and holds at most four cache
   marks); the client's own requests it sent unchanged are the client's;
3. no context call reaches the client: its output and its own records never name one;
4. an activation brings the output back exactly: the answer holds, byte for byte, the output
   the client once sent, and goes on holding it in the requests that follow;
5. no request reaches the model larger than the client request it was made for;
6. no request holds another session's text (each repository carries a marker of its own), and
   the store holds the client's session.

Pi with its extension (no proxy) is tested in tests/proxy/test_pi.py with the same task.
"""

from __future__ import annotations

import collections
import json
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from selfctx.adapters.harness.render import (
    validate_anthropic,
    validate_openai,
    validate_responses,
)
from selfctx.adapters.proxy.passthrough import PassThrough
from selfctx.adapters.proxy.scripted import ScriptedModel, Seen, Step
from selfctx.adapters.proxy.serving import serve_in_thread
from selfctx.adapters.xtdb import XtdbNode
from tests.proxy.clients import CLIENTS, aider_script
from tests.proxy.support import SECRET, fixed, proxy_process, sessions

pytestmark = [pytest.mark.xtdb, pytest.mark.slow]

STEPS = 28
TAG = "x-matrix-request"
MARKERS = {
    "claude-code": "marker-of-claude-code-7f3a",
    "codex": "marker-of-codex-b21c",
    "pi": "marker-of-pi-5d0e",
    "aider-1": "marker-of-aider-one-9a44",
    "aider-2": "marker-of-aider-two-c6e8",
}
VALIDATE: dict[str, Callable[[Any], None]] = {
    "anthropic": validate_anthropic,
    "openai": validate_openai,
    "responses": validate_responses,
}
CONTEXT_WORDS = ("context_activate", "context_pin", "Let me see that output again.")


def _dispatch() -> Callable[[Seen], Step]:
    """One script for every client of the matrix, by the tools each offers."""
    scripts = {
        "Bash": CLIENTS["claude-code"].script(STEPS),
        "exec_command": CLIENTS["codex"].script(STEPS),
        "bash": CLIENTS["pi"].script(STEPS),
    }
    aiders = {"aider-1": aider_script("-1"), "aider-2": aider_script("-2")}

    def script(seen: Seen) -> Step:
        names = seen.tool_names()
        for tool, played in scripts.items():
            if tool in names:
                return played(seen)
        for name, played in aiders.items():
            if MARKERS[name] in seen.text:
                return played(seen)
        return Step("ok")

    return script


@attrs.define
class Matrix:
    model: ScriptedModel
    proxy_url: str
    store: str
    log: Path
    sent: dict[str, int] = attrs.field(factory=dict)
    """Bytes of each client request, by its tag."""
    bodies: dict[str, bytes] = attrs.field(factory=dict)
    lock: threading.Lock = attrs.field(factory=threading.Lock)
    counts: collections.Counter[str] = attrs.field(factory=collections.Counter)

    def relay(self, name: str) -> PassThrough:
        def record(_path: str, _headers: dict[str, str], body: bytes) -> dict[str, str]:
            with self.lock:
                self.counts[name] += 1
                tag = f"{name}:{self.counts[name]}"
                self.sent[tag] = len(body)
                self.bodies[tag] = body
            return {TAG: tag}

        return PassThrough(self.proxy_url, record)


@pytest.fixture(scope="module")
def matrix(clients_node: XtdbNode, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Matrix]:
    root = tmp_path_factory.mktemp("matrix")
    store = "xtdb://" + clients_node.url.removeprefix("http://")
    model = ScriptedModel(_dispatch())
    with (
        serve_in_thread(model.app) as up,
        proxy_process(up, store, root, root / "proxy.log", policy=()) as proxy,
    ):
        yield Matrix(model, proxy.url, store, root / "proxy.log")


def _play(matrix: Matrix, name: str, tmp: Path) -> tuple[Path, Path, str]:
    client = CLIENTS[name.split("-")[0] if name.startswith("aider") else name]
    repo = client.repo(tmp, STEPS, MARKERS[name])
    home = tmp / "home"
    home.mkdir()
    with serve_in_thread(matrix.relay(name).app) as relay:
        out = client.run(relay, repo, home, STEPS)
    return repo, home, out


def _check(matrix: Matrix, name: str, api: str, repo: Path, texts: list[str]) -> None:
    """The checks of the module's docstring, 1-6, for the run of ``name``."""
    assert fixed(repo)
    mine = [r for r in matrix.model.requests if r.headers.get(TAG, "").startswith(f"{name}:")]
    assert len(mine) >= 25, len(mine)
    changed = activated = 0
    outputs = _outputs(matrix, name)
    for request in mine:
        tag = request.headers[TAG]
        text = json.dumps(request.body, ensure_ascii=False)
        # 5: never larger than what the client sent
        assert request.size <= matrix.sent[tag], (tag, request.size, matrix.sent[tag])
        # 6: nothing of another session
        for other, marker in MARKERS.items():
            if other != name:
                assert marker not in text, (tag, other)
        assert SECRET in request.headers.get("x-api-key", "") + request.headers.get(
            "authorization", ""
        )
        # 2: what the proxy built is a request of the API
        if request.size != matrix.sent[tag] or request.body != json.loads(matrix.bodies[tag]):
            changed += 1
            VALIDATE[api](request.body)
            assert text.count('"cache_control"') <= 4
        # 4: an activation answers with an output, exactly as the client sent it
        for answer in _context_answers(api, request.body):
            # what the model activated stays, request after request (decision 0021)
            assert not re.match(r"\[#\d+ collapsed:", answer), (tag, answer[:200])
            shown = [o for o in outputs if len(o) > 20 and o in answer]
            assert shown, answer[:300]
            activated += max(len(o) for o in shown) > 10_000
    if name.startswith("aider"):
        assert changed == 0  # nothing to collapse in aider's conversation: sent as it came
    else:
        assert changed >= 15, changed
        assert activated >= 2, "no large output brought back and kept"
    # 3: the client never saw a context call
    for text in texts:
        for word in CONTEXT_WORDS:
            assert word not in text
    # 6: the store holds the session, the key nowhere in the log
    log = matrix.log.read_text()
    assert SECRET not in log


def _outputs(matrix: Matrix, name: str) -> list[str]:
    """Every tool output (and aider's pasted command outputs) the client sent."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key in ("content", "output"):
                if isinstance(value.get(key), str):
                    found.append(value[key])
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for tag, body in matrix.bodies.items():
        if tag.startswith(f"{name}:"):
            walk(json.loads(body))
    return found


def _context_answers(api: str, body: Any) -> list[str]:
    """The answers the proxy gave to the model's ``context_activate`` calls in a request."""
    ids: set[str] = set()
    answers: list[str] = []
    items = body.get("messages") or body.get("input") or []
    for item in items:
        if api == "anthropic" and isinstance(item.get("content"), list):
            for block in item["content"]:
                if block.get("type") == "tool_use" and block.get("name") == "context_activate":
                    ids.add(block["id"])
                if block.get("type") == "tool_result" and block.get("tool_use_id") in ids:
                    content = block.get("content")
                    answers.append(content if isinstance(content, str) else json.dumps(content))
        elif api == "openai":
            for call in item.get("tool_calls") or ():
                if call["function"]["name"] == "context_activate":
                    ids.add(call["id"])
            if item.get("role") == "tool" and item.get("tool_call_id") in ids:
                answers.append(str(item.get("content")))
        elif api == "responses":
            if item.get("type") == "function_call" and item.get("name") == "context_activate":
                ids.add(item["call_id"])
            if item.get("type") == "function_call_output" and item.get("call_id") in ids:
                answers.append(str(item.get("output")))
    return answers


def test_claude_code(matrix: Matrix, tmp_path: Path) -> None:
    repo, home, out = _play(matrix, "claude-code", tmp_path)
    transcripts = [p.read_text() for p in (home / ".claude").rglob("*.jsonl")]
    assert transcripts, "Claude Code kept no transcript"
    _check(matrix, "claude-code", "anthropic", repo, [out, *transcripts])
    claude_session = re.search(r'"session_id":"([0-9a-f-]+)"', out)
    assert claude_session
    held = [s for s in sessions(matrix.store) if s["session"].startswith(claude_session.group(1))]
    assert held


def test_codex_cli(matrix: Matrix, tmp_path: Path) -> None:
    repo, home, out = _play(matrix, "codex", tmp_path)
    rollouts = [p.read_text() for p in (home / ".codex" / "sessions").rglob("*.jsonl")]
    assert rollouts, "Codex kept no rollout"
    _check(matrix, "codex", "responses", repo, [out, *rollouts])


def test_pi_through_the_proxy(matrix: Matrix, tmp_path: Path) -> None:
    repo, _home, out = _play(matrix, "pi", tmp_path)
    _check(matrix, "pi", "openai", repo, [out])


def test_two_aider_runs_at_once(matrix: Matrix, tmp_path: Path) -> None:
    """aider sends no session id and opens every conversation with the same canned example:
    two runs through one proxy, at once, with one key, are two sessions that never see each
    other's text."""
    results: dict[str, tuple[Path, Path, str]] = {}
    errors: list[BaseException] = []

    def run(name: str) -> None:
        try:
            results[name] = _play(matrix, name, tmp_path / name)
        except BaseException as exc:  # reported in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in ("aider-1", "aider-2")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert not errors, errors
    for name, (repo, _home, out) in results.items():
        history = (repo / ".aider.chat.history.md").read_text()
        _check(matrix, name, "openai", repo, [out, history])
    held = [s["session"] for s in sessions(matrix.store) if s["session"].startswith("openai.")]
    assert len(held) >= 2, held
