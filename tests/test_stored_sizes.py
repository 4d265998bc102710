"""The sizes the snapshot rule counts, stored with what is written (decision 0164): a resume
reads them instead of encoding the snapshot and the log tail again, and a session written
before they were stored resumes to the same counts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from selfctx.application import persistence, runner
from selfctx.application.persistence import (
    ENTRY_BYTES,
    LOG_TYPE,
    SNAPSHOT_BYTES,
    document_size,
    json_size,
    read_log_entries,
)
from selfctx.application.service import ContextService
from selfctx.domain.chat import ToolCallRequest
from tests.conftest import MakeService
from tests.support import WrappedStore


def _turns(service: ContextService, sid: str, count: int, tag: str = "a") -> None:
    """Enough commands for several snapshots and a tail after the last one."""
    for n in range(1, count + 1):
        call = f"tc-{tag}-{n}"
        request = [ToolCallRequest(call, "bash", {"n": n})]
        service.record_assistant_message(sid, f"step {n}", request)
        service.record_tool_call(sid, call, tool="bash", args={"n": n}, output=f"out {n}" * n)


def _sizes(service: ContextService, sid: str) -> tuple[int, int, int]:
    session = service._open(sid)
    size = session.snapshot_bytes
    assert isinstance(size, int)  # committed: a size, not a snapshot still to build (0161)
    return session.seq, size, session.log_bytes_since_snapshot


def _counted(store: WrappedStore, service: ContextService, sid: str) -> tuple[int, int, int]:
    """The counts of the stored session worked out from what is stored, as before decision
    0164: the snapshot's documents and the entries after it, each encoded without its size."""
    snapshot, chat = store.get(f"session:{sid}"), store.get(f"chat:{sid}")
    assert snapshot is not None and chat is not None
    head = {k: v for k, v in snapshot.items() if k != SNAPSHOT_BYTES}
    tail = [e for e in _stored_entries(store, service, sid) if e["seq"] > snapshot["seq"]]
    log = sum(document_size({k: v for k, v in e.items() if k != ENTRY_BYTES}) for e in tail)
    return service._open(sid).seq, document_size(head) + document_size(chat), log


def _stored_entries(store: WrappedStore, service: ContextService, sid: str) -> list[dict[str, Any]]:
    found = read_log_entries(store, sid, 1, service._open(sid).seq)
    return [found[seq] for seq in sorted(found)]


def test_a_resume_reads_the_sizes_stored_with_the_snapshot_and_the_log(
    service: ContextService,
    store: WrappedStore,
    make_service: MakeService,
    ns: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sid = f"{ns}sized"
    service.start_session(sid, "You are careful.")
    _turns(service, sid, 40)
    live = _sizes(service, sid)
    assert live[2] > 0  # a tail after the last snapshot
    assert live == _counted(store, service, sid)
    # what is stored is what the rule counted: each entry's bytes without the field
    for entry in _stored_entries(store, service, sid):
        without = {k: v for k, v in entry.items() if k != ENTRY_BYTES}
        assert entry[ENTRY_BYTES] == document_size(without)
    snapshot = store.get(f"session:{sid}")
    chat = store.get(f"chat:{sid}")
    assert snapshot is not None and chat is not None
    without = {k: v for k, v in snapshot.items() if k != SNAPSHOT_BYTES}
    assert snapshot[SNAPSHOT_BYTES] == document_size(without) + document_size(chat)

    # the resume encodes neither the snapshot nor a log entry to know their sizes
    measured: list[str] = []
    encode = persistence.compact_json

    def counting(doc: Mapping[str, Any]) -> str:
        if doc.get("type") in (LOG_TYPE, "session", "chat"):
            measured.append(str(doc.get("xt/id")))
        return encode(doc)

    monkeypatch.setattr(persistence, "compact_json", counting)
    other = make_service()
    other.resume_session(sid)
    assert measured == []
    # (the resume wrote an entry of its own)
    assert _sizes(other, sid) == _counted(store, other, sid)
    assert _sizes(other, sid)[2] > live[2]
    assert other.state(sid) == service.state(sid)


def test_a_session_written_before_the_sizes_were_stored_resumes_to_the_same_counts(
    service: ContextService,
    store: WrappedStore,
    make_service: MakeService,
    ns: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # written as before decision 0164: no size with an entry or a snapshot
    def old_entry(entry: dict[str, Any], entry_json: str) -> tuple[str, int]:
        return entry_json, json_size(entry_json)

    def old_snapshot(
        session_doc: dict[str, Any],
        chat_doc: Mapping[str, Any],
        *,
        session_bytes: int | None = None,
    ) -> int:
        return document_size(session_doc) + document_size(chat_doc)

    with monkeypatch.context() as patched:
        patched.setattr(runner, "with_size", old_entry)
        patched.setattr(runner, "with_snapshot_size", old_snapshot)
        sid = f"{ns}old"
        service.start_session(sid, "You are careful.")
        _turns(service, sid, 40)
    assert all(ENTRY_BYTES not in entry for entry in _stored_entries(store, service, sid))
    snapshot = store.get(f"session:{sid}")
    assert snapshot is not None and SNAPSHOT_BYTES not in snapshot
    live = _sizes(service, sid)
    assert live[2] > 0
    assert live == _counted(store, service, sid)

    other = make_service()
    other.resume_session(sid)
    assert _sizes(other, sid) == _counted(store, other, sid)
    assert other.state(sid) == service.state(sid)
    assert other.assemble(sid) == service.assemble(sid)
    # and it writes on in the new form, its next snapshot due where the old writer's was
    _turns(other, sid, 3, tag="b")
    assert ENTRY_BYTES in _stored_entries(store, other, sid)[-1]
