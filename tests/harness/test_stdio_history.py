"""``selfctx serve --stdio``: the history methods (``search``, ``checkpoint``,
``checkpoints``, ``rollback``), driven as a subprocess over a real workspace."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.test_stdio import FILES, Conversation, Server


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root.resolve()


@pytest.fixture
def server(workspace: Path) -> Iterator[Server]:
    running = Server(workspace)
    yield running
    running.kill()


def test_search_checkpoint_and_rollback(server: Server, workspace: Path) -> None:
    sid = "history"
    opened = server.call("session.open", session_id=sid, system_prompt="You fix calc.")
    assert opened["resumed"] is False
    chat = Conversation("openai", workspace, "You fix calc.")
    chat.user("add() subtracts; find out why")
    chat.bash("call_cat", "cat calc.py")
    server.call("ingest", session_id=sid, **chat.ingest_params())

    hits = server.call("search", session_id=sid, query="return a - b")["hits"]
    assert "toolcall" in [h["type"] for h in hits]  # the cat's output (under its object id)
    assert all("return a - b" in h["snippet"] for h in hits)
    assert {h["session_id"] for h in hits if h["type"] != "file"} == {sid}
    assert server.call("search", query="subtracts", role="user", limit=1)["hits"][0]["turn"] == 1
    relayed = server.call(
        "tools.call", session_id=sid, name="search", arguments={"query": "subtracts"}
    )
    assert relayed["ok"] and "turn 1 user" in relayed["message"]

    budget = server.call("budget", session_id=sid)
    assert set(budget) == {
        "history_tokens", "max_history_tokens", "max_input_tokens", "prompt_tokens",
        "remaining", "needs_compaction", "compaction_enabled",
    }  # fmt: skip
    assert 0 < budget["history_tokens"] <= budget["prompt_tokens"]
    assert budget["remaining"] == budget["max_input_tokens"] - budget["prompt_tokens"]

    mark = server.call("checkpoint", session_id=sid, label="before-fix")
    assert mark["label"] == "before-fix" and mark["turn"] == 1
    (workspace / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    fixed = server.call("index_file", session_id=sid, path=str(workspace / "calc.py"), wrote=True)
    assert fixed["outcome"] == "updated"
    chat.user("now run it")
    server.call("ingest", session_id=sid, **chat.ingest_params())

    dry = server.call("rollback", session_id=sid, to="before-fix", mode="both", dry_run=True)
    assert dry["dry_run"] is True and dry["saved_as"] is None
    assert [(f["path"], f["action"]) for f in dry["files"]] == [
        (str(workspace / "calc.py"), "write")
    ]
    assert "a + b" in (workspace / "calc.py").read_text()

    done = server.call("rollback", session_id=sid, to="before-fix", mode="both")
    assert (done["turns_before"], done["turns_after"], done["refused"]) == (2, 1, [])
    assert "a - b" in (workspace / "calc.py").read_text()
    request = server.call("assemble", session_id=sid)
    assert "now run it" not in json.dumps(request)
    labels = [cp["label"] for cp in server.call("checkpoints", session_id=sid)["checkpoints"]]
    assert labels == ["before-fix", done["saved_as"]]

    error = server.error("rollback", session_id=sid, to="nope")
    assert error["data"]["kind"] == "unknown_checkpoint" and error["data"]["label"] == "nope"
    error = server.error("checkpoint", session_id=sid, label="before-fix")
    assert error["data"]["kind"] == "duplicate_checkpoint"
    error = server.error("rollback", session_id=sid, to="before-fix", mode="all")
    assert error["data"]["kind"] == "invalid_params" and error["data"]["param"] == "mode"
    error = server.error("search", query="x", limit=0)
    assert error["data"]["kind"] == "invalid_input"
