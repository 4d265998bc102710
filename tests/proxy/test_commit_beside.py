"""What a request adds to its session is committed while the managed request is upstream
(decision 0078). A streamed answer waits for that commit: a store that fails meanwhile gives the
client the answer to its own request, and loses nothing; a commit refused because another writer
came first sends the request again if what the model should see changed. A whole answer is
handed on while the commit lands, and the session's next request waits for it (decision 0107)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.memory import MemoryStore
from selfctx.adapters.proxy.scripted import ScriptedModel, Seen, Step
from selfctx.application.persistence import LOG_TYPE, log_entries
from selfctx.application.ports.store import LOGGED, Document, Expect, Receipt, StoreUnavailable
from selfctx.domain.chat import AssistantMessage, UserMessage
from tests.proxy.drive import read_stream
from tests.proxy.support import scripted
from tests.proxy.test_proxy import proxy_for
from tests.support import WrappedStore

PATH = "/v1/chat/completions"
HEADERS = {"authorization": "Bearer test", "x-selfctx-session": "beside"}


def bash(command: str) -> Step:
    return Step("", (("bash", {"command": command}),))


class Conversation:
    """A Chat Completions client: each request carries the model's last call and its output."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Look around, please."},
        ]

    def body(self) -> dict[str, Any]:
        tool = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}
        return {"model": "m", "messages": self.messages, "tools": [tool]}

    def send(self, client: httpx.Client, *, stream: bool = False) -> dict[str, Any]:
        body = {**self.body(), "stream": True} if stream else self.body()
        answer = client.post(self.base + PATH, json=body, headers=HEADERS, timeout=30)
        answer.raise_for_status()
        response = read_stream("openai", answer.text) if stream else answer.json()
        message = response["choices"][0]["message"]
        self.messages.append(message)
        for call in message.get("tool_calls") or []:
            command = json.loads(call["function"]["arguments"])["command"]
            output = f"output of {command}\n" + "a line\n" * 5
            self.messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
        return dict(message)


def _model_has(model: ScriptedModel, count: int, seconds: float = 3.0) -> bool:
    deadline = time.monotonic() + seconds
    while len(model.requests) < count:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def _landed(store: WrappedStore, text: str, seconds: float = 10.0) -> bool:
    """Whether a commit holding ``text`` has landed in ``store`` within ``seconds``. With
    ``answer_before_commit`` a request's commit may still be on its way after the client got the
    answer: a hook installed then would run for it, not for the next request's."""
    deadline = time.monotonic() + seconds
    while not any(text in repr(puts) for puts in store.committed):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def _stored_messages(store: Any, workspace: Path, session_id: str) -> list[Any]:
    """The messages of the stored session, in order, as a service resuming it reads them."""
    service = build_service(store=store, workspace=str(workspace))
    try:
        service.resume_session(session_id)
        return [m for t in service.state(session_id).turns for m in t.messages]
    finally:
        service.close()


def _commands(store: Any, workspace: Path, session_id: str) -> list[str]:
    """The commands of the calls the stored session holds, in order."""
    messages = _stored_messages(store, workspace, session_id)
    calls = [c for m in messages if isinstance(m, AssistantMessage) for c in m.tool_calls]
    return [str(c.arguments.get("command")) for c in calls]


def _on_another_thread(write: Callable[[], None]) -> None:
    """Another writer's commit, made on a thread of its own while the caller waits (as another
    process's would land between the proxy's reads and its commit)."""
    done = threading.Event()

    def run() -> None:
        write()
        done.set()

    threading.Thread(target=run).start()
    assert done.wait(10)


def _writes_first(other: Any, note: str, proxy: Callable[[], Any]) -> Callable[[], None]:
    """A hook for the proxy's commit of a request: another writer of the proxy's session
    (``other``, a service on the same store) records ``note`` first, on a thread of its own."""

    def hook() -> None:
        sid = next(iter(proxy().sessions.items()))

        def write() -> None:
            other.resume_session(sid)
            other.record_user_message(sid, note)

        _on_another_thread(write)

    return hook


def _notes(store: Any, workspace: Path, session_id: str) -> list[str]:
    """The texts of the user messages the stored session holds, in order."""
    messages = _stored_messages(store, workspace, session_id)
    return [m.text for m in messages if isinstance(m, UserMessage)]


def _upstream_then(model: ScriptedModel, want: int, then: Callable[[], None]) -> Callable[[], None]:
    """A hook for the proxy's commit of a request: it waits until the model has that request
    (which it could not, were the commit made before the request was sent), lets the answer come
    back, then runs ``then`` (the commit goes on after it, unless it raises)."""

    def hook() -> None:
        assert _model_has(model, want), "a commit was made before the request went upstream"
        time.sleep(0.3)  # the answer is back by now
        then()

    return hook


def _third_answer_timed(
    tmp_path: Path, store: WrappedStore, *, early: bool, stream: bool = False
) -> tuple[dict[str, float], str]:
    """Four requests of one conversation through the proxy; the third request's commit is held
    until the model has answered it. When it was made (``committed_at``), and when the third and
    fourth answers reached the client (``answered_at``, ``next_answered_at``); the session's id."""
    steps = [bash(f"echo {n}") for n in range(4)]
    seen: dict[str, float] = {}

    def committed() -> None:
        seen["committed_at"] = time.monotonic()

    with (
        scripted(steps) as (model, up),
        proxy_for(up, tmp_path, store, answer_before_commit=early) as (proxy, base),
    ):
        talk = Conversation(base)
        with httpx.Client() as client:
            talk.send(client)
            talk.send(client)
            sid = next(iter(proxy.sessions.items()))
            assert _landed(store, "output of echo 0"), "the second request's commit never landed"
            store.on_commit = _upstream_then(model, len(model.requests) + 1, committed)
            talk.send(client, stream=stream)
            seen["answered_at"] = time.monotonic()
            talk.send(client)
            seen["next_answered_at"] = time.monotonic()
    return seen, sid


@pytest.mark.parametrize("early", [False, True], ids=["default", "answer_before_commit"])
def test_a_whole_answer_and_its_commit(tmp_path: Path, store: WrappedStore, early: bool) -> None:
    """By default a whole (not streamed) answer waits for the commit made beside its request
    (decisions 0078, 0089). With ``answer_before_commit`` it goes to the client before that
    commit is known, and the session's next request waits for it (decision 0107). On each
    store (a real XTDB node's too)."""
    seen, sid = _third_answer_timed(tmp_path, store, early=early)
    if early:
        assert seen["answered_at"] < seen["committed_at"], "the answer waited for the commit"
        assert seen["next_answered_at"] > seen["committed_at"], "the next request did not wait"
    else:
        assert seen["answered_at"] >= seen["committed_at"], "the answer came before the commit"
    # every call the client sent back (the last answer's call is recorded when it comes back)
    assert _commands(store, tmp_path, sid) == [f"echo {n}" for n in range(3)]


def test_a_streamed_answer_waits_for_its_commit(tmp_path: Path) -> None:
    """A streamed answer is read whole before the client gets any of it (decision 0036), and
    the client gets none of it before the commit is known (decision 0078), with
    ``answer_before_commit`` too (decision 0107)."""
    store = WrappedStore(MemoryStore())
    seen, sid = _third_answer_timed(tmp_path, store, early=True, stream=True)
    assert seen["answered_at"] >= seen["committed_at"], "the answer came before the commit"
    assert _commands(store.inner, tmp_path, sid) == [f"echo {n}" for n in range(3)]


def _third_request_meets(
    talk: Conversation,
    client: httpx.Client,
    proxy: Any,
    model: ScriptedModel,
    store: WrappedStore,
    then: Callable[[], None],
    stream: bool = False,
) -> tuple[str, dict[str, Any], list[Any]]:
    """Two requests of ``talk``, then a third whose commit runs ``then`` once the model has
    answered it: the session's id, the client's own third request, and the bodies the model got
    for it."""
    talk.send(client)
    talk.send(client)
    sid = next(iter(proxy.sessions.items()))
    assert _landed(store, "output of echo 0"), "the second request's commit never landed"
    before = len(model.requests)
    store.on_commit = _upstream_then(model, before + 1, then)
    own = json.loads(json.dumps({**talk.body(), **({"stream": True} if stream else {})}))
    talk.send(client, stream=stream)
    return sid, own, [r.body for r in model.requests[before:]]


def _fail() -> None:
    raise StoreUnavailable("injected failure", operation="commit")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_store_that_fails_meanwhile_loses_nothing(tmp_path: Path, stream: bool) -> None:
    """The commit beside a request fails after the model answered (``answer_before_commit``).
    A whole answer was handed on: the client's next request carries what the failed commit
    held, and it is recorded then (decision 0107). A streamed one was not: the client gets the
    answer to its own request (decision 0078)."""
    store = WrappedStore(MemoryStore())
    steps = [bash(f"echo {n}") for n in range(5)]
    with (
        scripted(steps) as (model, up),
        proxy_for(up, tmp_path, store, answer_before_commit=True) as (proxy, base),
    ):
        talk = Conversation(base)
        with httpx.Client() as client:
            sid, own, sent = _third_request_meets(talk, client, proxy, model, store, _fail, stream)
            talk.send(client)  # the store is back: what the failed one added is recorded now
            talk.send(client)
    assert "context_activate" in json.dumps(sent[0])
    if stream:
        # asked twice: the managed request, whose answer was dropped, then the client's own,
        # unchanged (no context tools: an answer built from nothing that was lost)
        assert len(sent) == 2
        assert sent[1] == own
    else:
        assert len(sent) == 1  # the managed request's answer went to the client
    assert _commands(store.inner, tmp_path, sid) == [f"echo {n}" for n in range(4)]


def test_a_store_that_fails_before_context_calls_are_run_sends_the_clients_own(
    tmp_path: Path,
) -> None:
    """A whole answer whose context calls the proxy would run waits for the commit first
    (``answer_before_commit``): the store failed, so the client gets the answer to its own
    request (decision 0107)."""
    store = WrappedStore(MemoryStore())
    steps = iter(
        [bash("echo 0"), bash("echo 1"), Step("", (("context_activate", {"id": "#1"}),))]
        + [bash(f"echo {n}") for n in range(2, 5)]
    )  # one a request, in the order the model gets them

    def script(_seen: Seen) -> Step:
        return next(steps)

    with (
        scripted(script) as (model, up),
        proxy_for(up, tmp_path, store, answer_before_commit=True) as (proxy, base),
    ):
        talk = Conversation(base)
        with httpx.Client() as client:
            sid, own, sent = _third_request_meets(talk, client, proxy, model, store, _fail)
            talk.send(client)
    assert len(sent) == 2
    assert "context_activate" in json.dumps(sent[0])
    assert sent[1] == own
    assert [m.get("tool_calls") is None for m in talk.messages if m["role"] == "assistant"] == [
        False
    ] * 4
    assert _commands(store.inner, tmp_path, sid) == [f"echo {n}" for n in range(3)]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_commit_refused_for_another_writer(tmp_path: Path, stream: bool) -> None:
    """Another writer of the session came first (``answer_before_commit``). A streamed answer
    was not given yet: the request built again on what that writer left is sent again
    (decision 0078). A whole one
    was: the request sent is recorded, with a note that the log holds that writer's commit
    before it, and the client's next request sees what it wrote (decision 0107)."""
    inner = MemoryStore()
    store = WrappedStore(inner)
    other = build_service(store=inner, workspace=str(tmp_path))
    steps = [bash(f"echo {n}") for n in range(5)]
    note = "A note another agent left in this session."

    another_writer_first = _writes_first(other, note, lambda: proxy)  # beside its first commit

    try:
        with (
            scripted(steps) as (model, up),
            proxy_for(up, tmp_path, store, answer_before_commit=True) as (proxy, base),
        ):
            talk = Conversation(base)
            with httpx.Client() as client:
                sid, _own, bodies = _third_request_meets(
                    talk, client, proxy, model, store, another_writer_first, stream
                )
                sent = [json.dumps(b) for b in bodies]
                talk.send(client)
                after = json.dumps(model.requests[-1].body)
            assert _landed(store, "output of echo 2"), "the fourth request's commit never landed"
            records = proxy.service.requests(sid)
    finally:
        other.close()
    assert note not in sent[0] and note in after
    if stream:  # sent again, with what the other writer added; the client got one answer
        assert len(sent) == 2
        assert note in sent[1]
    else:
        assert len(sent) == 1
        assert "another writer" in str(records[2].facts.note)
        assert [r.n for r in records] == [1, 2, 3, 4]
    assert sum(1 for m in talk.messages if m["role"] == "tool") == 4
    assert _notes(inner, tmp_path, sid).count(note) == 1  # recorded once


def test_a_request_and_its_record_are_one_transaction(tmp_path: Path) -> None:
    """What a request adds and the request's record are committed together (decision 0089):
    one commit per request, holding the session's log entry and the record."""
    store = WrappedStore(MemoryStore())
    steps = [bash(f"echo {n}") for n in range(4)]
    with scripted(steps) as (_model, up), proxy_for(up, tmp_path, store) as (proxy, base):
        talk = Conversation(base)
        with httpx.Client() as client:
            talk.send(client)
            sid = next(iter(proxy.sessions.items()))
            before = store.commits
            for _ in range(3):
                talk.send(client)
            commits = store.committed[before:]
            records = proxy.service.requests(sid)
    assert len(commits) == 3
    for docs in commits:
        ids = [str(d["xt/id"]) for d in docs]
        assert f"requests:{sid}" in ids
        assert any(i.startswith(f"log:{sid}:") for i in ids)
    assert [r.n for r in records] == [1, 2, 3, 4]
    # each record names the position of the log its transaction ends at
    held = [e for d in commits[-1] if d.get("type") == LOG_TYPE for e in log_entries(d)]
    assert records[-1].seq == max(int(e["seq"]) for e in held)


def test_a_record_refused_with_its_transaction_is_written_after_it(tmp_path: Path) -> None:
    """Another writer recorded a request of the session first: the request's transaction is
    refused, its commands are made again, the request built again is the one sent, so the
    answer stands, and the record is written on its own (decision 0089)."""
    inner = MemoryStore()
    store = WrappedStore(inner)
    other = build_service(store=inner, workspace=str(tmp_path))
    steps = [bash(f"echo {n}") for n in range(5)]
    sid = ""

    def another_record_first() -> None:  # beside the proxy's commit for the request, once
        store.on_commit = None

        def write() -> None:
            other.resume_session(sid)
            other.record_request(sid, other.assemble(sid))

        _on_another_thread(write)

    try:
        with scripted(steps) as (model, up), proxy_for(up, tmp_path, store) as (proxy, base):
            talk = Conversation(base)
            with httpx.Client() as client:
                talk.send(client)
                talk.send(client)
                sid = next(iter(proxy.sessions.items()))
                before = len(model.requests)
                store.on_commit = another_record_first
                talk.send(client)
                sent = len(model.requests) - before
                talk.send(client)
            records = proxy.service.requests(sid)
    finally:
        other.close()
    assert sent == 1  # the answer stood: the request was not sent again
    assert sum(1 for m in talk.messages if m["role"] == "tool") == 4
    # the proxy's two, the other writer's, then the proxy's third and fourth
    assert len(records) == 5
    assert [r.n for r in records] == [1, 2, 3, 4, 5]
    assert [r.facts.client is None for r in records] == [False, False, True, False, False]
    assert _commands(inner, tmp_path, sid) == [f"echo {n}" for n in range(3)]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_the_request_goes_upstream_before_its_thread_commits(tmp_path: Path, stream: bool) -> None:
    """The worker thread that built a request lets the event loop send it before it records
    the request and commits (decision 0133): the loop has begun sending each request before
    the commit made beside it reaches the store. The interpreter's switch interval is made long
    here, so that a thread that goes on at once (holding the interpreter until the store blocks
    it, which a memory store never does) would commit first every time."""
    import sys

    store = WrappedStore(MemoryStore())
    steps = [bash(f"echo {n}") for n in range(5)]
    order: list[str] = []

    def committing() -> None:
        order.append("commit")
        store.on_commit = committing  # the store's hook runs once

    async def sending(_request: httpx.Request) -> None:
        order.append("sent")

    switch = sys.getswitchinterval()
    with scripted(steps) as (_model, up), proxy_for(up, tmp_path, store) as (proxy, base):
        talk = Conversation(base)
        with httpx.Client() as client:
            talk.send(client)  # the session is opened
            proxy.client().event_hooks["request"].append(sending)
            store.on_commit = committing
            sys.setswitchinterval(2.0)
            try:
                for _ in range(3):
                    talk.send(client, stream=stream)
            finally:
                sys.setswitchinterval(switch)
        sid = next(iter(proxy.sessions.items()))
    assert order == ["sent", "commit"] * 3
    assert _commands(store.inner, tmp_path, sid) == [f"echo {n}" for n in range(3)]


class LoggedStore(WrappedStore):
    """A store whose commit is durably logged before it is decided, as an XTDB node's is (the
    transaction in its tx-log, its preconditions checked when it is indexed): each commit calls
    the caller's ``LOGGED`` hook first, then ``on_commit`` (``WrappedStore``'s), then decides on
    the inner store (decision 0138)."""

    def commit(self, puts: Sequence[Document], expect: Sequence[Expect] = ()) -> Receipt:
        logged = LOGGED.get()
        if logged is not None:
            logged()
        return super().commit(puts, expect)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_an_answer_goes_once_its_commit_is_logged(tmp_path: Path, stream: bool) -> None:
    """By default an answer, whole or streamed, goes to the client once the transaction beside
    its request is in the store's log, before the store has decided it (decision 0138): the
    third request's commit is not decided until the client has its answer. The session's next
    request waits for that decision, and the session holds every call. With the setting off
    (the tree before), the answer waits for the decision, which waits for the answer: the hook
    gives up after 5 s and the first assertion fails."""
    store = LoggedStore(MemoryStore())
    steps = [bash(f"echo {n}") for n in range(5)]
    answered = threading.Event()
    seen: dict[str, float] = {}

    def decide_after_the_answer() -> None:
        seen["client_had_it"] = float(answered.wait(5.0))
        seen["decided_at"] = time.monotonic()

    with (
        scripted(steps) as (_model, up),
        proxy_for(up, tmp_path, store) as (proxy, base),
    ):
        talk = Conversation(base)
        with httpx.Client() as client:
            talk.send(client)
            talk.send(client)
            sid = next(iter(proxy.sessions.items()))
            assert _landed(store, "output of echo 0"), "the second request's commit never landed"
            store.on_commit = decide_after_the_answer
            talk.send(client, stream=stream)
            answered.set()
            talk.send(client)
            seen["next_answered_at"] = time.monotonic()
        records = proxy.service.requests(sid)
    assert seen["client_had_it"], "the answer waited for the commit to be decided"
    assert seen["next_answered_at"] > seen["decided_at"], "the next request did not wait"
    assert [r.n for r in records] == [1, 2, 3, 4]
    assert _commands(store.inner, tmp_path, sid) == [f"echo {n}" for n in range(3)]


def test_a_logged_commit_refused_for_another_writer_with_a_streamed_answer(
    tmp_path: Path,
) -> None:
    """Another writer of the session came first, after the proxy's transaction was logged and
    before it was decided (decision 0138): the streamed answer went to the client, the request
    sent is recorded with a note that the log holds that writer's commit before it (as 0107
    does for a whole answer), the next request sees what that writer wrote, and nothing is
    recorded twice."""
    inner = MemoryStore()
    store = LoggedStore(inner)
    other = build_service(store=inner, workspace=str(tmp_path))
    steps = [bash(f"echo {n}") for n in range(5)]
    note = "A note another agent left in this session."

    another_writer_first = _writes_first(other, note, lambda: proxy)

    try:
        with (
            scripted(steps) as (model, up),
            proxy_for(up, tmp_path, store) as (proxy, base),
        ):
            talk = Conversation(base)
            with httpx.Client() as client:
                sid, _own, bodies = _third_request_meets(
                    talk, client, proxy, model, store, another_writer_first, stream=True
                )
                sent = [json.dumps(b) for b in bodies]
                talk.send(client)
                after = json.dumps(model.requests[-1].body)
            assert _landed(store, "output of echo 2"), "the fourth request's commit never landed"
            records = proxy.service.requests(sid)
    finally:
        other.close()
    assert len(sent) == 1  # given as it came: not sent again
    assert note not in sent[0] and note in after
    assert "another writer" in str(records[2].facts.note)
    assert [r.n for r in records] == [1, 2, 3, 4]
    assert sum(1 for m in talk.messages if m["role"] == "tool") == 4
    assert _notes(inner, tmp_path, sid).count(note) == 1  # recorded once


def test_a_logged_commit_refused_before_a_streamed_answers_context_calls(
    tmp_path: Path,
) -> None:
    """A streamed answer holding context calls: the proxy knows the logged commit's decision
    before it acts on the session (decision 0138). Another writer came first, so the request
    built again on what it left is sent again, and the client gets one answer, to it."""
    inner = MemoryStore()
    store = LoggedStore(inner)
    other = build_service(store=inner, workspace=str(tmp_path))
    steps = iter(
        [bash("echo 0"), bash("echo 1"), Step("", (("context_activate", {"id": "#1"}),))]
        + [bash(f"echo {n}") for n in range(2, 6)]
    )  # one a request, in the order the model gets them
    note = "A note another agent left in this session."

    def script(_seen: Seen) -> Step:
        return next(steps)

    another_writer_first = _writes_first(other, note, lambda: proxy)

    try:
        with (
            scripted(script) as (model, up),
            proxy_for(up, tmp_path, store) as (proxy, base),
        ):
            talk = Conversation(base)
            with httpx.Client() as client:
                sid, _own, bodies = _third_request_meets(
                    talk, client, proxy, model, store, another_writer_first, stream=True
                )
                sent = [json.dumps(b) for b in bodies]
            records = proxy.service.requests(sid)
    finally:
        other.close()
    assert "context_activate" in sent[0] and note not in sent[0]
    assert len(sent) == 2 and note in sent[1]  # built again on the other writer's commit
    assert [m.get("tool_calls") is None for m in talk.messages if m["role"] == "assistant"] == [
        False
    ] * 3
    assert [r.n for r in records] == [1, 2, 3]  # the request sent again has the third


def test_a_requests_log_entries_are_measured_after_its_body_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log entries a request's batch writes are encoded and measured (their JSON, the
    snapshot rule) at the batch's commit, after the managed body is built and handed to the
    upstream, not while it is built (decision 0168); every entry is measured by the commit."""
    from selfctx.adapters.proxy.app import Proxy
    from selfctx.application import runner
    from selfctx.application.persistence import with_size as sized

    measured: list[int] = []

    def counting(entry: dict[str, Any], entry_json: str) -> tuple[str, int]:
        measured.append(int(entry["seq"]))
        return sized(entry, entry_json)

    monkeypatch.setattr(runner, "with_size", counting)
    before_hand: list[list[int]] = []
    start = [0]
    ingest, content = Proxy._ingest, Proxy._content

    def ingesting(self: Proxy, turn: Any, hand: Callable[[], None]) -> Any:
        start[0] = len(measured)
        return ingest(self, turn, hand)

    def building(self: Proxy, turn: Any) -> bytes:
        body = content(self, turn)  # the body to hand to the upstream, built
        before_hand.append(measured[start[0] :])
        return body

    monkeypatch.setattr(Proxy, "_ingest", ingesting)
    monkeypatch.setattr(Proxy, "_content", building)
    store = MemoryStore()
    with (
        scripted([bash(f"echo {n}") for n in range(4)]) as (_model, upstream),
        proxy_for(upstream, tmp_path, store) as (_proxy, base),
        httpx.Client() as client,
    ):
        conversation = Conversation(base)
        for _ in range(4):
            conversation.send(client)
    assert len(before_hand) == 4
    # the session's first entry is measured at once (it always takes a snapshot); after it,
    # none of a request's entries before its body is built (main's tree: each of them)
    assert before_hand[0] in ([], [1])
    assert before_hand[1:] == [[], [], []]

    def stored() -> list[int]:
        docs = [store.get(i) for i in store.ids_of_type(LOG_TYPE)]
        return sorted(int(e["seq"]) for d in docs if d is not None for e in log_entries(d))

    deadline = time.monotonic() + 10  # the last commit lands by the answer; bounded anyway
    while len(stored()) < len(measured) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert stored() == sorted(measured) == list(range(1, len(measured) + 1))
