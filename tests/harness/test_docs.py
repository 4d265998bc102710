"""docs/harness.md says what the code does : the defaults of ``session.open``,
the policies it takes, and the example exchange, run against the server line by line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.harness.stdio import POLICIES, StdioServer
from selfctx.adapters.memory import MemoryStore
from selfctx.application.policies import DEFAULT_POLICY
from selfctx.application.policies import POLICIES as POLICY_SETTINGS

HARNESS_MD = Path(__file__).resolve().parents[2] / "docs" / "harness.md"
EXAMPLE_DIR = "/tmp/ex/project"
"""The workspace the example was recorded in (the test substitutes its own)."""


def _chars(text: str) -> str:
    """``text`` without the character count of a request's text, which the path changes."""
    return re.sub(r'"chars":[0-9]+', '"chars":', text)


def doc() -> str:
    return HARNESS_MD.read_text(encoding="utf-8")


def test_session_open_defaults_are_the_codes() -> None:
    row = next(line for line in doc().splitlines() if line.startswith("| `session.open` |"))
    assert f'default `"{DEFAULT_POLICY}"`' in row
    for name in POLICIES:
        assert f'`"{name}"`' in row
    assert set(POLICIES) == set(POLICY_SETTINGS)
    assert "the only one" not in doc()


def test_the_example_exchange_is_what_the_server_answers(tmp_path: Path) -> None:
    text = doc()
    block = text.split("### An example exchange", 1)[1].split("```", 2)[1]
    lines = [line for line in block.splitlines() if line[:2] in ("→ ", "← ")]
    assert lines and lines[0].startswith("→ ")
    workspace = tmp_path / "project"
    workspace.mkdir()
    (workspace / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    # The host id the example was recorded with: file ids are the same.
    service = build_service(store=MemoryStore(), workspace=str(workspace), host_id="example-host")
    server = StdioServer(service, cwd=str(workspace), roots=[str(workspace)])
    compared = 0
    for request, expected in zip(lines[::2], lines[1::2], strict=True):
        assert request.startswith("→ ") and expected.startswith("← ")
        answer = server.handle_line(request[2:].replace(EXAMPLE_DIR, str(workspace)))
        assert answer is not None
        if "…" in expected:  # cut short in the doc: its parts must still be in the answer
            cut = expected[2:].replace(EXAMPLE_DIR, str(workspace))
            for part in (_chars(p) for p in cut.split("…")):
                # A file id is cut to its ends in the doc, and depends on the path: left out.
                part = re.sub(r"id=[0-9a-f]*$", "id=", re.sub(r"^[0-9a-f]+", "", part))
                assert part.strip(" ,") in _chars(answer), part
            continue
        assert json.loads(answer) == json.loads(expected[2:]), request
        compared += 1
    assert compared >= 6


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_documented_policy_opens(policy: str) -> None:
    server = StdioServer(build_service(store=MemoryStore(), host_id="docs"))
    line = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "session.open",
         "params": {"session_id": "p", "policy": policy}}
    )  # fmt: skip
    answer = json.loads(server.handle_line(line) or "{}")
    assert answer["result"]["policy"] == policy
    unnamed = json.loads(line.replace(f'"policy": "{policy}"', '"format": "openai"'))
    unnamed["params"]["session_id"] = "q"
    default = json.loads(server.handle_line(json.dumps(unnamed)) or "{}")
    assert default["result"]["policy"] == DEFAULT_POLICY
