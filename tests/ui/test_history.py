"""What the inspector reads of a session's log: the marks on each request (collapses with their
rule, the agent's activations, compactions, checkpoints, rollbacks), when each object was met,
the requests it was shown in full, and states rebuilt at any position equal the store's."""

from __future__ import annotations

from pathlib import Path

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
