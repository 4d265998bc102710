"""The snapshot rule's share (decision 0170): a snapshot is due when the log since the last one
has grown by half that snapshot's size, so that a resume folds at most half a snapshot's worth
of log; a session written under the whole-size rule resumes as it was and writes on under this
one."""

from __future__ import annotations

import pytest

from selfctx.application import runner
from selfctx.application.service import ContextService
from selfctx.domain.chat import ToolCallRequest
from tests.conftest import MakeService
from tests.support import WrappedStore


def _turn(service: ContextService, sid: str, n: int, tag: str = "a") -> None:
    call = f"tc-{tag}-{n}"
    request = [ToolCallRequest(call, "bash", {"n": n})]
    service.record_assistant_message(sid, f"step {n}", request)
    service.record_tool_call(sid, call, tool="bash", args={"n": n}, output=f"out {n} " * (5 * n))


def _sizes(service: ContextService, sid: str) -> tuple[int, int, int]:
    session = service._open(sid)
    size = session.snapshot_bytes
    assert isinstance(size, int)  # committed: a size, not a snapshot still to build (0161)
    return session.seq, size, session.log_bytes_since_snapshot


def test_the_log_after_a_snapshot_stays_under_half_its_size(
    service: ContextService, store: WrappedStore, ns: str
) -> None:
    sid = f"{ns}share"
    service.start_session(sid, "You are careful.")
    snapshots = set()
    for n in range(1, 41):
        _turn(service, sid, n)
        seq, size, log = _sizes(service, sid)
        assert 2 * log < size, (n, seq, size, log)
        stored = store.get(f"session:{sid}")
        assert stored is not None
        snapshots.add(stored["seq"])
    assert len(snapshots) > 3  # the rule was met again and again, not once


def test_a_session_written_under_the_whole_size_rule_resumes_and_writes_on_under_the_share(
    service: ContextService,
    store: WrappedStore,
    make_service: MakeService,
    ns: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sid = f"{ns}old-rule"
    with monkeypatch.context() as patched:
        patched.setattr(runner, "SNAPSHOT_SHARE", 1)  # the rule before decision 0170
        service.start_session(sid, "You are careful.")
        for n in range(1, 41):
            _turn(service, sid, n)
        live = _sizes(service, sid)
        while 2 * live[2] < live[1]:  # a tail longer than the share allows now
            n += 1
            _turn(service, sid, n)
            live = _sizes(service, sid)
    before = store.get(f"session:{sid}")
    assert before is not None

    other = make_service()
    other.resume_session(sid)
    assert other.state(sid) == service.state(sid)
    assert other.assemble(sid) == service.assemble(sid)
    # the resume's own entry writes the snapshot the share has made due
    after = store.get(f"session:{sid}")
    assert after is not None and after["seq"] > before["seq"]
    _, size, log = _sizes(other, sid)
    assert 2 * log < size
    _turn(other, sid, n + 1, tag="b")
    assert 2 * _sizes(other, sid)[2] < _sizes(other, sid)[1]
    third = make_service()
    third.resume_session(sid)
    assert third.state(sid) == other.state(sid)
    assert third.assemble(sid) == other.assemble(sid)
