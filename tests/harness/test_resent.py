"""A whole list sent again is read only past the items of the last one (decision 0099): the
server answers every line exactly as when it reads each line whole."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.cli import sample_session
from selfctx.adapters.harness import session as harness_session
from selfctx.adapters.harness.resent import Held, read_resent
from selfctx.adapters.harness.rpc import LineServer
from selfctx.adapters.harness.stdio import StdioServer
from selfctx.adapters.harness.trajectories import load
from selfctx.adapters.memory import MemoryStore


def _server(whole: bool) -> StdioServer:
    tree = str(sample_session.SAMPLE)
    service = build_service(store=MemoryStore(), workspace=tree, roots=[tree], track=False)
    server = StdioServer(service, cwd=tree, roots=[tree])
    if whole:  # every line read whole, as before
        server.handle_line = lambda line: LineServer.handle_line(server, line)  # type: ignore[method-assign]
    return server


def _line(method: str, n: int, **params: Any) -> str:
    request = {"jsonrpc": "2.0", "id": n, "method": method, "params": params}
    return json.dumps(request, separators=(",", ":"))


def _known_counts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The known items each ``ingest`` was given (0: read whole)."""
    counts: list[int] = []
    ingest: Callable[..., Any] = harness_session.HarnessSession.ingest

    def counted(self: Any, messages: Any, *args: Any, known: Any = None) -> Any:
        counts.append(known.count if known is not None else 0)
        return ingest(self, messages, *args, known=known)

    monkeypatch.setattr(harness_session.HarnessSession, "ingest", counted)
    return counts


def test_the_recorded_session_gets_the_same_answers_as_when_each_list_is_read_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (trajectory,) = load(sample_session.OUTPUT)
    messages = trajectory.messages
    ends = [n + 1 for n, m in enumerate(messages) if m["role"] != "assistant"][1:]
    answers: dict[bool, list[str | None]] = {}
    counts = _known_counts(monkeypatch)
    for whole in (True, False):
        server = _server(whole)
        got = [server.handle_line(_line("session.open", 0, session_id="s", policy="relevance"))]
        for n, end in enumerate(ends, 1):
            listed = _line("ingest", 2 * n, session_id="s", messages=messages[:end])
            got.append(server.handle_line(listed))
            got.append(server.handle_line(_line("assemble", 2 * n + 1, session_id="s")))
        answers[whole] = got
    assert answers[False] == answers[True]
    assert all('"error"' not in (a or "") for a in answers[False])
    read_known = counts[len(ends) :]
    assert read_known[0] == 0 and all(k > 0 for k in read_known[1:])  # the resent way was taken
    assert read_known[1:] == ends[:-1]


def test_a_list_changed_another_way_between_two_lines_is_read_whole() -> None:
    (trajectory,) = load(sample_session.OUTPUT)
    messages = trajectory.messages[:12]
    answers: dict[bool, list[str | None]] = {}
    for whole in (True, False):
        server = _server(whole)
        got = [server.handle_line(_line("session.open", 0, session_id="s"))]
        got.append(server.handle_line(_line("ingest", 1, session_id="s", messages=messages[:4])))
        digest = json.loads(got[-1] or "")["result"]["digest"]
        extended = _line("ingest", 2, session_id="s", messages=messages[4:6], extends=digest)
        got.append(server.handle_line(extended))  # the append form: the list held goes
        got.append(server.handle_line(_line("ingest", 3, session_id="s", messages=messages[:8])))
        got.append(server.handle_line(_line("ingest", 4, session_id="s", messages=messages[:10])))
        edited = [*messages[:2], {**messages[2], "content": "changed"}, *messages[3:12]]
        got.append(server.handle_line(_line("ingest", 5, session_id="s", messages=edited)))
        got.append(server.handle_line(_line("assemble", 6, session_id="s")))
        answers[whole] = got
    assert answers[False] == answers[True]
    assert json.loads(answers[False][-2] or "")["result"]["diverged"] is True


def _held(text: str, count: int, session_id: str = "s") -> dict[str, Held]:
    return {session_id: Held.of(session_id, text, count, json.loads(f"[{text}]")[-1], 7)}


@pytest.mark.parametrize(
    "line",
    [
        # not the same last item: a longer number, a longer string
        '{"jsonrpc":"2.0","id":1,"method":"ingest","params":{"session_id":"s","messages":[1,23]}}',
        '{"jsonrpc":"2.0","id":1,"method":"ingest","params":{"session_id":"s","messages":[1,2"x"]}}',
        # another session's list, the append form, another method
        '{"jsonrpc":"2.0","id":1,"method":"ingest","params":{"session_id":"t","messages":[1,2,3]}}',
        '{"jsonrpc":"2.0","id":1,"method":"ingest","params":{"session_id":"s","messages":[1,2,3],'
        '"extends":"2.ab"}}',
        '{"jsonrpc":"2.0","id":1,"method":"tools.call","params":{"session_id":"s","messages":[1,2]}}',
        # a "messages" key elsewhere: the array found first may not be params.messages
        '{"jsonrpc":"2.0","id":1,"method":"ingest","params":{"session_id":"s","system":[{"messages":'
        '[1,2]}],"messages":[1,2,3]}}',
        # bad JSON after the known items, a batch
        '{"jsonrpc":"2.0","id":1,"method":"ingest","params":{"session_id":"s","messages":[1,2,}}',
        '[{"jsonrpc":"2.0","id":1,"method":"ingest","params":{"session_id":"s","messages":[1,2,3]}}]',
    ],
)
def test_lines_it_does_not_take_are_read_whole(line: str) -> None:
    assert read_resent(line, _held("1,2", 2)) is None


def test_only_the_items_after_the_known_ones_are_read() -> None:
    line = (
        '{"jsonrpc":"2.0","id":9,"method":"ingest","params":{"session_id":"s",'
        '"messages": [ {"a":1}, {"b":[2]} , "x\\"]" ,3 ],"format":"openai"}}'
    )
    read = read_resent(line, _held('{"a":1}, {"b":[2]}', 2))
    assert read is not None and read.known is not None and read.known.count == 2
    expected = json.loads(line)
    expected["params"]["messages"] = [None, None, 'x"]', 3]  # placeholders, then the new items
    assert read.request == expected
    assert read.text == '{"a":1}, {"b":[2]} , "x\\"]" ,3' and read.count == 4 and read.last == 3
    nothing_new = line.replace(' , "x\\"]" ,3 ]', "]")
    again = read_resent(nothing_new, _held('{"a":1}, {"b":[2]}', 2))
    assert again is not None and again.request["params"]["messages"] == [None, None]
    assert again.last == {"b": [2]} and again.count == 2
    whole = read_resent(line, {})  # nothing held: every item read, the line's own request
    assert whole is not None and whole.known is None and whole.request == json.loads(line)


def test_what_is_held_is_the_texts_length_ends_and_digest_not_the_text() -> None:
    """A held list costs the server the same whatever its length (decision 0100), and an item
    changed in its middle, the ends and the length unchanged, is told apart by the digest."""
    items = [{"n": n, "text": "x" * 200} for n in range(50)]
    text = json.dumps(items, separators=(",", ":"))[1:-1]  # as _line writes it
    held = _held(text, len(items))
    kept = held["s"]
    assert kept.length == len(text) > 10_000
    assert [len(kept.head), len(kept.tail)] == [64, 64]
    assert not any(isinstance(v, str) and len(v) > 64 for v in attrs.astuple(kept, recurse=False))

    def line(listed: list[Any]) -> str:
        return _line("ingest", 1, session_id="s", messages=[*listed, "new"])

    same = read_resent(line(items), held)
    assert same is not None and same.known is kept and same.count == len(items) + 1
    changed = [*items[:25], {"n": 25, "text": "y" + "x" * 199}, *items[26:]]
    changed_text = json.dumps(changed, separators=(",", ":"))[1:-1]
    assert changed_text != text and len(changed_text) == len(text)
    read = read_resent(line(changed), held)
    assert read is not None and read.known is None  # read whole
    assert read.request["params"]["messages"] == [*changed, "new"]
    again = read_resent(line(items), {"s": same.held(8)})  # the digest carried forward
    assert again is not None and again.known is not None and again.known.count == len(items) + 1
