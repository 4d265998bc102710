"""A JSON object the client sent keeps the client's key order in everything rendered from it,
whatever the interpreter's hash seed (decision 0132): the same conversation ingested by
processes started with different ``PYTHONHASHSEED`` renders the same bytes, in every format,
live and after a resume from the store, and each call's arguments (nested objects, one of more
than 8 keys, included) and each reasoning block are what the client sent, key for key.

Run as a module (``python -m tests.harness.test_key_order``), this file is the script each
process runs: it prints what it rendered as one JSON object.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from selfctx.adapters.memory import MemoryStore
from tests.harness.conftest import (
    a_assistant,
    a_result,
    a_use,
    a_user,
    make_service,
    o_assistant,
    o_call,
    o_tool,
    o_user,
    open_harness,
)

ROOT = Path(__file__).resolve().parents[2]

EDIT = {"path": "src/app.py", "old_string": "x = 1", "new_string": "x = 2"}
"""Three keys, none in sorted order after the first: a persistent map iterates them otherwise."""
SEARCH = {
    "query": "def main",
    "path": "src",
    "glob": "*.py",
    "case": False,
    "limit": 20,
    "before": 2,
    "after": 2,
    "mode": "content",
}
"""Eight scalars: the most a flat map held in decision 0127."""
NESTED = {
    "zeta": "last name first",
    "options": {"verbose": True, "depth": 3, "filters": [{"name": "x", "at": 1}, "y"]},
    "env": {f"VAR_{n}": str(n) for n in (7, 3, 11, 0, 9, 5, 1, 10, 2)},
    "alpha": [1, {"m": None, "b": 2.5}],
}
"""Nested objects and arrays, and an object of 9 keys (beyond what a store keeps in order)."""
CALLS: dict[str, dict[str, Any]] = {"edit": EDIT, "search": SEARCH, "configure": NESTED}
THINKING = {"type": "thinking", "thinking": "Edit first.", "signature": "EqQBCgIYAhIM+sig=="}
REASONING = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA=="}


def _openai() -> list[dict[str, Any]]:
    return [
        o_user("Fix it."),
        o_assistant("", *(o_call(f"c_{n}", n, **a) for n, a in CALLS.items())),
        *(o_tool(f"c_{n}", f"{n} done") for n in CALLS),
        o_user("Thanks."),
    ]


def _anthropic() -> list[dict[str, Any]]:
    return [
        a_user("Fix it."),
        a_assistant(THINKING, "Working.", *(a_use(f"toolu_{n}", n, **a) for n, a in CALLS.items())),
        a_user(*(a_result(f"toolu_{n}", f"{n} done") for n in CALLS)),
    ]


def _responses() -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix it."}]},
        REASONING,
    ]
    for name, arguments in CALLS.items():
        items.append(
            {
                "type": "function_call",
                "call_id": f"call_{name}",
                "name": name,
                "arguments": json.dumps(arguments),
            }
        )
        items.append({"type": "function_call_output", "call_id": f"call_{name}", "output": "ok"})
    return items


CONVERSATIONS = {"openai": _openai, "anthropic": _anthropic, "responses": _responses}


def render_all() -> dict[str, dict[str, str]]:
    """Each format's request, as JSON text, live and from a second service resuming the session
    from the store (documents kept as JSON text, as a remote store receives them)."""
    out = {}
    for fmt, conversation in CONVERSATIONS.items():
        store = MemoryStore()
        live = open_harness(make_service("inline", store), fmt)
        live.ingest(conversation())
        resumed = open_harness(make_service("inline", store), fmt)
        resumed.ingest(conversation())
        out[fmt] = {
            "live": json.dumps(live.request(), ensure_ascii=False),
            "resumed": json.dumps(resumed.request(), ensure_ascii=False),
        }
    return out


def _rendered_in(seed: str) -> dict[str, dict[str, str]]:
    env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, "-m", "tests.harness.test_key_order"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    rendered: dict[str, dict[str, str]] = json.loads(run.stdout)
    return rendered


def _arguments(fmt: str, request: dict[str, Any]) -> dict[str, str]:
    """Each call's arguments as the request writes them (JSON text), by tool name."""
    if fmt == "openai":
        return {
            c["function"]["name"]: c["function"]["arguments"]
            for m in request["messages"]
            for c in m.get("tool_calls", ())
        }
    if fmt == "anthropic":
        return {
            b["name"]: json.dumps(b["input"])
            for m in request["messages"]
            if isinstance(m["content"], list)
            for b in m["content"]
            if b["type"] == "tool_use"
        }
    return {i["name"]: i["arguments"] for i in request["input"] if i["type"] == "function_call"}


@pytest.fixture(scope="module")
def rendered() -> dict[str, dict[str, dict[str, str]]]:
    return {seed: _rendered_in(seed) for seed in ("0", "1", "2")}


def test_processes_with_other_hash_seeds_render_the_same_bytes(
    rendered: dict[str, dict[str, dict[str, str]]],
) -> None:
    first = rendered["0"]
    assert set(first) == set(CONVERSATIONS)
    for seed, texts in rendered.items():
        for fmt in CONVERSATIONS:
            assert texts[fmt]["live"] == first[fmt]["live"], (seed, fmt)
            assert texts[fmt]["resumed"] == first[fmt]["live"], (seed, fmt)


@pytest.mark.parametrize("fmt", list(CONVERSATIONS))
def test_arguments_and_blocks_keep_the_clients_order(
    rendered: dict[str, dict[str, dict[str, str]]], fmt: str
) -> None:
    for texts in rendered.values():
        for form in ("live", "resumed"):
            request = json.loads(texts[fmt][form])
            # byte for byte the client's JSON of each call's arguments (json.dumps's spacing)
            assert _arguments(fmt, request) == {n: json.dumps(a) for n, a in CALLS.items()}
            text = texts[fmt][form]
            if fmt == "anthropic":
                assert json.dumps(THINKING, ensure_ascii=False) in text
            if fmt == "responses":
                assert json.dumps(REASONING, ensure_ascii=False) in text


if __name__ == "__main__":
    sys.stdout.write(json.dumps(render_all()))
