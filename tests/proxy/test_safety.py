"""The proxy as a local service: bounded rounds, nothing served for a client that left,
browser-shaped requests refused, credentials never written out, odd bodies answered with the
provider's 400, paths confined to the upstream's prefix, failed requests not taken as answered."""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from selfctx.adapters.proxy.scripted import Seen, Step
from selfctx.adapters.proxy.serving import serve_in_thread
from tests.proxy.drive import PATHS, Agent
from tests.proxy.support import scripted
from tests.proxy.test_proxy import SERVED, proxy_for

APIS = ["anthropic", "openai", "responses"]
KEY = "sk-live-0123456789abcdefSECRET"


def _stubborn(seen: Seen) -> Step:
    """A model that calls a context tool whatever it is told (``tool_choice: none`` too)."""
    if seen.turn == 0:
        return Step(calls=(("bash", {"command": "ls"}),))
    return Step(calls=(("context_pin", {"id": "#1"}),), delay=0.05)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("api", APIS)
def test_max_rounds_is_a_hard_limit(api: str, stream: bool, tmp_path: Path) -> None:
    with scripted(_stubborn) as (model, up), proxy_for(up, tmp_path, max_rounds=3) as (_, base):
        agent = Agent(api, base, stream=stream)
        with httpx.Client() as client:
            agent.step(client)  # ls
            answer = agent.send(client)
    assert len(model.requests) == 1 + 1 + 3  # the first request; the second and its 3 rounds
    assert model.requests[-1].body["tool_choice"] in ("none", {"type": "none"})
    text = answer.text
    assert "context_pin" not in text
    assert "rounds" in text and "--max-rounds" in text
    if not stream:
        assert answer.status_code == 502


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_client_that_left_is_not_served_further(stream: bool, tmp_path: Path) -> None:
    def slow(seen: Seen) -> Step:
        if seen.turn == 0:
            return Step(calls=(("bash", {"command": "ls"}),))
        return Step(calls=(("context_pin", {"id": "#1"}),), delay=0.4)

    with scripted(slow) as (model, up), proxy_for(up, tmp_path, keepalive=0.1) as (_, base):
        agent = Agent("openai", base, stream=stream)
        with httpx.Client() as client:
            agent.step(client)
        before = len(model.requests)
        with httpx.Client(timeout=0.6) as client, pytest.raises(httpx.TimeoutException):
            if stream:
                with client.stream(
                    "POST", base + PATHS["openai"], json=agent.body(), headers={}
                ) as answer:
                    started = time.monotonic()
                    for _ in answer.iter_bytes():  # keep-alive comments, then the timeout
                        if time.monotonic() - started > 0.5:
                            raise httpx.ReadTimeout("the client gives up")
            else:
                client.post(base + PATHS["openai"], json=agent.body())
        time.sleep(2.5)  # a proxy still serving would ask the model 5 more times by now
    assert len(model.requests) - before <= 2, len(model.requests) - before


@SERVED
def test_browser_shaped_requests_are_refused(served: Any, tmp_path: Path) -> None:
    with (
        scripted([Step("hi")]) as (model, up),
        served(up, tmp_path) as (proxy, base),
        httpx.Client() as client,
    ):
        body = json.dumps(Agent("anthropic", base).body())
        url = base + "/v1/messages"
        port = base.rsplit(":", 1)[1]
        attempts = {
            "text/plain from a page": client.post(
                url,
                content=body,
                headers={"content-type": "text/plain", "origin": "http://evil.example"},
            ),
            "a form": client.post(
                url, content=body, headers={"content-type": "application/x-www-form-urlencoded"}
            ),
            "json with an origin": client.post(
                url,
                content=body,
                headers={"content-type": "application/json", "origin": "http://evil.example"},
            ),
            "cross-site fetch": client.post(
                url,
                content=body,
                headers={"content-type": "application/json", "sec-fetch-site": "cross-site"},
            ),
            "DNS rebinding": client.post(
                url,
                content=body,
                headers={"content-type": "application/json", "host": f"evil.example:{port}"},
            ),
            "a page's GET": client.get(
                base + "/v1/models", headers={"sec-fetch-site": "cross-site"}
            ),
        }
        own_page = client.get(
            base + "/_selfctx/health",
            headers={"sec-fetch-site": "same-origin", "origin": base},
        )
        agent_request = Agent("anthropic", base).send(client)
        held = dict(proxy.sessions.items())
    for what, answer in attempts.items():
        assert answer.status_code in (403, 415), (what, answer.status_code)
        shaped = answer.json()
        if answer.url.path.startswith("/v1/messages"):  # in the shape of the path's API
            assert shaped["type"] == "error", what
        else:
            assert shaped["error"]["message"], what
    assert own_page.status_code == 200
    assert agent_request.status_code == 200
    assert len(model.requests) == 1 and len(held) == 1  # only the agent's request went anywhere


@SERVED
def test_credentials_stay_out_of_logs_and_error_bodies(
    served: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    # an upstream that takes the key in its URL, and is down
    with (
        served(f"http://127.0.0.1:9/gw?key={KEY}", tmp_path) as (_, base),
        httpx.Client() as client,
    ):
        down = Agent("openai", base, headers={"authorization": f"Bearer {KEY}"}).send(client)
        by_query = client.post(
            base + f"/v1/chat/completions?api-key={KEY}", json=Agent("openai", base).body()
        )
        passthrough = client.get(base + f"/v1/models?key={KEY}", headers={"api-key": KEY})
    echo = {
        "error": {"message": f"Incorrect API key provided: {KEY}", "type": "invalid_request_error"}
    }
    with (
        scripted([Step(error=(401, echo))]) as (_, up),
        served(up, tmp_path) as (_, base),
        httpx.Client() as client,
    ):
        rejected = Agent("openai", base, stream=True, headers={"authorization": f"Bearer {KEY}"})
        echoed = rejected.send(client)
    for answer in (down, by_query, passthrough):
        assert answer.status_code == 502
        assert KEY not in answer.text and "[redacted]" in answer.text
    assert echoed.status_code == 401  # the provider's own answer to the key's owner, as it came
    logged = "\n".join(r.getMessage() + (r.exc_text or "") for r in caplog.records)
    assert "unreachable" in logged
    assert KEY not in logged


def _odd(api: str, base: str, **extra: Any) -> dict[str, Any]:
    return {**Agent(api, base).body(), **extra}


@pytest.mark.parametrize("api", APIS)
def test_odd_bodies_get_the_providers_400(api: str, tmp_path: Path) -> None:
    with (
        scripted([Step("hi")]) as (_, up),
        proxy_for(up, tmp_path) as (_, base),
        httpx.Client() as client,
    ):
        path = base + PATHS[api]
        odd = [
            _odd(api, base, metadata=["not", "an", "object"]),
            _odd(api, base, metadata={"user_id": {"nested": [1, 2]}}),
            _odd(api, base, metadata="text"),
            _odd(api, base, client_metadata=[1]),
            _odd(api, base, client_metadata={"session_id": {"deep": True}}),
            _odd(api, base, prompt_cache_key=["a"]),
        ]
        answers = [client.post(path, json=body) for body in odd]
        nested = client.post(
            path,
            content=json.dumps(_odd(api, base, metadata={"user_id": "u"}))[:-1]
            + ', "deep": '
            + "[" * 100_000
            + "]" * 100_000
            + "}",
            headers={"content-type": "application/json"},
        )
    for answer in answers:
        assert answer.status_code in (200, 400), answer.text
        assert "Traceback" not in answer.text
    assert nested.status_code == 400
    shaped = nested.json()
    message = shaped["error"]["message"]
    assert "nest" in message
    if api == "anthropic":
        assert shaped["type"] == "error"


@pytest.mark.parametrize("api", APIS)
def test_a_nul_in_a_search_is_answered_to_the_model(api: str, tmp_path: Path) -> None:
    steps = [
        Step(calls=(("bash", {"command": "ls"}),)),
        Step(calls=(("context_search", {"query": "ls\u0000 \u0000"}),)),
        Step("done"),
    ]
    with scripted(steps) as (model, up), proxy_for(up, tmp_path) as (_, base):
        agent = Agent(api, base)
        with httpx.Client() as client:
            agent.run(client)
    assert len(model.requests) == 3
    assert "done" in json.dumps(agent.responses[-1])


@SERVED
def test_paths_stay_under_the_upstreams_prefix(served: Any, tmp_path: Path) -> None:
    seen: list[str] = []

    async def anything(request: Request) -> JSONResponse:
        seen.append(request.url.path)
        return JSONResponse({"path": request.url.path})

    upstream = Starlette(routes=[Route("/{path:path}", anything, methods=["GET", "POST"])])
    with (
        serve_in_thread(upstream) as up,
        served(up + "/gateway/anthropic", tmp_path, upstream_openai=up + "/gateway/openai/v1") as (
            _,
            base,
        ),
        httpx.Client() as client,
    ):
        fine = client.get(base + "/v1/models")
        escapes = [
            client.get(base + "/v1/..%2f..%2fadmin"),
            client.get(base + "/v1/%2e%2e/%2e%2e/admin"),
            client.get(base + "/v1/models%2F..%2F..%2Fsecret"),
            client.get(base + "/v1/%5c..%5cadmin"),
        ]
        root = client.get(base + "/")
    assert fine.status_code == 200 and seen == ["/gateway/openai/v1/models"]
    for answer in escapes:
        assert answer.status_code == 400, answer.text
    assert root.status_code == 200 and root.json()["proxy"] == "selfctx"
    assert seen == ["/gateway/openai/v1/models"]  # GET / was answered by the proxy


def test_a_failed_request_is_not_taken_for_answered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The upstream fails: the log says so, and the client's retry, which carries no answer,
    is the same conversation (the session was not told of an answer it never got)."""
    caplog.set_level(logging.INFO, logger="selfctx.proxy")
    failures = iter([True, False])

    def flaky(_seen: Seen) -> Step:
        if next(failures, False):
            return Step(error=(502, {"error": {"message": "bad gateway", "type": "server_error"}}))
        return Step("answered")

    with scripted(flaky) as (_, up), proxy_for(up, tmp_path) as (proxy, base):
        agent = Agent("openai", base)
        with httpx.Client() as client:
            first = agent.send(client)
            second = agent.send(client)
        held = list(proxy.sessions.items().values())
    assert first.status_code == 502 and second.status_code == 200
    lines = [r.getMessage() for r in caplog.records if "session=" in r.getMessage()]
    assert "status=502" in lines[0] and "status=200" in lines[1]
    assert len(held) == 1
    assert held[0].answer  # only the answer the client got


def test_many_clients_hit_the_round_limit_at_once(tmp_path: Path) -> None:
    """Eight clients whose model never stops calling context tools: each gets its error, and the
    model is asked exactly 1 + max_rounds times per client request."""
    with scripted(_stubborn) as (model, up), proxy_for(up, tmp_path, max_rounds=2) as (_, base):
        errors: list[BaseException] = []

        def run(n: int) -> None:
            try:
                agent = Agent("openai", base, task=f"task {n}")
                with httpx.Client() as client:
                    agent.step(client)
                    assert agent.send(client).status_code == 502
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    assert not errors, errors
    assert len(model.requests) == 8 * (1 + 1 + 2)


def test_an_idle_upstream_connection_is_dropped_before_the_server_drops_it() -> None:
    """The scripted upstreams run uvicorn, whose idle connections close after its default
    keep-alive; a pooled connection kept as long races that close and the request is lost."""
    import inspect

    import uvicorn

    from selfctx.adapters.proxy.passthrough import upstream_client

    server_keeps = inspect.signature(uvicorn.Config).parameters["timeout_keep_alive"].default
    client = upstream_client(None)
    assert client._transport._pool._keepalive_expiry < server_keeps  # type: ignore[attr-defined]
