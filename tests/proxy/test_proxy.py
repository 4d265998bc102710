"""The proxy, served on 127.0.0.1, between a minimal agent of each API and the scripted model:
streamed and not, context calls answered by the proxy alone, in parallel and mixed with the
client's own calls, the round cap, errors and limits, headers and secrets, and the log line."""

from __future__ import annotations

import contextlib
import gc
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.memory import MemoryStore
from selfctx.adapters.proxy import Proxy, ProxyConfig
from selfctx.adapters.proxy.scripted import ScriptedModel, Seen, Step
from selfctx.adapters.proxy.serving import serve_in_thread, tune_collector
from selfctx.application.ports.store import ObjectStore
from selfctx.domain.chat import AssistantMessage
from tests.proxy.drive import PATHS, Agent, read_stream, tool_calls
from tests.proxy.support import scripted

APIS = ["anthropic", "openai", "responses"]


@contextlib.contextmanager
def proxy_for(
    upstream: str, workspace: Path, store: ObjectStore | None = None, **config: Any
) -> Iterator[tuple[Proxy, str]]:
    service = build_service(store=store or MemoryStore(), workspace=str(workspace))
    # the rounds' mechanics, tested on conversations too small to pay for the context tools
    settings = {"cwd": str(workspace), "roots": (str(workspace),), "never_larger": False, **config}
    upstreams = {"upstream_anthropic": upstream, "upstream_openai": upstream + "/v1"}
    proxy = Proxy(service, ProxyConfig(**{**upstreams, **settings}))
    try:
        with serve_in_thread(proxy.app) as base:
            yield proxy, base
    finally:
        service.close()


@contextlib.contextmanager
def front_for(
    upstream: str, workspace: Path, store: ObjectStore | None = None, **config: Any
) -> Iterator[tuple[Proxy, str]]:
    """As :func:`proxy_for`, behind the front of ``selfctx proxy --workers`` (``relay.Relay``):
    the proxy is its one worker, reached with the run's secret; the front has the token, if
    any, and the checks."""
    from selfctx.adapters.proxy.relay import Relay, relay_in_thread

    secret = "the-run's-secret-0123456789"
    token = config.pop("token", None)
    with (
        proxy_for(upstream, workspace, store, token=secret, **config) as (proxy, worker),
        relay_in_thread(Relay([worker], secret, token=token)) as base,
    ):
        yield proxy, base


SERVED = pytest.mark.parametrize("served", [proxy_for, front_for], ids=["one", "front"])
"""A test of what the proxy refuses, for one process and for the front of workers."""


def bash(command: str, text: str = "") -> Step:
    return Step(text, (("bash", {"command": command}),))


def names_in(agent: Agent) -> set[str]:
    """Tool names in everything the client received."""
    return {name for response in agent.responses for _, name, _ in _calls(agent.api, response)}


def _calls(api: str, response: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return tool_calls(api, response)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("api", APIS)
def test_a_context_call_is_answered_by_the_proxy_alone(
    api: str, stream: bool, tmp_path: Path
) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    steps = [
        bash("ls", "Looking around."),
        bash("cat a.py"),
        Step("Checking the listing again.", (("context_activate", {"id": "#1"}),)),
        Step("Done."),
    ]
    outputs = {"ls": "a.py\n", "cat a.py": "x = 1\n"}
    with scripted(steps) as (model, up), proxy_for(up, tmp_path) as (proxy, base):
        agent = Agent(api, base, stream=stream, run_tool=lambda n, a: outputs[a["command"]])
        with httpx.Client() as client:
            agent.run(client)
        session_id = next(iter(proxy.sessions.items()))
        chat = proxy.service.state(session_id).turns
    # the client saw its own two calls and the final answer, never the context call
    assert names_in(agent) == {"bash"}
    assert len(agent.responses) == 3
    assert "context_activate" not in "".join(agent.raw)
    assert "Checking the listing again." not in "".join(agent.raw)
    # the model was asked four times: the last after the proxy answered the context call
    received = [json.dumps(r.body) for r in model.requests]
    assert len(received) == 4
    assert all("context_activate" in r for r in received)  # the tools are offered every time
    assert "activated" in received[3] or "a.py" in received[3]
    # the session holds the context call and its answer, after the client's own messages
    recorded = [m for turn in chat for m in turn.messages]
    assert any(
        isinstance(m, AssistantMessage) and m.tool_calls[0].name == "context_activate"
        for m in recorded
        if getattr(m, "tool_calls", ())
    )


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("api", APIS)
def test_mixed_and_parallel_calls(api: str, stream: bool, tmp_path: Path) -> None:
    """A response calling two context tools and a tool of the client's: the client gets only its
    own call (renumbered to be first), the proxy answers the two others; the stream stays well
    formed (``read_stream`` checks indices and order)."""
    steps = [
        bash("ls"),
        Step(
            "Pinning and looking.",
            (
                ("context_pin", {"id": "#1"}),
                ("bash", {"command": "cat b.py"}),
                ("context_unpin", {"id": "#1"}),
            ),
        ),
        Step("Done."),
    ]
    with scripted(steps) as (model, up), proxy_for(up, tmp_path) as (_proxy, base):
        agent = Agent(api, base, stream=stream)
        with httpx.Client() as client:
            agent.run(client)
    second = _calls(api, agent.responses[1])
    assert [(n, a) for _, n, a in second] == [("bash", {"command": "cat b.py"})]
    assert len(model.requests) == 3  # no extra round: the client had a call to run
    third = json.dumps(model.requests[2].body)
    assert "is pinned" in third and "is not pinned" in third  # both answers reached the model
    assert "ran bash" in third


@pytest.mark.parametrize("api", APIS)
def test_rounds_are_capped(api: str, tmp_path: Path) -> None:
    """A model that only ever calls context tools is asked at most ``max_rounds`` more times;
    the last request forbids tool calls."""

    def script(seen: Seen) -> Step:
        if seen.body.get("tool_choice") in ("none", {"type": "none"}):
            return Step("Giving up on the context tools.")
        return Step(calls=(("context_pin", {"id": "#1"}),))

    with scripted(script) as (model, up), proxy_for(up, tmp_path, max_rounds=2) as (_, base):
        agent = Agent(api, base)
        with httpx.Client() as client:
            agent.run(client)
    assert len(model.requests) == 3
    assert model.requests[-1].body["tool_choice"] in ("none", {"type": "none"})
    assert names_in(agent) == set()


def test_thinking_blocks_reach_the_provider_with_their_signatures(tmp_path: Path) -> None:
    """Decision 0038: the assistant turn that called a tool goes back with its thinking block
    and signature unchanged, in the proxy's own round and in the client's next request."""
    steps = [
        Step("Looking.", (("bash", {"command": "ls"}),), thinking="I should list the files."),
        Step(calls=(("context_pin", {"id": "#1"}),), thinking="Keep that listing."),
        Step("Done."),
    ]
    with scripted(steps) as (model, up), proxy_for(up, tmp_path) as (_, base):
        agent = Agent("anthropic", base, stream=True)
        with httpx.Client() as client:
            agent.run(client)
    first = agent.responses[0]["content"][0]
    assert first["type"] == "thinking" and first["signature"].startswith("sig-")
    # the proxy's round: its context call's turn carries its thinking block
    round_two = model.requests[2].body["messages"]
    context_turn = next(
        m for m in round_two if m["role"] == "assistant" and "context_pin" in json.dumps(m)
    )
    assert context_turn["content"][0]["type"] == "thinking"
    assert context_turn["content"][0]["thinking"] == "Keep that listing."
    # the client's first turn went up again with its block and signature unchanged
    listed = next(m for m in round_two if m["role"] == "assistant")
    assert listed["content"][0] == first


def test_upstream_errors_reach_the_client_as_the_provider_shaped_them(tmp_path: Path) -> None:
    error = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
    with scripted([Step(error=(429, error))]) as (_, up), proxy_for(up, tmp_path) as (_, base):
        agent = Agent("anthropic", base)
        with httpx.Client() as client:
            answer = agent.send(client)
    assert answer.status_code == 429
    assert answer.json() == error


@pytest.mark.parametrize("api", APIS)
def test_bad_bodies_limits_and_an_unreachable_upstream(api: str, tmp_path: Path) -> None:
    with (
        scripted([Step("hi")]) as (_, up),
        proxy_for(up, tmp_path, max_body_bytes=2000) as (
            _,
            base,
        ),
        httpx.Client() as client,
    ):
        path = PATHS[api]
        not_json = client.post(
            base + path, content=b"{not json", headers={"content-type": "application/json"}
        )
        no_messages = client.post(base + path, json={"model": "m"})
        too_big = client.post(base + path, json={"messages": ["x" * 3000]})
    for answer, status, words in [
        (not_json, 400, "not JSON"),
        (no_messages, 400, "needs"),
        (too_big, 413, "larger than 2000 bytes"),
    ]:
        assert answer.status_code == status
        shaped = answer.json()
        if api == "anthropic":
            assert shaped["type"] == "error" and words in shaped["error"]["message"]
        else:
            assert words in shaped["error"]["message"]
    with proxy_for("http://127.0.0.1:9", tmp_path) as (_, base), httpx.Client() as client:
        answer = Agent(api, base).send(client)
    assert answer.status_code == 502
    assert "unreachable" in json.dumps(answer.json())


def test_headers_pass_through_and_secrets_stay_out_of_logs_and_store(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "sk-ant-secret-value-0123456789"
    headers = {
        "x-api-key": secret,
        "authorization": f"Bearer {secret}",
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "interleaved-thinking-2025-05-14,context-management-2025-06-27",
    }
    committed: list[str] = []

    class Recording(MemoryStore):
        def commit(self, puts: Any, expect: Any = ()) -> Any:
            committed.append(json.dumps(list(puts)))
            return super().commit(puts, expect)

    steps = [bash("ls"), Step(calls=(("context_pin", {"id": "#1"}),)), Step("Done.")]
    caplog.set_level(logging.DEBUG)
    with scripted(steps) as (model, up), proxy_for(up, tmp_path, store=Recording()) as (_, base):
        agent = Agent("anthropic", base, stream=True, headers=headers)
        with httpx.Client() as client:
            agent.run(client)
    for received in model.requests:
        for name, value in headers.items():
            assert received.headers[name] == value
    assert committed
    assert not any(secret in text for text in committed)
    assert caplog.records
    assert not any(secret in record.getMessage() for record in caplog.records)


def test_one_log_line_per_request(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    steps = [bash("ls"), bash("ls -a"), Step("Done.")]
    caplog.set_level(logging.INFO, logger="selfctx.proxy")
    with scripted(steps) as (_, up), proxy_for(up, tmp_path) as (_, base):
        agent = Agent("openai", base)
        with httpx.Client() as client:
            agent.run(client)
    lines = [r.getMessage() for r in caplog.records if r.name == "selfctx.proxy"]
    assert len(lines) == 3
    for line in lines:
        for field in ("session=openai.", "naive_tokens=", "managed_tokens=", "collapsed="):
            assert field in line


def test_keepalive_comments_while_the_answer_is_prepared(tmp_path: Path) -> None:
    steps = [Step("Slow answer.", delay=1.0)]
    with scripted(steps) as (_, up), proxy_for(up, tmp_path, keepalive=0.2) as (_, base):
        agent = Agent("anthropic", base, stream=True)
        with httpx.Client() as client:
            agent.run(client)
    assert agent.raw[0].startswith(": keepalive\n\n")
    assert read_stream("anthropic", agent.raw[0])["content"][0]["text"] == "Slow answer."


@SERVED
def test_a_token_is_required_when_configured(served: Any, tmp_path: Path) -> None:
    token = "t0ken-of-twenty-chars"
    with (
        scripted([Step("hi")]) as (_, up),
        served(up, tmp_path, token=token) as (_, base),
        httpx.Client() as client,
    ):
        refused = Agent("anthropic", base).send(client)
        wrong = Agent("anthropic", base, headers={"x-selfctx-token": "nope"}).send(client)
        by_header = Agent("anthropic", base, headers={"x-selfctx-token": token}).send(client)
        by_path = Agent("anthropic", f"{base}/t/{token}").send(client)
    assert refused.status_code == 401 and wrong.status_code == 401
    assert by_header.status_code == 200 and by_path.status_code == 200


def test_other_paths_pass_through(tmp_path: Path) -> None:
    with (
        scripted([Step("hi")]) as (_, up),
        proxy_for(up, tmp_path) as (_, base),
        httpx.Client() as client,
    ):
        counted = client.post(
            base + "/v1/messages/count_tokens",
            json={"model": "m", "messages": [{"role": "user", "content": "hello"}]},
            headers={"anthropic-version": "2023-06-01"},
        )
        unknown = client.get(base + "/v1/nothing-here")
    assert counted.status_code == 200 and counted.json()["input_tokens"] > 0
    assert unknown.status_code == 404


def test_previous_response_id_is_passed_on_unmanaged(tmp_path: Path) -> None:
    with (
        scripted([Step("hi")]) as (model, up),
        proxy_for(up, tmp_path) as (proxy, base),
        httpx.Client() as client,
    ):
        answer = client.post(
            base + "/v1/responses",
            json={"model": "m", "previous_response_id": "resp_1", "input": "go on"},
        )
    assert answer.status_code == 200
    assert model.requests[0].body["input"] == "go on"  # unchanged: the proxy cannot manage it
    assert not proxy.sessions.items()


def test_the_model_server_is_scripted_by_turn() -> None:
    """The scripted model answers by the number of assistant turns it was sent."""
    model = ScriptedModel([Step("one"), Step("two")])
    assert model.script(Seen("openai", {}, 0)).text == "one"
    assert model.script(Seen("openai", {}, 5)).text == "two"


def test_a_benchmarks_model_keeps_no_request() -> None:
    """``keep=False`` (the benchmark's model): it answers as before and keeps nothing."""
    for keep in (True, False):
        model = ScriptedModel([Step("ok")], keep=keep)
        with serve_in_thread(model.app) as base:
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            answer = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=30)
        assert answer.json()["choices"][0]["message"]["content"] == "ok"
        assert len(model.requests) == (1 if keep else 0)


def test_an_activated_output_stays_until_deactivated(tmp_path: Path) -> None:
    """The model brings an output back; the client's next request (and the one after) still
    shows it in full, through the proxy."""
    log = "".join(f"line {n}: a record the agent will want again\n" for n in range(150))
    steps = [
        bash("cat a.log"),
        bash("ls"),
        bash("pwd"),
        Step("Back to the log.", (("context_activate", {"id": "#1"}),)),
        bash("echo one"),
        bash("echo two"),
        Step("Done."),
    ]
    outputs = {"cat a.log": log, "ls": "a.log\n", "pwd": "/w\n", "echo one": "one\n"}
    low = {"trigger_tokens": 200, "clear_at_least": 1, "keep_recent": 1}
    with (
        scripted(steps) as (model, up),
        proxy_for(up, tmp_path, policy="inline", policy_options=low) as (_, base),
    ):
        agent = Agent("openai", base, run_tool=lambda n, a: outputs.get(a["command"], "two\n"))
        with httpx.Client() as client:
            agent.run(client)
    before = json.dumps(model.requests[3].body)
    assert "line 149: a record" not in before, "the output never collapsed: nothing to bring back"
    after = [json.dumps(r.body) for r in model.requests[4:]]
    assert len(after) == 3
    for sent in after:
        assert sent.count("line 149: a record") >= 1, "the activated output collapsed again"


def test_the_collector_is_tuned_for_a_server() -> None:
    """What is loaded is frozen out of the scans; the young generation is collected every 10,000
    allocations, the middle one every second time (decisions 0058, 0074)."""
    before = gc.get_threshold()
    try:
        tune_collector()
        assert gc.get_threshold() == (10_000, 2, 100)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_each_request_is_recorded_while_it_goes_upstream(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record of a request (decision 0055) is written beside the upstream call, complete and
    in order when the client has its answer; one that cannot be written is reported and the
    exchange goes on (decision 0074)."""
    steps = [bash("ls"), Step("Done.", delay=0.2)]
    with scripted(steps) as (_, up), proxy_for(up, tmp_path) as (proxy, base):
        agent = Agent("openai", base)
        with httpx.Client() as client:
            agent.run(client)
        (session_id,) = proxy.sessions.items()
        assert [r.n for r in proxy.service.requests(session_id)] == [1, 2]

    def failing(*_args: Any, **_kwargs: Any) -> None:
        raise OSError("the store is away")

    monkeypatch.setattr("selfctx.adapters.proxy.app.record_request", failing)
    caplog.set_level(logging.WARNING, logger="selfctx.proxy")
    with scripted([Step("Fine.")]) as (_, up), proxy_for(up, tmp_path) as (_, base):
        body = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
        answer = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=30)
    assert answer.status_code == 200
    assert answer.json()["choices"][0]["message"]["content"] == "Fine."
    assert any("was not written" in r.getMessage() for r in caplog.records)
