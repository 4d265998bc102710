"""How a request finds its session: the header, the client's conversation id with the first user
message, the first user message alone; and two clients at once, each in its own session."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
import pytest

from selfctx.adapters.harness.messages import Message
from selfctx.adapters.proxy.providers import Anthropic, Responses
from selfctx.adapters.proxy.scripted import Seen, Step
from selfctx.adapters.proxy.sessions import first_user_text, session_id_for
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
