"""What a proxied request costs the node in transactions, counted by the node's transaction ids
(decisions 0089 and 0119): a new conversation is its session's start and one transaction for
all it holds, however many snapshots its commands take; each request after it is one."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.proxy import Proxy, ProxyConfig
from selfctx.adapters.proxy.scripted import Step
from selfctx.adapters.proxy.serving import serve_in_thread
from selfctx.adapters.xtdb import XtdbNode, open_store
from tests.proxy.support import scripted


def _pair(n: int) -> list[dict[str, Any]]:
    call = {
        "id": f"call_{n}",
        "type": "function",
        "function": {"name": "bash", "arguments": json.dumps({"command": f"echo {n}"})},
    }
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{n}", "content": f"step {n}\nsome output"},
    ]


def _proxy(service: Any, upstream: str, tmp_path: Path) -> Proxy:
    """A proxy of ``service`` in front of the scripted ``upstream``, rooted in ``tmp_path``."""
    config = ProxyConfig(
        upstream_anthropic=upstream,
        upstream_openai=upstream + "/v1",
        cwd=str(tmp_path),
        roots=(str(tmp_path),),
    )
    return Proxy(service, config)


def test_a_conversation_is_two_transactions_and_each_request_after_it_one(
    xtdb_node: XtdbNode, tmp_path: Path
) -> None:
    store = open_store(xtdb_node.url)
    service = build_service(store=store, workspace=str(tmp_path))
    session = f"tx-count-{tmp_path.name}"
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": f"Count the transactions of {session}."},
    ]
    for n in range(60):  # enough commands for the session to take several snapshots
        messages += _pair(n)
    tool = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}
    headers = {"x-selfctx-session": session}

    def latest() -> int:
        receipt = store.latest_tx()
        return -1 if receipt is None else receipt.tx_id  # a node that holds nothing yet

    try:
        with scripted([Step("ok")]) as (_model, upstream):
            proxy = _proxy(service, upstream, tmp_path)
            with serve_in_thread(proxy.app) as base, httpx.Client() as client:

                def send() -> int:
                    before = latest()
                    body = {"model": "m", "messages": messages, "tools": [tool]}
                    answer = client.post(
                        base + "/v1/chat/completions", json=body, headers=headers, timeout=60
                    )
                    assert answer.status_code == 200, answer.text
                    # the answer comes once the transaction is logged, before it is indexed
                    # (decision 0138): counted once the node has indexed what it holds
                    store.client.sync(wait=10.0, timeout=11.0)
                    return latest() - before

                # the session's start, then everything the conversation holds and the
                # request's record: one transaction, not one per snapshot
                assert send() == 2
                (session_id,) = proxy.sessions.items()
                assert len(service.state(session_id).index) >= 60
                for n in range(60, 65):
                    messages += _pair(n)
                    assert send() == 1
                held = service.state(session_id)
    finally:
        service.close()
    # what the store holds is the session as the proxy had it
    again = build_service(store=open_store(xtdb_node.url), workspace=str(tmp_path))
    try:
        again.resume_session(session_id)
        assert again.state(session_id) == held
    finally:
        again.close()


def test_the_versions_read_goes_out_from_the_event_loop_before_the_worker_thread(
    xtdb_node: XtdbNode, tmp_path: Path
) -> None:
    """The store read the assembly makes (the file versions feed) is started by the event loop
    as soon as the request has its session, not by the worker thread the request then waits
    for (decision 0126): the request of a free session never starts it from that thread."""
    store = open_store(xtdb_node.url)
    assert store.reads_wait
    service = build_service(store=store, workspace=str(tmp_path))
    session = f"ahead-{tmp_path.name}"
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": f"Read ahead for {session}."},
        *_pair(0),
    ]
    tool = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}
    calls: list[tuple[str, bool, bool]] = []
    look_ahead = service.look_ahead

    def recorded(session_id: str, *, wait: bool = True) -> bool:
        started = look_ahead(session_id, wait=wait)
        calls.append((threading.current_thread().name, wait, started))
        return started

    service.look_ahead = recorded  # type: ignore[method-assign]
    try:
        with scripted([Step("ok")]) as (_model, upstream):
            proxy = _proxy(service, upstream, tmp_path)
            loop_threads: list[str] = []
            serve = proxy.serve

            async def serving(*args: Any) -> Any:
                loop_threads.append(threading.current_thread().name)
                return await serve(*args)

            proxy.serve = serving  # type: ignore[method-assign, assignment]
            with serve_in_thread(proxy.app) as base, httpx.Client() as client:
                for n in range(1, 4):
                    messages += _pair(n)
                    body = {"model": "m", "messages": messages, "tools": [tool]}
                    answer = client.post(
                        base + "/v1/chat/completions",
                        json=body,
                        headers={"x-selfctx-session": session},
                        timeout=60,
                    )
                    assert answer.status_code == 200, answer.text
    finally:
        service.close()
    assert len(loop_threads) == 3
    assert len(calls) == 3  # one a request
    assert {(name, wait, started) for name, wait, started in calls} == {
        (loop_threads[0], False, True)
    }
