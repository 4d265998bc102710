"""What the inspector reads of a session's log: the marks on each request (collapses with their
rule, the agent's activations, compactions, checkpoints, rollbacks), when each object was met,
the requests it was shown in full, and states rebuilt at any position equal the store's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.memory import MemoryStore
from selfctx.adapters.ui.history import STATE_EVERY, Sessions
from selfctx.application.policies import policy_by_name
from selfctx.application.requests import MAX_GAP, RequestFacts
from selfctx.domain.chat import ToolCallRequest


def test_marks_spans_and_states(tmp_path: Path) -> None:
    service = build_service(store=MemoryStore(), workspace=str(tmp_path))
    sid = "marks"
    policy = policy_by_name("inline", verbatim_window_tokens=50, min_verbatim_exchanges=1)
    service.start_session(sid, "You are careful.", policy=policy)

    def call(n: int) -> str:
        request = ToolCallRequest(f"call_{n}", "bash", {"command": f"step {n}"})
        service.record_assistant_message(sid, f"Step {n}.", (request,))
        return service.record_tool_call(
            sid, f"call_{n}", tool="bash", args={"command": f"step {n}"}, output=f"out {n}\n" * 50
        )

    def send() -> int:
        facts = RequestFacts(api="openai", naive_tokens=100)
        return service.record_request(sid, service.assemble(sid), facts).n

    service.record_user_message(sid, "Fix it.")
    first = call(1)
    assert send() == 1
    service.checkpoint(sid, "before")
    service.deactivate(sid, first)
    service.activate(sid, first)
    call(2)
    assert send() == 2
    for turn in range(3):
        service.record_user_message(sid, f"Now part {turn}, with a long request " + "x " * 300)
        call(10 + turn)
    assert service.compact(sid) is not None
    assert send() == 3
    service.rollback(sid, "before")
    assert send() == 4

    history = Sessions(service).get(sid)
    kinds = [{m.kind for m in marks} for marks in history.markers_by_request()]
    assert kinds[0] == set()
    assert kinds[1] == {"checkpoint", "collapse", "activation"}
    assert "compaction" in kinds[2]
    assert {"rollback", "checkpoint"} <= kinds[3]
    texts = [m.text for m in history.markers_by_request()[1]]
    assert "collapsed #1 (agent)" in texts and "activated #1" in texts
    # the marks came from the records, without the log; the log says the same
    assert not history.seqs and all(r.marks is not None for r in history.records)
    from_log = Sessions(service).get(sid).log().markers_by_request()
    assert from_log == history.markers_by_request()
    for n in range(1, 5):
        seq = history.record(n).seq
        summarised = history.collapse_before(first, seq)
        assert summarised == Sessions(service).get(sid).log().collapse_before(first, seq)
    assert history.collapse_before(first, history.record(2).seq) is not None
    history.log()
    # the first output: met before request 1, shown in full in every request until the rollback
    assert history.request_at(history.first_seen[first]) == 1
    assert history.requests_between(history.spans[first])[0][0] == 1
    assert history.label(first) == "#1"
    # a tool call's first request, from its transaction alone (the search page's way) or the log
    kind_of = service.state(sid).kinds
    calls = [i for i in history.first_seen if kind_of.get(i) == "toolcall"]
    assert len(calls) >= 4
    for object_id in calls:
        tx = service.history(object_id)[0].tx_id
        assert history.request_after_tx(tx) == history.request_at(history.first_seen[object_id])
    # any position's state, folded from one kept or rebuilt from snapshots, is the store's
    for seq in [*reversed(history.seqs), *history.seqs]:
        assert history.state_at(seq) == service.state_at(sid, seq).state, seq
    assert STATE_EVERY >= 1


def test_a_record_marks_what_happened_before_its_session_was_opened(tmp_path: Path) -> None:
    """A session opened after its last record (another process, a restart) still records the
    marks of the entries in between: they are read back by id; past ``MAX_GAP`` entries the
    record says it has none, and the timeline reads them from the log."""
    store = MemoryStore()
    first = build_service(store=store, workspace=str(tmp_path))
    sid = "reopened"
    first.start_session(sid, "You are careful.", policy=policy_by_name("inline"))
    output = first.record_tool_call(sid, "call_1", tool="bash", args={}, output="out\n" * 20)
    assert first.record_request(sid, first.assemble(sid)).marks == ()
    first.deactivate(sid, output)  # after the record, in the first process
    first.close()

    second = build_service(store=store, workspace=str(tmp_path))
    second.resume_session(sid)
    second.activate(sid, output)
    record = second.record_request(sid, second.assemble(sid))
    assert record.marks is not None
    assert [m.event for m in record.marks] == ["ObjectDeactivated", "ObjectActivated"]
    assert record.marks[0].fields["by"] == "agent" and record.marks[0].fields["name"] == "#1"
    history = Sessions(second).get(sid)
    texts = [m.text for m in history.markers_by_request()[1]]
    assert texts == ["collapsed #1 (agent)", "activated #1"]
    assert not history.seqs  # the log was not read for them
    second.close()

    third = build_service(store=store, workspace=str(tmp_path))
    third.resume_session(sid)
    for _ in range(MAX_GAP // 2 + 1):  # more than MAX_GAP entries, none recorded
        third.deactivate(sid, output)
        third.activate(sid, output)
    third.close()
    fourth = build_service(store=store, workspace=str(tmp_path))
    fourth.resume_session(sid)  # folds the entries after its snapshot: their marks are kept
    record = fourth.record_request(sid, fourth.assemble(sid))
    from_log = Sessions(fourth).get(sid).log().markers_by_request()
    assert len(from_log[2]) == 2 * (MAX_GAP // 2 + 1)
    assert record.marks is None or Sessions(fourth).get(sid).markers_by_request() == from_log
    fourth.close()


def test_a_gap_too_long_to_read_leaves_the_marks_to_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("selfctx.application.usecases.requests.MAX_GAP", 0)
    store = MemoryStore()
    first = build_service(store=store, workspace=str(tmp_path))
    sid = "gap"
    first.start_session(sid, "You are careful.", policy=policy_by_name("inline"))
    output = first.record_tool_call(sid, "call_1", tool="bash", args={}, output="out\n" * 20)
    first.record_request(sid, first.assemble(sid))
    for _ in range(20):  # enough entries for a snapshot after the record
        first.deactivate(sid, output)
        first.activate(sid, output)
    first.deactivate(sid, output)
    first.close()
    second = build_service(store=store, workspace=str(tmp_path))
    second.resume_session(sid)
    session = second._sessions[sid]
    assert session.marks_from > second.requests(sid)[-1].seq  # a snapshot after the record
    assert second.record_request(sid, second.assemble(sid)).marks is None
    history = Sessions(second).get(sid)
    texts = [m.text for m in history.markers_by_request()[1]]
    assert texts == ["collapsed #1 (agent)", "activated #1"] * 20 + ["collapsed #1 (agent)"]
    assert history.seqs  # read from the log


class _WaitingStore(MemoryStore):
    """The in-memory store, said to wait on its reads as a database server's client does: the
    inspector then reads beside what it waits for (on threads), as it does on XTDB."""

    reads_wait = True


def _bench_session(
    tmp_path: Path, requests: int = 80, *, waits: bool = False
) -> tuple[MemoryStore, Path]:
    from selfctx.adapters.bench.ui import build_session

    store = _WaitingStore() if waits else MemoryStore()
    work = tmp_path / "work"
    work.mkdir()
    writer = build_service(store=store, workspace=str(work))
    try:
        build_session(writer, work, requests, 8 * requests, lambda _: None)
    finally:
        writer.close()
    return store, work


def test_a_request_is_shown_with_the_lines_it_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each record keeps the collapsed lines it sent anew (the first all of them); a request's
    page shows them as recorded and reads no file only they name, and the context is the one
    the store rebuilds (``selfctx show --at``) and was sent (the recorded digest)."""
    from selfctx.adapters.bench.ui import SESSION
    from selfctx.adapters.ui import views
    from selfctx.adapters.ui.history import SessionHistory
    from selfctx.application.requests import context_digest

    store, work = _bench_session(tmp_path, waits=True)
    reader = build_service(store=store, workspace=str(work))
    renders: list[bool] = []
    render = SessionHistory._render

    def spy(
        self: SessionHistory, state: object, seq: int, tx: int, lines: object, **kw: bool
    ) -> object:
        renders.append(lines is not None)
        return render(self, state, seq, tx, lines, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(SessionHistory, "_render", spy)
    sessions = Sessions(reader)
    history = sessions.get(SESSION)
    records = history.records
    assert records[0].lines is not None and records[0].lines.complete
    assert all(r.lines is not None and not r.lines.complete for r in records[1:])
    collapsed = 0
    chosen = (records[-1], *records[::7])
    for record in chosen:
        record = history.record(record.n)
        past = history.past(record.seq, record.tx_id, record.n)
        assert context_digest(past.context) == record.digest
        rebuilt = reader.context_at(SESSION, record.seq, tx_id=record.tx_id)
        assert past.context == rebuilt
        lines = history.lines_of(record.n)
        assert lines is not None
        shown = {m.toolcall_id: m.text for m in rebuilt.chat if m.toolcall_id in lines}
        assert shown == {i: x.text for i, x in lines.items() if i in shown}
        collapsed = max(collapsed, len(shown))
        # the page (sizes, reasons, working set, active and pinned) is the one rebuilt whole
        lean = views.request_view(reader, sessions, SESSION, n=record.n, seq=None)
        with monkeypatch.context() as whole:
            whole.setattr(SessionHistory, "lines_of", lambda *_: None)
            full = views.request_view(reader, Sessions(reader), SESSION, n=record.n, seq=None)
        assert lean.identical and full.identical
        assert lean.items == full.items and lean.working_set == full.working_set
        assert (lean.active, lean.pinned) == (full.active, full.pinned)
        assert all(i.size for i in lean.items if i.state == "collapsed")
    assert collapsed > 10
    assert renders == [True, False] * len(chosen)  # shown as recorded, never rebuilt whole
    # files that only collapsed lines name were not read
    fresh = Sessions(reader).get(SESSION)
    last = fresh.record(len(records))
    fresh.past(last.seq, last.tx_id, last.n)
    state = reader.state_at(SESSION, last.seq).state
    files = [i for i in state.index if state.kinds[i] == "file"]
    assert len([i for i in files if i in fresh._objects]) < len(files) / 2
    reader.close()


def test_a_line_that_is_not_what_was_sent_rebuilds_the_prompt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import attrs

    from selfctx.adapters.bench.ui import SESSION
    from selfctx.application.requests import PromptLines, context_digest

    store, work = _bench_session(tmp_path, 40)
    reader = build_service(store=store, workspace=str(work))
    history = Sessions(reader).get(SESSION)
    last = history.record(len(history.records))
    lines = history.lines_of(last.n)
    assert lines
    wrong = PromptLines(False, tuple(attrs.evolve(x, text=x.text + " ") for x in lines.values()))
    history.records[-1] = attrs.evolve(last, lines=wrong)
    past = history.past(last.seq, last.tx_id, last.n)
    assert context_digest(past.context) == last.digest
    assert past.context == reader.context_at(SESSION, last.seq, tx_id=last.tx_id)
    reader.close()


def test_records_written_without_lines_still_show_their_prompts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session recorded before records kept lines (none of its records holds any, or its
    later ones do but none is complete) is rebuilt whole, as before."""
    from selfctx.adapters.bench.ui import SESSION
    from selfctx.adapters.ui import views
    from selfctx.application.requests import RequestMeter

    collect = RequestMeter._collect_lines

    def old(self: RequestMeter, *args: object) -> None:
        collect(self, *args)  # type: ignore[arg-type]
        self.lines = None  # as a record written before lines existed: no key at all

    monkeypatch.setattr(RequestMeter, "_collect_lines", old)
    store, work = _bench_session(tmp_path, 40)
    monkeypatch.undo()
    stored = store.get(f"requests:{SESSION}")
    assert stored is not None and stored["record"]["lines"] is None
    later = build_service(store=store, workspace=str(work))
    later.resume_session(SESSION)
    for _ in range(2):  # the same session continued after an upgrade: its records keep lines
        later.record_request(SESSION, later.assemble(SESSION))
    later.close()
    reader = build_service(store=store, workspace=str(work))
    sessions = Sessions(reader)
    history = sessions.get(SESSION)
    assert history.records[0].lines is None and history.records[-1].lines is not None
    for n in (1, 20, len(history.records) - 2, len(history.records)):
        view = views.request_view(reader, sessions, SESSION, n=n, seq=None)
        assert view.identical, n
    assert history.lines_of(len(history.records)) is not None  # the first after: complete
    assert history.lines_of(len(history.records) - 2) is None
    reader.close()


def test_the_sessions_that_met_an_object_come_from_the_index_as_from_the_logs(
    tmp_path: Path,
) -> None:
    """The search index keeps when each session met an object and where it was active, so an
    object's page reads no log; it says what the logs say."""
    from selfctx.adapters.bench.ui import SESSION
    from selfctx.adapters.ui import views

    store, work = _bench_session(tmp_path, 60)
    reader = build_service(store=store, workspace=str(work))
    state = reader.state_at(SESSION, reader.requests(SESSION)[-1].seq).state
    files = [i for i in state.index if state.kinds[i] == "file"]
    wanted = [*files[:3], *files[-3:], *(i for i in state.index if state.kinds[i] == "toolcall")]
    indexed = Sessions(reader)
    for object_id in wanted:
        seen = views.met_view(reader, indexed, object_id).sessions
        from_log = Sessions(reader)
        history = from_log.get(SESSION).log()
        assert history.first_seen.get(object_id) is not None
        encounter = {e.session_id: e for e in reader.encounters(object_id) or ()}.get(SESSION)
        assert encounter is not None and encounter.first_seq == history.first_seen[object_id]
        spans = [tuple(s) for s in history.spans.get(object_id, ())]
        assert list(encounter.spans) == spans
        if state.kinds[object_id] == "file":
            assert seen and seen[0].first_seq == encounter.first_seq
            assert list(seen[0].active) == history.requests_between(spans)
    assert any(e.spans for i in wanted for e in reader.encounters(i) or ())
    assert not indexed.get(SESSION).seqs  # the page read no log
    reader.close()


def _every_position_as_rebuilt(service: object, session_id: str) -> int:
    """Each log position's context from a fresh inspector history (the records' lines where
    they say it) is the context the store rebuilds whole; how many took lines."""
    from selfctx.adapters.ui.history import SessionHistory
    from selfctx.application.service import ContextService

    assert isinstance(service, ContextService)
    took = 0
    last = Sessions(service).get(session_id).log().last_seq
    for seq in range(1, last + 1):
        history = Sessions(service).get(session_id, seq=seq)
        lines, _ = SessionHistory.lines_at(history, seq)
        took += lines is not None
        past = history.past(seq, None, None)
        assert past.context == service.context_at(session_id, seq), seq
    return took


@pytest.mark.parametrize("waits", [False, True])
def test_a_log_position_shows_the_lines_the_requests_recorded(tmp_path: Path, waits: bool) -> None:
    """Between two requests the earlier one's lines are shown, but those the later one sent
    anew and those of outputs collapsed or activated on the way, which are rendered again: at
    every position of a session the context is the one the store rebuilds whole."""
    from selfctx.adapters.bench.ui import SESSION

    store, work = _bench_session(tmp_path, 40, waits=waits)
    reader = build_service(store=store, workspace=str(work))
    assert _every_position_as_rebuilt(reader, SESSION) > 100
    reader.close()


@pytest.mark.parametrize("waits", [False, True])
def test_a_log_position_after_collapses_compaction_and_rollback(
    tmp_path: Path, waits: bool
) -> None:
    service = build_service(
        store=_WaitingStore() if waits else MemoryStore(), workspace=str(tmp_path)
    )
    sid = "positions"
    policy = policy_by_name("inline", verbatim_window_tokens=50, min_verbatim_exchanges=1)
    service.start_session(sid, "You are careful.", policy=policy)
    calls: list[str] = []

    def call(n: int) -> None:
        request = ToolCallRequest(f"call_{n}", "bash", {"command": f"step {n}"})
        service.record_assistant_message(sid, f"Step {n}.", (request,))
        calls.append(
            service.record_tool_call(
                sid, f"call_{n}", tool="bash", args={"command": f"s {n}"}, output=f"o {n}\n" * 50
            )
        )

    def send() -> None:
        service.record_request(sid, service.assemble(sid), RequestFacts(api="openai"))

    service.record_user_message(sid, "Fix it.")
    for n in range(1, 6):
        call(n)
        send()
    service.checkpoint(sid, "before")
    service.activate(sid, calls[0])
    service.deactivate(sid, calls[0])
    service.activate(sid, calls[1])
    call(6)
    send()
    service.deactivate(sid, calls[1])
    service.pin(sid, calls[2])
    send()
    for turn in range(3):
        service.record_user_message(sid, f"Now part {turn}, with a long request " + "x " * 300)
        call(10 + turn)
        send()
    assert service.compact(sid) is not None
    call(20)
    send()
    service.rollback(sid, "before")
    call(21)
    send()
    assert _every_position_as_rebuilt(service, sid) > 10


def test_a_position_the_session_does_not_have_reads_no_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page rebuilds its state while the records are read, before it knows the session's
    length: a position past the log is refused without reading the session's snapshots."""
    import threading

    from selfctx.adapters.bench.ui import SESSION
    from selfctx.adapters.ui import views
    from selfctx.domain.errors import InvalidInput

    store, work = _bench_session(tmp_path, 20, waits=True)
    reader = build_service(store=store, workspace=str(work))
    asked: list[str] = []
    history = MemoryStore.history

    def spy(self: MemoryStore, object_id: str) -> object:
        asked.append(object_id)
        return history(self, object_id)

    monkeypatch.setattr(MemoryStore, "history", spy)
    before = set(threading.enumerate())
    with pytest.raises(InvalidInput):
        views.request_view(reader, Sessions(reader), SESSION, n=None, seq=10**9)
    for thread in set(threading.enumerate()) - before:
        thread.join(10)
    assert not [i for i in asked if not i.startswith(("requests:", "log:"))]
    reader.close()


def test_a_past_state_names_its_tool_calls_before_it_is_built(tmp_path: Path) -> None:
    """On a store that waits on its reads, ``state_at(on_toolcalls=)`` hands over the
    snapshot's tool calls before its state is built (before ``on_snapshot``), then those the
    log entries after it record: every tool call of the state, and the same state as without."""
    from selfctx.adapters.bench.ui import SESSION

    store, work = _bench_session(tmp_path, 30, waits=True)
    reader = build_service(store=store, workspace=str(work))
    calls: list[tuple[str, tuple[str, ...]]] = []
    checked = hooked = 0
    for seq in range(3, 60, 4):
        calls.clear()
        past = reader.state_at(
            SESSION,
            seq,
            on_snapshot=lambda s: calls.append(("snapshot", tuple(s.index))),
            on_toolcalls=lambda ids: calls.append(("calls", tuple(ids))),
        )
        plain = reader.state_at(SESSION, seq)
        assert past.state == plain.state and past.tx_id == plain.tx_id
        if not calls:
            continue  # no snapshot in force at that entry: the slower path calls neither
        assert calls[0][0] == "calls" and calls[1][0] == "snapshot"
        snapshot = set(calls[1][1])
        named = [i for kind, ids in calls if kind == "calls" for i in ids]
        kinds = past.state.kinds
        toolcalls = {i for i in past.state.index if kinds[i] == "toolcall"}
        assert toolcalls <= set(named) and set(calls[0][1]) <= snapshot
        hooked += 1
        checked += len(calls) > 2  # entries after the snapshot recorded tool calls
    assert hooked > 8 and checked > 3
    reader.close()


def test_a_page_reads_each_object_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A request's page and a log position's page, cold, on a store that waits on its reads:
    the tool calls read ahead (as soon as the snapshot is read) are not read again."""
    import threading
    from collections import Counter

    from selfctx.adapters.bench.ui import SESSION
    from selfctx.adapters.ui import views

    store, work = _bench_session(tmp_path, 30, waits=True)
    reader = build_service(store=store, workspace=str(work))
    asked: Counter[str] = Counter()
    get_many = _WaitingStore.get_many

    def spy(self: _WaitingStore, ids: list[str]) -> object:
        asked.update(ids)
        return get_many(self, ids)

    monkeypatch.setattr(_WaitingStore, "get_many", spy)
    for n, seq in ((30, None), (15, None), (None, 31), (None, 7)):
        asked.clear()
        before = set(threading.enumerate())
        view = views.request_view(reader, Sessions(reader), SESSION, n=n, seq=seq)
        for thread in set(threading.enumerate()) - before:  # reads ahead that came late too
            thread.join(10)
        assert view.items
        # Log documents aside: a position inside a document of several entries is found by
        # reading the documents before it, by each of the page's reads (decision 0134).
        again = [i for i, k in asked.items() if k > 1 and not i.startswith("log:")]
        assert asked and again == [], (n, seq)
        assert any(i.startswith("tc_") for i in asked)
    reader.close()


@pytest.mark.parametrize("waits", [False, True])
def test_a_page_names_a_states_files_and_chains_its_lines_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, waits: bool
) -> None:
    """A cold request page looks for the files a state names once per state (the thread
    reading ahead and the page share the look at the page's state) and walks its records'
    lines once (the page and its view ask for them both), and shows what it showed with every
    look made (decision 0103)."""
    from collections import Counter

    from selfctx.adapters.bench.ui import SESSION
    from selfctx.adapters.ui import history, pages, views

    store, work = _bench_session(tmp_path, 30, waits=waits)
    reader = build_service(store=store, workspace=str(work))
    looks: Counter[str] = Counter()
    states: list[int] = []
    named, chain = history._files_named, history.SessionHistory._lines_chain

    def counted_named(state: Any, *args: Any, **kwargs: Any) -> list[str]:
        states.append(id(state))
        return named(state, *args, **kwargs)

    def counted_chain(records: Any, n: int) -> Any:
        looks["chain"] += 1
        return chain(records, n)

    shown = {}
    for n in (30, 15):
        shown[n] = pages.request_page(
            "", views.request_view(reader, Sessions(reader), SESSION, n=n, seq=None)
        )
    monkeypatch.setattr(history, "_files_named", counted_named)
    monkeypatch.setattr(history.SessionHistory, "_lines_chain", staticmethod(counted_chain))
    for n in (30, 15):
        looks.clear()
        states.clear()
        sessions = Sessions(reader)
        page = pages.request_page("", views.request_view(reader, sessions, SESSION, n=n, seq=None))
        assert page == shown[n]
        assert states and len(set(states)) == len(states), (n, len(states))
        assert looks == {"chain": 1}, (n, looks)
        history_ = sessions.get(SESSION)
        lines = history_.lines_of(n)
        assert lines is not None and lines == history_.lines_of(n)
        lines.clear()  # a copy: what the history keeps is not changed by its reader
        assert history_.lines_of(n) and looks["chain"] == 1
    reader.close()


@pytest.mark.parametrize("waits", [False, True])
def test_a_request_page_reads_the_tool_calls_it_shows_by_more_than_a_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, waits: bool
) -> None:
    """A cold request page whose records keep its collapsed lines reads the tool calls it shows
    by more than their line (the active and pinned ones, those the working set looks at), not
    every tool call of the session, threads reading ahead included; what it shows is what it
    shows with every tool call read, byte for byte, and the prompt is the one sent (its active
    files' blocks decided by the recorded digest: decision 0115)."""
    import threading

    from selfctx.adapters.bench.ui import SESSION
    from selfctx.adapters.ui import history as history_module
    from selfctx.adapters.ui import pages, views
    from selfctx.application.requests import context_digests as digests

    store, work = _bench_session(tmp_path, 120, waits=waits)
    reader = build_service(store=store, workspace=str(work))
    asked: set[str] = set()
    chosen: list[bool] = []

    def choose(context: Any, actives: Any) -> list[str]:
        found = digests(context, actives)
        chosen.append(len(found) > 1 and found[0] != found[1])
        return found

    monkeypatch.setattr(history_module, "context_digests", choose)
    store_type = type(store)
    get_many = store_type.get_many

    def spy(self: MemoryStore, ids: Any) -> Any:
        ids = list(ids)
        asked.update(i for i in ids if i.startswith("tc_"))
        return get_many(self, ids)

    monkeypatch.setattr(store_type, "get_many", spy)
    records = Sessions(reader).get(SESSION).records
    for n in (len(records), len(records) - 20, len(records) // 2):
        asked.clear()
        before = set(threading.enumerate())
        view = views.request_view(reader, Sessions(reader), SESSION, n=n, seq=None)
        for thread in set(threading.enumerate()) - before:
            thread.join(10)
        read = set(asked)
        with monkeypatch.context() as every:  # the page with every tool call read
            every.setattr(history_module, "_calls_shown", lambda s, _: list(s.index))
            whole = views.request_view(reader, Sessions(reader), SESSION, n=n, seq=None)
        assert view.identical and whole.identical, n
        assert pages.request_page("", view) == pages.request_page("", whole), n
        shown = Sessions(reader).get(SESSION).past(records[n - 1].seq, None, n).state
        calls = [i for i in shown.index if shown.kinds[i] == "toolcall"]
        full = {i for i in calls if i in shown.active or i in shown.pinned}
        # those shown in full and the recent messages' (of the page's state and, read ahead,
        # of the snapshot it was rebuilt from): not every one of the state's
        bound = 2 * (len(full) + shown.policy.recent_messages)
        assert full <= read and len(read) <= bound, (n, len(read), bound)
        assert len(read) < len(calls), (n, len(read), len(calls))
    # active files that no tool call it read viewed showed as blocks, and the recorded digest
    # took them out (reading ahead, the snapshot's recent calls happen to name them all)
    assert any(chosen) or waits
    reader.close()


def test_a_log_position_does_not_take_a_request_pages_partial_context(tmp_path: Path) -> None:
    """A context kept from a request's page holds only the tool calls that page shows by more
    than their line (decision 0115); a log position's page at the same position and
    transaction (a proxied request's record is in its entries' transaction) reads the others
    rather than take it."""
    from selfctx.adapters.bench.ui import SESSION

    store, work = _bench_session(tmp_path, 40)
    reader = build_service(store=store, workspace=str(work))
    history = Sessions(reader).get(SESSION)
    record = history.record(len(history.records))
    lean = history.past(record.seq, record.tx_id, record.n)
    whole = history.past(record.seq, record.tx_id, None)
    kinds = whole.state.kinds
    calls = {i for i in whole.state.index if kinds[i] == "toolcall"}
    assert not calls <= set(lean.objects)
    assert calls <= set(whole.objects) and whole.context == lean.context
    assert history.past(record.seq, record.tx_id, record.n) is whole  # kept, read whole
    reader.close()
