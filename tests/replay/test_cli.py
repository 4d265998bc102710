"""``selfctx replay``, ``sessions``, ``show`` and ``history`` through the CLI's own entry point."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from selfctx.adapters.cli.main import main
from selfctx.adapters.cli.replay_cmd import SAMPLE_SESSION
from selfctx.adapters.harness.replay import replay_filesystem_id
from selfctx.adapters.harness.trajectories import load
from selfctx.adapters.xtdb import XtdbNode
from selfctx.domain.identifiers import toolcall_object_id
from selfctx.domain.objects import FileObject, FilesystemSource
from tests.replay.data import FILES


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_replay_of_the_example_prints_every_call_and_totals(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = _run(capsys, "replay")  # the shipped example is the default
    assert code == 0, err
    assert "sample_session (openai-messages): 19 model calls" in out
    assert "total: naive " in out and "; tokens: " in out
    assert "[" not in err  # no progress bar when stderr is not a terminal


def test_replay_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "replay", str(SAMPLE_SESSION), "--json", "--show", "2")
    assert code == 0
    result = json.loads(out)
    assert set(result["total"]) >= {"naive_tokens", "managed_tokens", "peak_naive", "peak_managed"}
    calls = result["calls"]
    assert [c["call"] for c in calls] == list(range(1, 20))
    assert sum(c["naive_tokens"] for c in calls) == result["total"]["naive_tokens"]
    assert max(c["managed_tokens"] for c in calls) == result["total"]["peak_managed"]
    assert result["tokenizer"] and result["store"] == "memory"
    (shown,) = result["show"]
    assert shown["call"] == 2 and shown["request"]["messages"][0]["role"] == "system"


def test_replay_show_prints_the_context_at_that_call(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "replay", "--show", "-1", "--format", "anthropic")
    assert code == 0
    context = out.split("context at call 19 of sample_session", 1)[1]
    # The default (inline) layout: no metadata or active section; the activation the model asked
    # for answered with the old failing test output, appended where it asked.
    assert "[metadata]" not in context and "ACTIVE_CONTENT" not in context
    activated = context.rsplit(" name=activate", 1)[1]
    assert "output of bash (fail)]" in activated and "AssertionError: 3 != -5" in activated


def test_replay_progress_bar_on_request(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "replay", "--progress")
    assert code == 0 and "19/19 sample_session" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["replay", "--show", "99"], "calls 1 to 19"),
        (["replay", "--trajectory", "2"], "holds 1"),
        (["sessions", "--store", "memory"], "lives only inside one process"),
        (["show", "s1"], "give --store"),
        (["history", "x", "--store", "memory"], "lives only inside one process"),
    ],
)
def test_clear_errors(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    message: str,
) -> None:
    monkeypatch.delenv("SELFCTX_STORE", raising=False)
    code, _, err = _run(capsys, *argv)
    assert code == 2 and message in err


def test_replay_of_a_file_with_several_trajectories(capsys: pytest.CaptureFixture[str]) -> None:
    several = [f for f in FILES if f.name.endswith(".jsonl")]
    if not several:
        pytest.skip("no trajectories")
    code, out, _ = _run(capsys, "replay", str(several[0]), "--json")
    assert code == 0
    result = json.loads(out)
    assert len(result["trajectories"]) > 1
    assert result["total"]["naive_tokens"] == sum(
        t["total"]["naive_tokens"] for t in result["trajectories"]
    )


@pytest.mark.xtdb
def test_sessions_show_and_history_on_xtdb(
    capsys: pytest.CaptureFixture[str], xtdb_node: XtdbNode, tmp_path: Path
) -> None:
    store = f"xtdb://{xtdb_node.url.removeprefix('http://')}"
    session = f"cli-{uuid.uuid4().hex[:8]}"
    code, out, err = _run(capsys, "replay", "--store", store, "--session", session)
    assert code == 0, err
    assert f"selfctx show {session} --store {store}" in out

    code, out, _ = _run(capsys, "sessions", "--store", store, "--json")
    (row,) = [r for r in json.loads(out) if r["session"] == session]
    assert row["turns"] == 4 and row["objects"] > 0

    # after turn 1: the fix is in, the follow-up question is not
    code, out, _ = _run(capsys, "show", session, "--store", store, "--at-turn", "1")
    assert code == 0 and "after turn 1 (turns 0 to 4)" in out
    assert "all four tests pass" in out and "min_precedence used anywhere" not in out
    # turn 0 is what precedes the first user message: the system prompt alone
    code, out, _ = _run(capsys, "show", session, "--store", store, "--at-turn", "0")
    assert code == 0 and "[user]" not in out
    code, out, _ = _run(capsys, "show", session, "--store", store, "--format", "openai")
    assert json.loads(out)["messages"][0]["role"] == "system"
    code, _, err = _run(capsys, "show", session, "--store", store, "--at-turn", "9")
    assert code == 2 and "turns 0 to 4" in err

    # the file the agent edited: stub, viewed, edited, each version with its hashes
    (trajectory,) = load(SAMPLE_SESSION)
    parser_id = FileObject.identity_of(
        FilesystemSource(replay_filesystem_id(trajectory), "/workspace/calc/parser.py")
    )
    code, out, _ = _run(capsys, "history", parser_id, "--store", store, "--json")
    versions = json.loads(out)
    assert [v["version"] for v in versions][:3] == [1, 2, 3]
    assert all(v["object_hash"] and v["tx_time"] for v in versions)
    assert len({v["object_hash"] for v in versions[:3]}) == 3
    call_003 = toolcall_object_id(session, "call_003", 1)  # decision 0030
    code, out, _ = _run(capsys, "history", call_003, "--store", store)
    assert code == 0 and "1 version(s)" in out and "content_hash" in out
