"""``selfctx replay``, ``sessions``, ``show`` and ``history`` through the CLI's own entry point."""

from __future__ import annotations

import contextlib
import json
import uuid
from pathlib import Path

import pytest

from selfctx.adapters.cli.main import main
from selfctx.adapters.cli.replay_cmd import SAMPLE_SESSION
from selfctx.adapters.harness.replay import replay_filesystem_id, session_id_for
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
    assert "sample_session (openai-messages): 46 model calls" in out
    assert "total: naive " in out and "; tokens: " in out
    assert "\nrecall: 5 of 5 used lines visible (1.00; naive 1.00)" in out
    assert "[" not in err  # no progress bar when stderr is not a terminal


def test_replay_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "replay", str(SAMPLE_SESSION), "--json", "--show", "2")
    assert code == 0
    result = json.loads(out)
    assert set(result["total"]) >= {"naive_tokens", "managed_tokens", "peak_naive", "peak_managed"}
    calls = result["calls"]
    assert [c["call"] for c in calls] == list(range(1, 47))
    assert result["total"]["used"] == sum(c["used_lines"] for c in calls) == 5
    assert result["total"]["visible"] == sum(c["visible_lines"] for c in calls)
    assert sum(c["naive_tokens"] for c in calls) == result["total"]["naive_tokens"]
    assert max(c["managed_tokens"] for c in calls) == result["total"]["peak_managed"]
    assert result["tokenizer"] and result["store"] == "memory"
    (shown,) = result["show"]
    assert shown["call"] == 2 and shown["request"]["messages"][0]["role"] == "system"


def test_replay_show_prints_the_context_at_that_call(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "replay", "--show", "38", "--format", "anthropic")
    assert code == 0
    context = out.split("context at call 38 of sample_session", 1)[1]
    # The default (relevance) layout: no metadata or active section; the activation the model
    # asked for (as a command, mini-swe-agent style) answered with the first crash, appended
    # where it asked.
    assert "[metadata]" not in context and "ACTIVE_CONTENT" not in context
    (trajectory,) = load(SAMPLE_SESSION)
    call_037 = toolcall_object_id(session_id_for(trajectory), "call_037", 1)  # decision 0030
    activated = context.rsplit(f"-> bash activate #12  [{call_037}]", 1)[1]
    assert "[#12 output of bash (fail)]" in activated and "KeyError: 'mean'" in activated
    # what the model asked for, it keeps: the answer stays to the end (it never deactivated it)
    code, out, _ = _run(capsys, "replay", "--show", "-1")
    last = out.split("context at call 46 of sample_session", 1)[1]
    assert "KeyError: 'mean'" in last.rsplit(f"[{call_037}]", 1)[1]


def test_replay_progress_bar_on_request(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "replay", "--progress")
    assert code == 0 and "46/46 sample_session" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["replay", "--show", "99"], "calls 1 to 46"),
        (["replay", "--trajectory", "2"], "holds 1"),
        (["sessions", "--store", "memory"], "lives only inside one process"),
        (["show", "s1"], "give --store"),
        (["history", "x", "--store", "memory"], "lives only inside one process"),
        (["search", "x", "--store", "memory"], "lives only inside one process"),
        (["search", "x"], "give --store"),
        (["checkpoints", "s1", "--store", "memory"], "lives only inside one process"),
        (["rollback", "s1", "--to", "one"], "give --store"),
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


def _two_trajectories(path: Path) -> Path:
    """An OpenHands resolver file holding two short trajectories."""
    lines = []
    for n in (1, 2):
        history = [
            {"action": "message", "content": f"task {n} in /workspace"},
            {"action": "run", "command": "ls", "thought": "look"},
            {"observation": "run", "content": "a.ts", "command": "ls", "exit_code": 0},
            {"action": "finish", "thought": "done", "outputs": {}},
        ]
        lines.append(json.dumps({"history": history}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_replay_of_a_file_with_several_trajectories(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    several = [f for f in FILES if f.name.endswith(".jsonl")]  # the development set's, if any
    path = several[0] if several else _two_trajectories(tmp_path / "resolver.jsonl")
    code, out, _ = _run(capsys, "replay", str(path), "--json")
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
    assert f"selfctx show {session} --store {store} --at-position P" in " ".join(out.split())

    code, out, err = _run(capsys, "sessions", "--store", store, "--json")
    # (other tests' sessions on the shared node may be damaged on purpose: exit status 1)
    (row,) = [r for r in json.loads(out) if r["session"] == session]
    assert row["turns"] == 1 and row["objects"] > 0, err

    # after turn 1 (mini-swe-agent works on one task: one user message): the whole session
    code, out, _ = _run(capsys, "show", session, "--store", store, "--at-turn", "1")
    assert code == 0 and "after turn 1 (turns 0 to 1)" in out
    assert "Both bugs are fixed" in out
    # turn 0 is what precedes the first user message: the system prompt alone
    code, out, _ = _run(capsys, "show", session, "--store", store, "--at-turn", "0")
    assert code == 0 and "[user]" not in out
    code, out, _ = _run(capsys, "show", session, "--store", store, "--format", "openai")
    assert json.loads(out)["messages"][0]["role"] == "system"
    code, _, err = _run(capsys, "show", session, "--store", store, "--at-turn", "9")
    assert code == 2 and "turns 0 to 1" in err

    # the file the agent read: a stub from the listing, then its content, each with its hashes
    (trajectory,) = load(SAMPLE_SESSION)
    functions_id = FileObject.identity_of(
        FilesystemSource(replay_filesystem_id(trajectory), "/workspace/calc/functions.py")
    )
    code, out, _ = _run(capsys, "history", functions_id, "--store", store, "--json")
    versions = json.loads(out)
    assert [v["version"] for v in versions][:2] == [1, 2]
    assert all(v["object_hash"] and v["tx_time"] for v in versions)
    assert len({v["object_hash"] for v in versions[:2]}) == 2
    call_003 = toolcall_object_id(session, "call_003", 1)  # decision 0030
    code, out, _ = _run(capsys, "history", call_003, "--store", store)
    assert code == 0 and "1 version(s)" in out and "content_hash" in out


@pytest.mark.xtdb
def test_search_on_xtdb(
    capsys: pytest.CaptureFixture[str],
    xtdb_node: XtdbNode,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``selfctx search``: a replayed session's tool outputs, messages and files are found,
    ranked; the index file is kept between runs and only catches up."""
    store = f"xtdb://{xtdb_node.url.removeprefix('http://')}"
    session = f"cli-{uuid.uuid4().hex[:8]}"
    assert _run(capsys, "replay", "--store", store, "--session", session)[0] == 0
    index = str(tmp_path / "search.sqlite")
    base = ["search", "--store", store, "--index", index, "--session", session]

    code, out, err = _run(capsys, *base, "AssertionError: 3 != -5", "--json")
    assert code == 0, err
    hits = json.loads(out)["hits"]  # the RPC method's shape
    assert hits and {h["session_id"] for h in hits} == {session}
    assert hits[0]["type"] == "toolcall" and hits[0]["object_id"].startswith("tc_")
    assert "3 != -5" in hits[0]["snippet"]
    assert hits == sorted(hits, key=lambda h: -h["score"])

    code, out, _ = _run(capsys, *base, "check_arity", "--type", "file", "--json")
    files = json.loads(out)["hits"]
    assert files and all(h["title"].startswith("/workspace/calc/") for h in files)
    assert len({h["object_id"] for h in files}) == len(files)  # one hit per file

    code, out, _ = _run(capsys, *base, "unknown function", "--role", "user")
    assert code == 0 and f"{session} turn" in out and " user " in out
    code, out, _ = _run(capsys, *base, "zzzz-nothing")
    assert code == 0 and "nothing in session" in out
    code, _, err = _run(capsys, *base, "x", "--limit", "0")
    assert code == 2 and "limit" in err
    code, _, err = _run(capsys, *base, "a\x00b")
    assert code == 2 and "NUL" in err

    # The index holds every session's text: its files, and the folders of its default place,
    # are the owner's alone.
    written = [Path(index + suffix) for suffix in ("", "-wal", "-shm")]
    assert [oct(p.stat().st_mode & 0o777) for p in written if p.exists()][:1] == ["0o600"]
    assert all(p.stat().st_mode & 0o077 == 0 for p in written if p.exists())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    code, _, err = _run(capsys, "search", "--store", store, "--session", session, "lexer")
    assert code == 0, err
    folder = tmp_path / "cache" / "self-context-manager" / "search"
    assert oct(folder.stat().st_mode & 0o777) == oct(folder.parent.stat().st_mode & 0o777)
    assert folder.stat().st_mode & 0o777 == 0o700
    assert [f.stat().st_mode & 0o777 for f in folder.iterdir()] == [0o600] * len(
        list(folder.iterdir())
    )


@pytest.mark.xtdb
def test_checkpoints_and_rollback_on_xtdb(
    capsys: pytest.CaptureFixture[str], xtdb_node: XtdbNode, tmp_path: Path
) -> None:
    """``selfctx checkpoint``, ``checkpoints`` and ``rollback`` on a stored session, files
    included (a real file in a folder given as ``--root``)."""
    from selfctx.adapters.bootstrap import build_service, open_store

    store = f"xtdb://{xtdb_node.url.removeprefix('http://')}"
    session = f"cli-{uuid.uuid4().hex[:8]}"
    path = tmp_path / "notes.md"
    path.write_text("first\n")
    service = build_service(store=open_store(store), workspace=str(tmp_path))
    service.start_session(session, "sys")
    service.index_file(session, str(path))
    service.record_user_message(session, "write the second line")
    service.close()

    code, out, err = _run(capsys, "checkpoint", session, "--label", "one", "--store", store)
    assert code == 0 and "checkpoint one" in out, err
    service = build_service(store=open_store(store), workspace=str(tmp_path))
    service.resume_session(session)
    path.write_text("first\nsecond\n")
    service.index_file(session, str(path), wrote=True)
    service.record_user_message(session, "and a third")
    service.close()

    code, out, _ = _run(capsys, "checkpoints", session, "--store", store, "--json")
    assert [c["label"] for c in json.loads(out)] == ["one"]
    base = ["rollback", session, "--to", "one", "--store", store, "--root", str(tmp_path)]
    code, out, _ = _run(capsys, *base, "--both", "--dry-run")
    assert code == 0 and "would roll back to one" in out and f"write     {path}" in out
    assert path.read_text() == "first\nsecond\n"
    code, out, _ = _run(capsys, *base, "--both", "--json")
    report = json.loads(out)
    assert (report["turns_before"], report["turns_after"]) == (2, 1)
    assert [f["action"] for f in report["files"]] == ["write"]
    assert path.read_text() == "first\n"
    code, out, _ = _run(capsys, "show", session, "--store", store)
    assert "write the second line" in out and "and a third" not in out
    assert "budget: chat " in out and " of 128,000 (" in out and "compaction off" in out
    code, out, _ = _run(capsys, "checkpoints", session, "--store", store)
    assert "before-rollback" in out and "auto" in out
    # Writing outside the roots is refused, not done.
    code, out, _ = _run(
        capsys, "rollback", session, "--to", report["saved_as"], "--files", "--store", store,
        "--root", str(tmp_path / "elsewhere"),
    )  # fmt: skip
    assert code == 0 and "refused" in out and path.read_text() == "first\n"
    code, _, err = _run(capsys, "rollback", session, "--to", "nope", "--store", store)
    assert code == 2 and "no checkpoint 'nope'" in err


@pytest.mark.xtdb
def test_a_damaged_session_is_listed_with_its_error_and_hides_no_other(
    capsys: pytest.CaptureFixture[str], xtdb_node: XtdbNode
) -> None:
    store = f"xtdb://{xtdb_node.url.removeprefix('http://')}"
    good, damaged = f"cli-{uuid.uuid4().hex[:8]}", f"cli-{uuid.uuid4().hex[:8]}"
    assert _run(capsys, "replay", "--store", store, "--session", good)[0] == 0
    from selfctx.adapters.xtdb import open_store

    with contextlib.closing(open_store(xtdb_node.url)) as xtdb:
        session_doc = xtdb.get(f"session:{good}")
        assert session_doc is not None
        xtdb.commit(
            [
                {**session_doc, "xt/id": f"session:{damaged}", "session_id": damaged},
                {
                    "xt/id": f"log:{damaged}:000000001",
                    "type": "session_log",
                    "session_id": damaged,
                    "seq": 1,
                },
            ]
        )
    code, out, _ = _run(capsys, "sessions", "--store", store, "--json")
    rows = {r["session"]: r for r in json.loads(out)}
    assert code == 1
    assert rows[good]["turns"] == 1 and "error" not in rows[good]
    assert rows[damaged]["error"]["kind"] == "invalid_input"
    code, out, _ = _run(capsys, "sessions", "--store", store)
    assert code == 1 and f"{damaged} unreadable: invalid" in " ".join(out.split())
