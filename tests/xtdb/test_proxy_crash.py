"""kill -9 of ``selfctx proxy`` (its front and workers) and of its RocksDB node right after the
client got its answers: after a restart the session holds every message the client sent and a
record of every request it got an answer for (decision 0089: both in one transaction, committed
before the answer)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from selfctx.adapters.bootstrap import build_service, open_store
from selfctx.adapters.proxy.scripted import Step
from selfctx.adapters.xtdb import XtdbNode
from selfctx.domain.chat import AssistantMessage
from tests.proxy.support import _readline, scripted

pytestmark = pytest.mark.xtdb

PATH = "/v1/chat/completions"
HEADERS = {"authorization": "Bearer test", "x-selfctx-session": "crash"}
REQUESTS = 6


def _send(base: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    tool = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}
    body = {"model": "m", "messages": messages, "tools": [tool]}
    answer = httpx.post(base + PATH, json=body, headers=HEADERS, timeout=60)
    answer.raise_for_status()
    return dict(answer.json()["choices"][0]["message"])


def test_kill_9_after_the_answers_loses_no_request(rocksdb_node: XtdbNode, tmp_path: Path) -> None:
    store = "xtdb://" + rocksdb_node.url.removeprefix("http://")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    steps = [Step("", (("bash", {"command": f"echo {n}"}),)) for n in range(REQUESTS)]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Count, please."},
    ]
    argv = [sys.executable, "-m", "selfctx.adapters.cli.main", "proxy", "--port", "0"]
    argv += ["--store", store, "--workspace", str(workspace), "--workers", "2"]
    with scripted(steps) as (_model, up):
        argv += ["--upstream-anthropic", up, "--upstream-openai", up + "/v1"]
        with (tmp_path / "proxy.log").open("w") as errors:
            process = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=errors,
                text=True,
                cwd=workspace,
                start_new_session=True,
            )
            try:
                first = _readline(process.stdout, 60)
                match = re.search(r"listening on (http://\S+)", first)
                assert match, (tmp_path / "proxy.log").read_text()
                for _ in range(REQUESTS):
                    message = _send(match.group(1), messages)
                    messages.append(message)
                    for call in message["tool_calls"]:
                        command = json.loads(call["function"]["arguments"])["command"]
                        output = f"output of {command}"
                        messages.append(
                            {"role": "tool", "tool_call_id": call["id"], "content": output}
                        )
            finally:
                # the proxy's front and workers, and the node, at once, with no warning
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                rocksdb_node.kill()
    rocksdb_node.start()
    service = build_service(store=open_store(store), workspace=str(workspace))
    try:
        (sid,) = [s for s in service.sessions() if s.startswith("crash")]
        service.resume_session(sid)
        turns = service.state(sid).turns
        said = [m for t in turns for m in t.messages if isinstance(m, AssistantMessage)]
        commands = [str(c.arguments.get("command")) for m in said for c in m.tool_calls]
        # every call the client sent back (the last answer's comes back with a next request)
        assert commands == [f"echo {n}" for n in range(REQUESTS - 1)]
        records = service.requests(sid)
        assert [r.n for r in records] == list(range(1, REQUESTS + 1))
        assert all(r.facts.api == "openai" and r.facts.model == "m" for r in records)
    finally:
        service.close()
