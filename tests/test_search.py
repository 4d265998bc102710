"""Search over what sessions have seen (decision 0040), on both stores.

The index is a projection of the store's transaction log: every test here writes through the
service as a harness would, then searches, so the projection is exercised end to end.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from selfctx.adapters.memory import MemoryStore
from selfctx.adapters.search import SqliteSearchIndex
from selfctx.application.ports.search import SearchQuery
from selfctx.application.ports.store import Change, ObjectStore
from selfctx.application.service import ContextService
from selfctx.application.usecases.search import SearchHistory
from selfctx.domain.chat import ToolCallRequest
from selfctx.domain.errors import InvalidInput, SessionNotFound
from tests.conftest import MakeService
from tests.support import FakeFileReader, WrappedStore


def _session(service: ContextService, sid: str = "s1") -> None:
    service.start_session(sid, "You search.")


def _call(service: ContextService, sid: str, call_id: str, command: str, output: str) -> None:
    request = ToolCallRequest(call_id, "bash", {"command": command})
    service.record_assistant_message(sid, f"Running {command}", [request])
    service.record_tool_call(sid, call_id, tool="bash", args={"command": command}, output=output)


def test_substring_case_insensitive_role_filter_limit_and_empty_query(
    service: ContextService,
) -> None:
    """Seed 001's history search: case-insensitive substring, role filter, limit, and an empty
    query finds nothing."""
    _session(service)
    service.record_user_message("s1", "Please fix the ParseError in calc")
    service.record_assistant_message("s1", "I will look at the parser first.")
    service.record_user_message("s1", "thanks, and the tokenizer too")

    hits = service.search("parse", session_id="s1")
    assert {(h.role, h.turn) for h in hits} == {("user", 1), ("assistant", 1)}
    assert all(h.kind == "message" and h.object_id == "chat:s1" for h in hits)
    assert [h.role for h in service.search("PARSE", session_id="s1", role="user")] == ["user"]
    assert len(service.search("the", session_id="s1", limit=1)) == 1
    assert len(service.search("the", session_id="s1")) == 3
    assert service.search("", session_id="s1") == []
    assert service.search("   ", session_id="s1") == []
    assert service.search("nowhere-to-be-found", session_id="s1") == []


def test_every_term_must_match_and_quotes_keep_a_phrase(service: ContextService) -> None:
    _session(service)
    service.record_user_message("s1", "the parser fails on minus signs")
    service.record_user_message("s1", "signs of trouble in the lexer; minus one")
    both = service.search("minus signs", session_id="s1")
    assert [h.turn for h in sorted(both, key=lambda h: h.turn or 0)] == [1, 2]
    phrase = service.search('"minus signs"', session_id="s1")
    assert [h.turn for h in phrase] == [1]
    # Terms shorter than three characters still filter (they cannot use the trigram index).
    assert [h.turn for h in service.search("minus on", session_id="s1")] == [1, 2]
    assert [h.turn for h in service.search("of", session_id="s1")] == [2]


def test_ranking_prefers_more_and_title_matches(service: ContextService) -> None:
    _session(service)
    _call(service, "s1", "tc-1", "ls", "a.py b.py\nnothing about it here")
    _call(service, "s1", "tc-2", "cat notes", "overflow overflow overflow: the overflow again")
    _call(service, "s1", "tc-3", "grep overflow src", "src/x.c: no match")
    hits = service.search("overflow", session_id="s1", kind="toolcall")
    assert [h.object_id for h in hits][:2] in (["tc-2", "tc-3"], ["tc-3", "tc-2"])
    assert "tc-1" not in [h.object_id for h in hits]
    assert hits[0].score >= hits[1].score
    assert all(h.role == "tool" and h.session_id == "s1" for h in hits)
    assert "overflow" in hits[0].snippet.lower()


def test_a_tool_output_hit_activates_and_brings_the_output_back(service: ContextService) -> None:
    _session(service)
    _call(service, "s1", "tc-1", "pytest -q", "FAILED test_minus - assert 3 == -5\n1 failed")
    service.deactivate("s1", "tc-1")
    [hit] = service.search("assert 3 == -5", session_id="s1")
    assert (hit.object_id, hit.turn, hit.version, hit.latest) == ("tc-1", 0, 1, True)
    assert "FAILED test_minus" in hit.snippet
    assert service.activate("s1", hit.object_id).ok
    assert service.object("s1", hit.object_id).content == (
        "FAILED test_minus - assert 3 == -5\n1 failed"
    )


def test_a_session_never_finds_another_sessions_private_objects(
    service: ContextService, files: FakeFileReader
) -> None:
    """Messages and tool outputs are private to their session; file versions are shared, but a
    session finds only the files in its own index."""
    _session(service, "mine")
    _session(service, "theirs")
    service.record_user_message("theirs", "the secret word is zebra")
    _call(service, "theirs", "their-tc", "cat secret", "zebra stripes everywhere")
    files.write("/w/theirs.txt", "zebra in a file only they read")
    service.index_file("theirs", "/w/theirs.txt")
    files.write("/w/shared.txt", "zebra crossing")
    service.index_file("theirs", "/w/shared.txt")

    assert service.search("zebra", session_id="mine") == []
    service.index_file("mine", "/w/shared.txt")
    [hit] = service.search("zebra", session_id="mine")
    assert (hit.kind, hit.title, hit.session_id) == ("file", "/w/shared.txt", None)
    # Everything, from the operator's side (no session).
    kinds = sorted((h.kind, h.session_id) for h in service.search("zebra"))
    assert kinds == [
        ("file", None),
        ("file", None),
        ("message", "theirs"),
        ("toolcall", "theirs"),
    ]
    # Discovery (a stub) puts a file in the index too: its later versions become findable.
    files.write("/w/listed.txt", "zebra listed")
    service.discover("mine", ["/w/listed.txt"])
    service.index_file("theirs", "/w/listed.txt")
    assert {h.title for h in service.search("zebra", session_id="mine")} == {
        "/w/shared.txt",
        "/w/listed.txt",
    }


def test_file_versions_are_searched_and_say_whether_they_are_the_latest(
    service: ContextService, files: FakeFileReader
) -> None:
    _session(service)
    files.write("/w/calc.py", "def evaluate(expr):\n    return left_fold(expr)\n")
    service.index_file("s1", "/w/calc.py")
    files.write("/w/calc.py", "def evaluate(expr):\n    return right_assoc(expr)\n")
    report = service.rehash("s1")  # what a watcher would have written
    assert report.updated

    [old] = service.search("left_fold", session_id="s1")
    assert (old.kind, old.version, old.latest) == ("file", 1, False)
    [new] = service.search("right_assoc", session_id="s1")
    assert (new.version, new.latest) == (2, True)
    # One hit per file: its best-ranked version.
    assert len(service.search("def evaluate", session_id="s1")) == 1
    # The path is searched too (the title).
    assert [h.title for h in service.search("calc.py", session_id="s1")] == ["/w/calc.py"]
    files.delete("/w/calc.py")
    service.rehash("s1")
    [gone] = service.search("right_assoc", session_id="s1")
    assert (gone.version, gone.latest) == (2, False)


def test_another_client_builds_the_same_index_from_the_store(
    make_service: MakeService, store: WrappedStore, files: FakeFileReader
) -> None:
    """The projection is the store's: a second service (another machine, say) on the same store
    finds what the first committed, with the same ranking, and catches up incrementally."""
    first = make_service()
    _session(first)
    _call(first, "s1", "tc-1", "make test", "error: undefined reference to `lexer_next'")
    first.record_user_message("s1", "the lexer again")
    second = make_service()
    assert second.search("lexer", session_id="s1") == first.search("lexer", session_id="s1")
    first.record_user_message("s1", "and the lexer once more")
    hits = second.search("lexer", session_id="s1")
    assert len(hits) == 3
    assert hits == first.search("lexer", session_id="s1")


def test_an_index_on_disk_catches_up_and_is_rebuilt_for_another_store(
    tmp_path: Path, make_service: MakeService, store: WrappedStore
) -> None:
    path = str(tmp_path / "search.sqlite")
    service = make_service()
    _session(service)
    service.record_user_message("s1", "persisted words: quokka")
    Path(path).write_bytes(b"")
    Path(path).chmod(0o644)  # an index written before files were kept private
    index = SqliteSearchIndex(path)
    assert SearchHistory(store, index)(SearchQuery("quokka"))[0].turn == 1
    for written in (path, path + "-wal", path + "-shm"):  # the owner's alone
        assert Path(written).stat().st_mode & 0o777 == 0o600, written
    index.close()
    service.record_user_message("s1", "more quokka")
    reopened = SqliteSearchIndex(path)
    history = SearchHistory(store, reopened)
    assert history.catch_up() >= 1  # only what came after: the rest is on disk
    assert [h.turn for h in history(SearchQuery("quokka", session_id="s1"))] in ([1, 2], [2, 1])
    reopened.close()
    # The same file against a store that never held those transactions starts again.
    other = WrappedStore(MemoryStore())
    elsewhere = SqliteSearchIndex(path)
    assert SearchHistory(other, elsewhere)(SearchQuery("quokka")) == []
    assert elsewhere.count() == 0
    elsewhere.close()


def test_closing_stops_a_catch_up_running_on_another_thread_after_its_page(
    tmp_path: Path, make_service: MakeService
) -> None:
    """The inspector catches the index up on a thread of its own; a proxy stopping meanwhile
    closes the index: the catch-up ends after the page it holds, without touching the closed
    database (and without an error logged as a failure)."""
    service = make_service()
    _session(service)
    for n in range(6):
        service.record_user_message("s1", f"words of turn {n}: quokka")
    store = _PausingStore(service.store)
    index = SqliteSearchIndex(str(tmp_path / "search.sqlite"))
    history = SearchHistory(store, index, page=1)
    outcome: list[object] = []
    worker = threading.Thread(target=lambda: outcome.append(_caught(history)))
    worker.start()
    assert store.reading.wait(30)  # the catch-up is inside its first page
    closer = threading.Thread(target=history.close)
    closer.start()
    closer.join(0.2)
    assert closer.is_alive()  # the close waits for the page being taken in
    store.go.set()
    worker.join(30)
    closer.join(30)
    assert not worker.is_alive() and not closer.is_alive()
    assert outcome == [1]  # the page it held, and no more
    assert history.catch_up() == 0


class _PausingStore(WrappedStore):
    """Holds the first ``changes`` read until ``go`` is set."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.reading = threading.Event()
        self.go = threading.Event()

    def changes(self, after_tx_id: int | None = None, limit: int = 500) -> list[Change]:
        if not self.reading.is_set():
            self.reading.set()
            self.go.wait(30)
        return super().changes(after_tx_id, limit)


def _caught(history: SearchHistory) -> object:
    try:
        return history.catch_up()
    except Exception as exc:  # what the old close left: a closed database mid-catch-up
        return exc


@pytest.mark.parametrize(
    ("kwargs", "what"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 10_000}, "limit"),
        ({"role": "system"}, "role"),
        ({"kind": "chat"}, "type"),
    ],
)
def test_bad_queries_are_refused_by_name(
    service: ContextService, kwargs: dict[str, object], what: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        service.search("x", **kwargs)  # type: ignore[arg-type]
    assert caught.value.what == what


def test_an_overlong_query_and_an_unknown_session_are_refused(service: ContextService) -> None:
    with pytest.raises(InvalidInput):
        service.search("x" * 1001)
    _session(service)
    service.record_user_message("s1", "hello world")
    for query in ("hel\x00lo", "\x00", "hello\x00"):  # SQLite would cut the query at NUL
        with pytest.raises(InvalidInput, match="NUL") as caught:
            service.search(query, session_id="s1")
        assert caught.value.kind == "invalid_input"
    with pytest.raises(SessionNotFound):
        service.search("x", session_id="nobody")
    with pytest.raises(InvalidInput):
        service.search("x", session_id="bad id!")


def test_the_models_search_tool_names_what_activate_brings_back(
    make_service: MakeService, files: FakeFileReader
) -> None:
    """The ``search`` context tool: under the inline layout each hit is named by its handle,
    which ``activate`` takes; refusals are answers, not exceptions."""
    from selfctx.adapters.harness import HarnessSession
    from selfctx.application.policies import policy_by_name

    service = make_service()
    harness = HarnessSession(service, "s1", policy=policy_by_name("inline"))
    files.write("/w/lexer.c", "int lexer_next(void) { return TOKEN_EOF; }\n")
    service.index_file("s1", "/w/lexer.c")
    _call(service, "s1", "tc-1", "make", "undefined reference to `lexer_next'")
    service.record_user_message("s1", "why does lexer_next fail to link?")

    answer = harness.handle("search", {"query": "lexer_next"})
    assert answer.ok
    lines = answer.message.splitlines()
    assert lines[0] == "3 result(s) for 'lexer_next', best first:"
    assert any(line.startswith("- #1 file /w/lexer.c:") for line in lines)
    assert any(line.startswith("- #2 output of bash") for line in lines)
    assert any(line.startswith("- turn 1 user: why does lexer_next") for line in lines)
    assert harness.handle("activate", {"id": "#2"}).message.endswith(
        "undefined reference to `lexer_next'"
    )
    only_files = harness.handle("search", {"query": "lexer_next", "type": "file"})
    assert only_files.message.count("\n- ") == 1
    assert not harness.handle("search", {}).ok
    assert not harness.handle("search", {"query": "x", "limit": 0}).ok
    refused = harness.handle("search", {"query": "x", "role": "root"})
    assert not refused.ok and "role" in refused.message
    assert harness.handle("search", {"query": "absent-text"}).message.startswith("nothing")


def test_a_query_matching_more_than_the_window_ranks_its_newest_matches(
    service: ContextService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Decision 0040's bound on scoring: beyond RANK_WINDOW matches, only the newest are
    ranked (here the window is 3, and the best match is the oldest)."""
    import selfctx.adapters.search.sqlite as sqlite_index

    _session(service)
    service.record_user_message("s1", "needle needle needle needle")
    for n in range(4):
        service.record_user_message("s1", f"needle in a long haystack of words {n}")
    assert service.search("needle", session_id="s1", limit=1)[0].turn == 1
    monkeypatch.setattr(sqlite_index, "RANK_WINDOW", 3)
    hits = service.search("needle", session_id="s1")
    assert sorted(h.turn or 0 for h in hits) == [3, 4, 5]


def test_bench_search_runs_on_the_standard_library_alone(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``selfctx bench search --json`` on a clone alone: no trajectories, the standard library's
    files only (a small corpus here; the figures are in docs/benchmarks.md)."""
    import json

    from selfctx.adapters.cli.main import main

    monkeypatch.setenv("SELFCTX_TRAJECTORIES", str(tmp_path))
    code = main(["bench", "search", "--objects", "300", "--queries", "20", "--json"])
    out = capsys.readouterr().out
    assert code == 0
    result = json.loads(out)
    assert result["objects"] >= 300 and result["trajectories"] == 0
    assert result["index_per_s"] > 0
    assert 0 < result["query_ms"]["p50"] <= result["query_ms"]["p95"]
    assert result["mean_hits"] > 0  # queries are drawn from the corpus: they find something


def test_text_with_lone_surrogates_is_indexed_and_found(service: ContextService) -> None:
    """A lone surrogate (which some tool outputs hold) has no UTF-8 form: the index keeps it as
    U+FFFD (the project's hash rule for text, decision 0029), and the rest stays searchable.
    (The suite's first run of the CLI search over a shared node met such a document.)"""
    _session(service)
    _call(service, "s1", "tc-sur", "cat odd", "before \ud800 after: wombat")
    [hit] = service.search("wombat", session_id="s1")
    assert hit.object_id == "tc-sur" and "before \ufffd after" in hit.snippet
    # A query holding one is read by the same rule.
    assert [h.object_id for h in service.search("\ud800 after", session_id="s1")] == ["tc-sur"]


def test_a_damaged_log_entry_of_another_session_leaves_search_working(
    make_service: MakeService, store: WrappedStore
) -> None:
    """Entries no version of this project wrote (no list of events, events that are not
    objects, a message that is not one) index nothing; every other session is still found.
    (Session-log entries only: other tests on the shared XTDB node read every file document.)"""
    store.commit(
        [
            {"xt/id": "log:damaged:1", "type": "session_log", "session_id": "damaged", "seq": 1},
            {
                "xt/id": "log:damaged:2",
                "type": "session_log",
                "session_id": "damaged",
                "seq": 2,
                "events": {
                    "list": [
                        "not an event",
                        {"event": "AssistantMessageRecorded", "message": "not a message"},
                        {
                            "event": "AssistantMessageRecorded",
                            "message": {"text": "lexer", "tool_calls": "none"},
                        },
                    ]
                },
            },
        ]
    )
    service = make_service()
    _session(service)
    service.record_user_message("s1", "the lexer again")
    hits = service.search("lexer", session_id="s1")
    assert [(h.session_id, h.role) for h in hits] == [("s1", "user")]
