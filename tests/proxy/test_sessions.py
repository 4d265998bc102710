"""How a request finds its session: the header, the client's conversation id with the first user
message, the first user message alone, always with the credentials; a request joins a session only
if it continues it; two clients at once, each in its own session."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from selfctx.adapters.harness.messages import Message
from selfctx.adapters.memory import MemoryStore
from selfctx.adapters.proxy.providers import Anthropic, Responses
from selfctx.adapters.proxy.scripted import Seen, Step
from selfctx.adapters.proxy.sessions import credential_digest, first_user_text, session_id_for
from tests.proxy.drive import Agent
from tests.proxy.support import scripted
from tests.proxy.test_proxy import proxy_for

FIRST = "Fix the bug."
OTHER = "Write the docs."


def test_the_header_names_the_session() -> None:
    assert session_id_for("anthropic", "abc", FIRST, "my-session") == "my-session"


def test_a_client_id_with_the_first_user_message() -> None:
    one = session_id_for("anthropic", "2f1c-77", FIRST)
    assert one.startswith("2f1c-77.")
    messages = [Message("system", "sys"), Message("user", FIRST), Message("assistant", "ok")]
    assert session_id_for("anthropic", "2f1c-77", first_user_text(messages)) == one
    # a sub-agent of the same client session is a conversation of its own
    assert session_id_for("anthropic", "2f1c-77", OTHER) != one
    assert session_id_for("anthropic", "9999", FIRST) != one


def test_without_an_id_the_first_user_message_alone() -> None:
    one = session_id_for("openai", None, FIRST)
    assert one.startswith("openai.")
    assert session_id_for("openai", None, first_user_text([Message("user", FIRST)])) == one
    assert session_id_for("openai", None, OTHER) != one
    assert session_id_for("responses", None, FIRST) != one


def test_unsafe_client_ids_make_valid_session_ids() -> None:
    sid = session_id_for("anthropic", "a b/c\x00d" * 40, FIRST)
    assert len(sid) <= 200 and all(c.isalnum() or c in "._@+=-" for c in sid)


def test_client_ids_as_the_clients_send_them() -> None:
    claude = {"x-claude-code-session-id": "f2df1e59-d54f"}
    assert Anthropic().client_key({}, claude) == "f2df1e59-d54f"
    user_id = json.dumps({"device_id": "d", "account_uuid": "", "session_id": "s-42"})
    assert Anthropic().client_key({"metadata": {"user_id": user_id}}, {}) == "s-42"
    assert Anthropic().client_key({"metadata": {"user_id": "plain"}}, {}) == "plain"
    assert Anthropic().client_key({}, {}) is None
    assert Responses().client_key({}, {"session-id": "01a2"}) == "01a2"
    assert Responses().client_key({"prompt_cache_key": "k"}, {}) == "k"
    assert Responses().client_key({"client_metadata": {"session_id": "c"}}, {}) == "c"


@pytest.mark.parametrize("api", ["anthropic", "openai", "responses"])
def test_two_clients_at_once_each_in_its_own_session(api: str, tmp_path: Path) -> None:
    """Two agents run their conversations through one proxy at the same time, interleaved; each
    request reaches the model with its own conversation only, and the store has two sessions."""

    def script(seen: Seen) -> Step:
        who = "alpha" if "Task alpha" in seen.text else "beta"
        if seen.turn < 4:
            return Step(calls=(("bash", {"command": f"echo {who} {seen.turn}"}),))
        return Step(f"{who} done")

    barrier = threading.Barrier(2)
    errors: list[BaseException] = []
    agents = {}
    with scripted(script) as (model, up), proxy_for(up, tmp_path) as (proxy, base):

        def run(name: str, headers: dict[str, str]) -> None:
            agent = Agent(api, base, task=f"Task {name}", stream=name == "beta", headers=headers)
            agents[name] = agent
            try:
                barrier.wait(timeout=30)
                with httpx.Client() as client:
                    agent.run(client)
            except BaseException as exc:  # reported below, in the test's thread
                errors.append(exc)

        threads = [
            threading.Thread(target=run, args=("alpha", {})),
            threading.Thread(target=run, args=("beta", {"x-claude-code-session-id": "beta-id"})),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        sessions = dict(proxy.sessions.items())
    assert not errors, errors
    assert len(sessions) == 2
    for request in model.requests:
        text = json.dumps(request.body)
        assert ("Task alpha" in text) != ("Task beta" in text)
        mine = "alpha" if "Task alpha" in text else "beta"
        other = "beta" if mine == "alpha" else "alpha"
        assert f"echo {other}" not in text
    for name, agent in agents.items():
        final = json.dumps(agent.responses[-1])
        assert f"{name} done" in final


KEY_A = "sk-ant-alpha-0123456789abcdef"
KEY_B = "sk-ant-bravo-fedcba9876543210"
SECRET_A = "DATABASE_PASSWORD=hunter2-of-alpha"


def test_credentials_are_part_of_the_session_and_never_in_its_id() -> None:
    one = credential_digest({"x-api-key": KEY_A})
    assert one and KEY_A not in one
    assert credential_digest({"x-api-key": KEY_B}) != one
    assert credential_digest({"authorization": f"Bearer {KEY_A}"}) != ""
    assert credential_digest({}, [("key", KEY_A)]) not in ("", one)
    assert credential_digest({}, [("model", "x")]) == ""
    a = session_id_for("anthropic", "cc-1", FIRST, credential=one)
    other = credential_digest({"x-api-key": KEY_B})
    assert a != session_id_for("anthropic", "cc-1", FIRST, credential=other)
    assert KEY_A not in a


def _user(api: str, text: str) -> dict[str, Any]:
    if api == "responses":
        return {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": text}],
        }
    return {"role": "user", "content": text}


def _run_both(api: str, tmp_path: Path, key_b: str) -> list[str]:
    """Agent A (KEY_A) reads a secret; agent B opens its conversation with the same first message
    and the same client id, with ``key_b``; returns what the model got, as text."""

    def script(seen: Seen) -> Step:
        if seen.turn == 0:
            return Step(calls=(("bash", {"command": "cat .env"}),))
        return Step(f"done {seen.turn}")

    shared = {"x-claude-code-session-id": "shared-id"}
    a_headers = {"x-api-key": KEY_A, "authorization": f"Bearer {KEY_A}", **shared}
    b_headers = {"x-api-key": key_b, "authorization": f"Bearer {key_b}", **shared}
    with scripted(script) as (model, up), proxy_for(up, tmp_path) as (proxy, base):
        a = Agent(api, base, headers=a_headers, run_tool=lambda n, args: SECRET_A)
        b = Agent(api, base, headers=b_headers, run_tool=lambda n, args: "nothing here")
        with httpx.Client() as client:
            a.step(client)  # A: cat .env
            b.step(client)  # B: cat .env (its own)
            a.step(client)  # A: the secret goes up
            b.step(client)
            a.conversation.append(_user(api, "Now the docs."))
            a.step(client)
        sessions = dict(proxy.sessions.items())
    assert len(sessions) == 2, list(sessions)
    return [json.dumps(r.body) for r in model.requests]


@pytest.mark.parametrize("api", ["anthropic", "openai", "responses"])
@pytest.mark.parametrize("same_key", [False, True], ids=["two-keys", "one-key"])
def test_two_conversations_never_share_a_session(api: str, same_key: bool, tmp_path: Path) -> None:
    """Two conversations that open with the same message and the same client id: with two keys
    (two users), and with one key (B does not carry A's answers, so it does not continue A's
    conversation: it is a branch of the base). B's requests never carry A's secret, A's never
    carry B's tool output."""
    for sent in _run_both(api, tmp_path, KEY_A if same_key else KEY_B):
        assert not (SECRET_A in sent and "nothing here" in sent)


def test_a_conversation_that_rebuilds_its_messages_stays_one_session(tmp_path: Path) -> None:
    """A client that rewrites a message in the middle of its list on every request (aider's
    file-context message) still continues its session: it carries the model's answers."""
    with (
        scripted(lambda seen: Step(f"answer {seen.turn}")) as (_, up),
        proxy_for(up, tmp_path) as (proxy, base),
        httpx.Client() as client,
    ):
        history: list[dict[str, Any]] = []
        for n in range(4):
            messages = [
                {"role": "system", "content": "sys"},
                {"role": "user", "content": "an example request"},
                {"role": "assistant", "content": "an example answer"},
                *history,
                {"role": "user", "content": f"Here are the files, version {n}"},
                {"role": "assistant", "content": "Ok."},
                {"role": "user", "content": f"question {n}"},
            ]
            answer = client.post(
                base + "/v1/chat/completions",
                json={"model": "m", "messages": messages},
                headers={"authorization": "Bearer k"},
            )
            assert answer.status_code == 200
            history += [messages[-1], answer.json()["choices"][0]["message"]]
        assert len(proxy.sessions.items()) == 1


def test_after_a_restart_only_a_continuing_conversation_resumes_its_session(
    tmp_path: Path,
) -> None:
    """The proxy restarts on the same store: the client that goes on carries the stored session's
    last answer and resumes it; another conversation with the same base gets a branch."""
    store = MemoryStore()
    steps = [Step(calls=(("bash", {"command": "ls"}),)), Step("listed"), Step("more")]
    with scripted(steps) as (_, up):
        with proxy_for(up, tmp_path, store=store) as (_, base), httpx.Client() as client:
            a = Agent("openai", base, headers={"authorization": "Bearer k"})
            a.step(client)
            a.step(client)
        with proxy_for(up, tmp_path, store=store) as (proxy, base), httpx.Client() as client:
            a.base = base
            a.conversation.append({"role": "user", "content": "go on"})
            a.step(client)
            b = Agent("openai", base, headers={"authorization": "Bearer k"})
            b.step(client)
            held = list(proxy.sessions.items())
    assert len(held) == 2 and held[1] == held[0] + "-2", held


def test_a_new_conversation_that_opens_like_an_old_one_gets_none_of_it(tmp_path: Path) -> None:
    """B's first request is a prefix of A's conversation (same key, same first message): it is
    not taken for A's, so the model does not get A's history with it."""
    steps = [Step(calls=(("bash", {"command": "cat .env"}),)), Step("read it"), Step("fine")]
    with scripted(steps) as (model, up), proxy_for(up, tmp_path) as (proxy, base):
        with httpx.Client() as client:
            a = Agent("anthropic", base, run_tool=lambda n, args: SECRET_A)
            a.run(client)
            Agent("anthropic", base).send(client)
        held = list(proxy.sessions.items())
    assert SECRET_A not in json.dumps(model.requests[-1].body)
    assert len(held) == 2
