"""What a request adds to its session is committed while the managed request is upstream
(decision 0078), and the answer waits for that commit: a store that fails meanwhile gives the
client the answer to its own request, and loses nothing; a commit refused because another writer
came first sends the request again if what the model should see changed."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.memory import MemoryStore
from selfctx.adapters.proxy.scripted import ScriptedModel, Step
from selfctx.domain.chat import AssistantMessage, UserMessage
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

    def send(self, client: httpx.Client) -> dict[str, Any]:
        answer = client.post(self.base + PATH, json=self.body(), headers=HEADERS, timeout=30)
        answer.raise_for_status()
        message = answer.json()["choices"][0]["message"]
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


def _commands(store: Any, workspace: Path, session_id: str) -> list[str]:
    """The commands of the calls the stored session holds, in order."""
    service = build_service(store=store, workspace=str(workspace))
    try:
        service.resume_session(session_id)
        turns = service.state(session_id).turns
        messages = [m for t in turns for m in t.messages if isinstance(m, AssistantMessage)]
        return [str(c.arguments.get("command")) for m in messages for c in m.tool_calls]
    finally:
        service.close()


def _on_another_thread(write: Callable[[], None]) -> None:
    """Another writer's commit, made on a thread of its own while the caller waits (as another
    process's would land between the proxy's reads and its commit)."""
    done = threading.Event()

    def run() -> None:
        write()
        done.set()

    threading.Thread(target=run).start()
    assert done.wait(10)


def test_the_commit_is_made_while_the_request_is_upstream(tmp_path: Path) -> None:
    store = WrappedStore(MemoryStore())
    steps = [bash(f"echo {n}") for n in range(4)]
    seen: dict[str, Any] = {}

    def commit_once_upstream() -> None:
        # The first commit made for the request: it waits until the model has the request
        # (which it could not, were the commit made before the request was sent).
        seen["upstream_first"] = _model_has(model, seen["want"])
        time.sleep(0.2)  # the answer is back by now: it must wait for the commit all the same
        seen["committed_at"] = time.monotonic()

    with scripted(steps) as (model, up), proxy_for(up, tmp_path, store) as (proxy, base):
        talk = Conversation(base)
        with httpx.Client() as client:
            talk.send(client)
            talk.send(client)
            sid = next(iter(proxy.sessions.items()))
            seen["want"] = len(model.requests) + 1
            store.on_commit = commit_once_upstream
            talk.send(client)
            answered_at = time.monotonic()
            talk.send(client)
    assert seen["upstream_first"], "a commit was made before the request went upstream"
    assert answered_at >= seen["committed_at"], "the answer came before the commit was made"
    # every call the client sent back (the last answer's call is recorded when it comes back)
    assert _commands(store.inner, tmp_path, sid) == [f"echo {n}" for n in range(3)]


def test_a_store_that_fails_meanwhile_gives_the_answer_to_the_clients_own_request(
    tmp_path: Path,
) -> None:
    store = WrappedStore(MemoryStore())
    steps = [bash(f"echo {n}") for n in range(5)]
    with scripted(steps) as (model, up), proxy_for(up, tmp_path, store) as (proxy, base):
        talk = Conversation(base)
        with httpx.Client() as client:
            talk.send(client)
            talk.send(client)
            sid = next(iter(proxy.sessions.items()))
            before = len(model.requests)
            store.fail_commits = 1  # the commit of what this request adds, with its record
            own = json.loads(json.dumps(talk.body()))
            talk.send(client)
            sent = [r.body for r in model.requests[before:]]
            talk.send(client)  # the store is back: what the failed one added is recorded now
            talk.send(client)
    # the model was asked twice: the managed request, whose answer was dropped, then the
    # client's own, unchanged (no context tools: an answer built from nothing that was lost)
    assert len(sent) == 2
    assert "context_activate" in json.dumps(sent[0])
    assert sent[1] == own
    assert _commands(store.inner, tmp_path, sid) == [f"echo {n}" for n in range(4)]


def test_a_commit_refused_for_another_writer_sends_the_request_again(tmp_path: Path) -> None:
    inner = MemoryStore()
    store = WrappedStore(inner)
    other = build_service(store=inner, workspace=str(tmp_path))
    steps = [bash(f"echo {n}") for n in range(5)]
    note = "A note another agent left in this session."

    sid = ""

    def another_writer_first() -> None:  # beside the proxy's first commit for the request
        def write() -> None:
            other.resume_session(sid)
            other.record_user_message(sid, note)

        _on_another_thread(write)

    try:
        with scripted(steps) as (model, up), proxy_for(up, tmp_path, store) as (proxy, base):
            talk = Conversation(base)
            with httpx.Client() as client:
                talk.send(client)
                talk.send(client)
                sid = next(iter(proxy.sessions.items()))
                before = len(model.requests)
                store.on_commit = another_writer_first
                talk.send(client)
                sent = [json.dumps(r.body) for r in model.requests[before:]]
                talk.send(client)
    finally:
        other.close()
    # sent again, with what the other writer added; the client got one answer (its 3 calls)
    assert len(sent) == 2
    assert note not in sent[0] and note in sent[1]
    assert sum(1 for m in talk.messages if m["role"] == "tool") == 4
    service = build_service(store=inner, workspace=str(tmp_path))
    try:
        service.resume_session(sid)
        turns = service.state(sid).turns
        notes = [m for t in turns for m in t.messages if isinstance(m, UserMessage)]
        assert sum(1 for m in notes if m.text == note) == 1
    finally:
        service.close()


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
    entries = [str(d["xt/id"]) for d in commits[-1] if str(d["xt/id"]).startswith("log:")]
    assert records[-1].seq == max(int(i.rsplit(":", 1)[1]) for i in entries)


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
