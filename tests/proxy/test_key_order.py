"""The proxy's managed request keeps the client's key order (decision 0132): each tool call's
arguments (a Chat Completions or Responses call's JSON text, an Anthropic ``tool_use`` input)
and each reasoning block reach the provider as the client sent them, key for key, nested
objects and one of more than 8 keys included, in the proxy's first request and in the one after
a second proxy resumed the session from the same store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from selfctx.adapters.memory import MemoryStore
from selfctx.adapters.proxy.scripted import Step
from tests.harness.test_key_order import CALLS, CONVERSATIONS, REASONING, THINKING, _arguments
from tests.proxy.drive import PATHS
from tests.proxy.support import scripted
from tests.proxy.test_proxy import proxy_for

HEADERS = {
    "anthropic": {"x-api-key": "sk-dummy", "anthropic-version": "2023-06-01"},
    "openai": {"authorization": "Bearer sk-dummy"},
    "responses": {"authorization": "Bearer sk-dummy"},
}


def _body(api: str) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "scripted-model", "stream": False}
    tools, anything = list(CALLS), {"type": "object"}
    if api == "anthropic":
        body.update(
            max_tokens=1000,
            messages=CONVERSATIONS[api](),
            tools=[
                {"name": n, "description": n, "input_schema": {"type": "object"}} for n in tools
            ],
        )
    elif api == "openai":
        body.update(
            messages=CONVERSATIONS[api](),
            tools=[
                {"type": "function", "function": {"name": n, "parameters": anything}} for n in tools
            ],
        )
    else:
        body.update(
            input=CONVERSATIONS[api](),
            store=False,
            tools=[
                {"type": "function", "name": n, "parameters": {"type": "object"}} for n in tools
            ],
        )
    return body


@pytest.mark.parametrize("api", ["anthropic", "openai", "responses"])
def test_the_upstream_request_keeps_the_clients_key_order(api: str, tmp_path: Path) -> None:
    store = MemoryStore()
    sent: list[dict[str, Any]] = []
    with scripted(lambda seen: Step("Done.")) as (model, up):
        for _ in range(2):  # the second proxy resumes the session from the store
            with proxy_for(up, tmp_path, store) as (_, base), httpx.Client() as client:
                answer = client.post(
                    base + PATHS[api], json=_body(api), headers=HEADERS[api], timeout=60
                )
                assert answer.status_code == 200, answer.text
            sent.append(dict(model.requests[-1].body))
    assert len(model.requests) == 2
    for body in sent:
        assert _arguments(api, body) == {n: json.dumps(a) for n, a in CALLS.items()}
        text = json.dumps(body, ensure_ascii=False)
        if api == "anthropic":
            assert json.dumps(THINKING, ensure_ascii=False) in text
        if api == "responses":
            assert json.dumps(REASONING, ensure_ascii=False) in text
    assert json.dumps(sent[0]) == json.dumps(sent[1])
