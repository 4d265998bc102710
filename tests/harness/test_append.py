"""Incremental ingestion: a whole list resent is parsed and fingerprinted only where it changed,
and the append form (the new messages with the digest of the list they extend) records exactly
what the whole list would have."""

from __future__ import annotations

import json
from typing import Any

import pytest

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.harness import HarnessSession
from selfctx.adapters.harness import incremental as incremental_module
from selfctx.adapters.harness.cursor import Cursor
from selfctx.adapters.harness.session import DigestMismatch
from selfctx.adapters.harness.stdio import INVALID_PARAMS, SERVER_ERROR, StdioServer
from selfctx.adapters.memory import MemoryStore
from selfctx.application.ports.store import ObjectStore
from tests.harness.conftest import (
    CWD,
    ROOTS,
    a_assistant,
    a_result,
    a_use,
    a_user,
    bash,
    chat_texts,
    make_service,
    mini,
    o_assistant,
    o_system,
    o_tool,
    o_user,
    open_harness,
    snapshot,
)

A_PY = "import os\n\nprint(os.getcwd())\n"


def openai_turns(n: int) -> list[list[dict[str, Any]]]:
    """``n`` turns of a conversation: each a list of the messages it adds."""
    turns: list[list[dict[str, Any]]] = [[o_system("You fix bugs."), o_user("Fix the bug.")]]
    for i in range(n):
        turn = [o_assistant(f"step {i}", bash(f"c{i}", "cat a.py" if i % 3 == 0 else f"ls {i}"))]
        turn.append(o_tool(f"c{i}", mini(A_PY if i % 3 == 0 else f"out {i}\n")))
        if i % 4 == 3:
            turn.append(o_user(f"continue {i}"))
        turns.append(turn)
    return turns


def anthropic_turns(n: int) -> list[list[dict[str, Any]]]:
    turns: list[list[dict[str, Any]]] = [[a_user("Fix the bug.")]]
    for i in range(n):
        turns.append(
            [
                a_assistant(f"step {i}", a_use(f"u{i}", command=f"ls {i}")),
                a_user(a_result(f"u{i}", mini(f"out {i}\n"))),
            ]
        )
    return turns


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_appending_records_what_the_whole_list_records(fmt: str) -> None:
    turns = openai_turns(12) if fmt == "openai" else anthropic_turns(12)
    system = None if fmt == "openai" else "You fix bugs."
    whole = open_harness(fmt=fmt, session_id="s1")
    appended = open_harness(fmt=fmt, session_id="s1")
    digest = appended.digest()
    assert digest == whole.digest()
    sent: list[dict[str, Any]] = []
    for turn in turns:
        sent += turn
        a = whole.ingest(list(sent), system=system)
        b = appended.append(turn, digest, system=system)
        assert a == b
        assert a.digest == b.digest
        digest = b.digest
    assert chat_texts(whole.service) == chat_texts(appended.service)
    one, other = snapshot(whole.service), snapshot(appended.service)
    assert (one.state, one.log_position) == (other.state, other.log_position)


def test_a_digest_the_session_does_not_hold_records_nothing() -> None:
    h = open_harness()
    turns = openai_turns(3)
    first = h.ingest([*turns[0], *turns[1]])
    before = snapshot(h.service)
    for wrong in [
        "",
        "nonsense",
        "9.00",
        first.digest.replace(".", ".f", 1)[:-1],
        "99." + "0" * 32,
    ]:
        with pytest.raises(DigestMismatch) as caught:
            h.append(turns[2], wrong)
        assert caught.value.kind == "digest_mismatch"
        assert caught.value.digest == first.digest
        assert caught.value.length == len(turns[0]) + len(turns[1]) - 1  # not the prompt
    assert snapshot(h.service) == before
    # The whole list once, then appends again.
    whole = h.ingest([*turns[0], *turns[1], *turns[2]])
    assert whole.consumed == len(turns[2])
    assert h.append(turns[3], whole.digest).consumed == len(turns[3])


def test_an_append_may_extend_an_earlier_point_of_the_list() -> None:
    h = open_harness()
    turns = openai_turns(3)
    start = h.ingest(turns[0] + turns[1])
    full = h.append(turns[2], start.digest)
    # A retry of the shorter list: nothing new, and its digest is the shorter list's.
    retry = h.ingest(turns[0] + turns[1])
    assert (retry.consumed, retry.diverged, retry.digest) == (0, False, start.digest)
    # Appending the same turn again to the shorter list: already recorded, nothing twice.
    again = h.append(turns[2], retry.digest)
    assert (again.consumed, again.digest) == (0, full.digest)
    assert h.append(turns[3], again.digest).consumed == len(turns[3])


def test_a_system_prompt_given_with_an_append_replaces_the_prompt() -> None:
    h = open_harness(fmt="anthropic")
    turns = anthropic_turns(2)
    first = h.ingest(turns[0] + turns[1], system="You fix bugs.")
    second = h.append(turns[2], first.digest, system="You fix bugs.")
    assert second.consumed == 2
    h.append(anthropic_turns(3)[3], second.digest, system="You write docs.")
    assert h.service.system_prompt("s1") == "You write docs."
    # The prompt is not the chat: the whole list with the new prompt is no divergence.
    whole = [m for turn in anthropic_turns(3) for m in turn]
    again = h.ingest(whole, system="You write docs.")
    assert (again.consumed, again.diverged) == (0, False)


def _reopen(store: ObjectStore, fmt: str = "openai") -> HarnessSession:
    service = build_service(store=store, workspace=CWD, roots=ROOTS, host_id="test-host")
    return HarnessSession(service, "s1", fmt, cwd=CWD, roots=ROOTS)


def test_after_a_resume_the_same_list_is_no_divergence_and_appends_go_on() -> None:
    store = MemoryStore()
    h = _reopen(store)
    turns = openai_turns(6)
    sent = [m for turn in turns for m in turn]
    last = h.ingest(sent)
    resumed = _reopen(store)
    assert resumed.resumed is not None
    assert resumed.digest() == last.digest
    again = resumed.ingest(sent)
    assert (again.consumed, again.diverged, again.digest) == (0, False, last.digest)
    more = [o_assistant("done", bash("z1", "ls")), o_tool("z1", mini("a.py\n"))]
    resumed2 = _reopen(store)
    assert resumed2.append(more, last.digest).consumed == 2


def test_a_turn_looks_only_at_its_new_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whole lists: each message is parsed and fingerprinted once over the session, however
    often the list is resent. Appends: only the new items are even digested."""
    keys = 0
    parsed = 0
    key, parse = Cursor.key, incremental_module.parse_chunk

    def counting_key(self: Cursor, message: Any) -> str:
        nonlocal keys
        keys += 1
        return key(self, message)

    def counting_parse(fmt: str, items: list[Any], offset: int) -> Any:
        nonlocal parsed
        parsed += len(items)
        return parse(fmt, items, offset)

    monkeypatch.setattr(Cursor, "key", counting_key)
    monkeypatch.setattr(incremental_module, "parse_chunk", counting_parse)
    h = open_harness()
    sent: list[dict[str, Any]] = []
    for turn in openai_turns(30):
        sent += turn
        keys = parsed = 0
        h.ingest(list(sent))
        chat = [m for m in turn if m["role"] != "system"]  # the prompt is not fingerprinted
        assert (keys, parsed) == (len(chat), len(turn))
    digested = 0
    digest = incremental_module.item_digest

    def counting_digest(value: Any, limit: int, depth: int = 0) -> int:
        nonlocal digested
        digested += depth == 0
        return digest(value, limit, depth)

    monkeypatch.setattr(incremental_module, "item_digest", counting_digest)
    monkeypatch.setattr("selfctx.adapters.harness.session.item_digest", counting_digest)
    last = h.digest()
    for turn in openai_turns(40)[31:]:
        keys = parsed = digested = 0
        last = h.append(turn, last).digest
        assert (keys, parsed, digested) == (len(turn), len(turn), len(turn))


def _server() -> StdioServer:
    service = make_service()
    return StdioServer(service, cwd=CWD, roots=list(ROOTS))


def _call(server: StdioServer, method: str, **params: Any) -> Any:
    line = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    answer = server.handle_line(line)
    assert answer is not None
    return json.loads(answer)


def test_the_append_form_over_json_rpc() -> None:
    server = _server()
    opened = _call(server, "session.open", session_id="s1", policy="ssot")["result"]
    turns = openai_turns(3)
    first = _call(server, "ingest", session_id="s1", messages=turns[0], extends=opened["digest"])
    assert first["result"]["consumed"] == 1
    digest = first["result"]["digest"]
    second = _call(server, "ingest", session_id="s1", messages=turns[1], extends=digest)
    assert second["result"]["consumed"] == 2
    other = "3." + digest.split(".")[1]  # not a digest of this list
    refused = _call(server, "ingest", session_id="s1", messages=turns[2], extends=other)["error"]
    assert (refused["code"], refused["data"]["kind"]) == (SERVER_ERROR, "digest_mismatch")
    assert refused["data"]["digest"] == second["result"]["digest"]
    assert refused["data"]["length"] == 3  # the chat, without the system message
    assert refused["data"]["consumed"] == 0
    deep: Any = "x"
    for _ in range(120):
        deep = [deep]
    deeper = _call(
        server,
        "ingest",
        session_id="s1",
        messages=[{"role": "user", "content": deep}],
        extends=second["result"]["digest"],
    )["error"]
    assert (deeper["code"], deeper["data"]["kind"]) == (INVALID_PARAMS, "invalid_params")
    whole = _call(server, "ingest", session_id="s1", messages=turns[0] + turns[1] + turns[2])
    assert whole["result"]["consumed"] == len(turns[2])


def test_every_prefix_of_a_long_list_has_its_digest_as_a_resume_rebuilds_it() -> None:
    """Decision 0122: the view keeps a digest every few dozen messages, not one a message; the
    digest of any prefix, worked out from the one kept before it, names that prefix alone, and
    is the one a cursor rebuilt from the stored chat gives, after a change in the middle too."""
    store = MemoryStore()
    h = _reopen(store)
    sent = [m for turn in openai_turns(90) for m in turn]
    h.ingest(sent)
    cursor = h.ingestor.cursor
    n = len(cursor.view)
    assert n > 3 * 64
    before = [cursor.digest(k) for k in range(n + 1)]
    assert len(set(before)) == n + 1
    assert all(cursor.position_of(d) == k for k, d in enumerate(before))
    assert cursor.position_of(f"{n + 1}.{'0' * 32}") is None
    # an old user message edited (position 101 of the chat, inside the second kept stretch)
    chat = sent[1:]
    k = next(i for i in range(100, n) if chat[i]["role"] == "user")
    edited = [*sent[: k + 1], o_user("continue, carefully"), *sent[k + 2 :]]
    result = h.ingest(edited)
    assert (result.consumed, result.diverged) == (1, True)
    after = [cursor.digest(j) for j in range(n + 1)]
    assert after[: k + 1] == before[: k + 1]
    assert all(a != b for a, b in zip(after[k + 1 :], before[k + 1 :], strict=True))
    resumed = _reopen(store).ingestor.cursor  # rebuilt from the stored chat in one pass
    assert len(resumed.view) == n + 1  # the chat holds the message as first sent and as edited
    h.ingest(sent)  # the list as first sent: every message recorded already
    assert [cursor.digest(j) for j in range(n + 1)] == before
    again = _reopen(store).ingestor.cursor
    assert [again.digest(j) for j in range(k + 1)] == before[: k + 1]


def test_an_old_message_changed_in_a_resent_list_is_a_divergence_and_is_recorded() -> None:
    """Decision 0122: a whole list resent with one early message changed diverges there (the
    view compares every position), and the changed message is recorded as new."""
    h = open_harness()
    sent = [m for turn in openai_turns(80) for m in turn]
    first = h.ingest(sent)
    users = [i for i, m in enumerate(sent) if m["role"] == "user"]
    changed = list(sent)
    changed[users[1]] = o_user("continue 3, and the docs")
    result = h.ingest(changed)
    assert (result.consumed, result.diverged, result.total) == (1, True, first.total + 1)
    assert h.ingest(changed).consumed == 0
    assert ("user", "continue 3, and the docs") in chat_texts(h.service)


def test_messages_a_compaction_dropped_are_known_when_they_come_back() -> None:
    """Decision 0122: what the cursor has recorded is the view and what is beyond it (what a
    harness's compaction dropped from its list): a list holding dropped messages again records
    none of them, and a message recorded twice is known twice."""
    h = open_harness()
    sent = [m for turn in openai_turns(40) for m in turn]
    first = h.ingest(sent)
    tail = [sent[0], o_user("Summary: the bug is fixed in a.py."), *sent[-6:]]
    compacted = h.ingest(tail)
    assert (compacted.consumed, compacted.diverged) == (1, True)
    assert len(h.ingestor.cursor.view) == len(tail) - 1
    # the harness goes back to its whole list, the summary after it: all of it known
    back = h.ingest([*sent, o_user("Summary: the bug is fixed in a.py.")])
    assert (back.consumed, back.diverged, back.total) == (0, True, first.total + 1)
    # the summary a second time, as a new message: recorded
    twice = h.ingest([*sent, *([o_user("Summary: the bug is fixed in a.py.")] * 2)])
    assert (twice.consumed, twice.total) == (1, first.total + 2)


def test_a_cursor_rebuilt_from_the_stored_chat_holds_what_the_recording_one_held() -> None:
    """Decision 0158: a resume rebuilds the cursor in one pass (nothing counted beyond the view,
    each fingerprint chained from its text once); it holds what the cursor that recorded the
    list held: the same fingerprints, the digest of every prefix, the recorded calls in order,
    the same total, nothing beyond the view. The list reuses the harness's call ids, has
    assistant messages with two calls and with none, and several user messages."""
    store = MemoryStore()
    h = _reopen(store)
    sent: list[dict[str, Any]] = [o_system("You fix bugs."), o_user("Fix the bug.")]
    for i in range(70):
        calls = [bash(f"c{i % 3}", f"ls {i}")]
        if i % 5 == 0:
            calls.append(bash(f"d{i}", "cat a.py"))
        sent.append(o_assistant(f"step {i}" if i % 2 else "", *calls))
        sent += [o_tool(c["id"], mini(f"out {i}\n")) for c in calls]
        if i % 7 == 6:
            sent += [o_assistant("thinking it over"), o_user(f"continue {i}")]
    h.ingest(sent)
    cursor = h.ingestor.cursor
    resumed = _reopen(store).ingestor.cursor
    n = len(cursor.view)
    assert n > 2 * 64
    assert resumed.view.fingerprints(0) == cursor.view.fingerprints(0)
    assert [resumed.digest(k) for k in range(n + 1)] == [cursor.digest(k) for k in range(n + 1)]
    assert resumed.recorded_fingerprints == cursor.recorded_fingerprints
    assert resumed.recorded_calls == cursor.recorded_calls
    assert resumed.total == cursor.total == n
    assert not resumed._beyond and not cursor._beyond
    assert _reopen(store).ingest(sent).consumed == 0
