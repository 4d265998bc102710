"""The HTTP summarizer against a local scripted server on 127.0.0.1 (decision 0043).

The server plays an OpenAI- or Anthropic-compatible endpoint: it records each request and answers
with what the test scripted — a completion, an error status, a body that is not JSON, garbage
instead of the JSON asked for, or nothing until the client gives up. No real model is involved.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from selfctx.adapters.summarizer import ExtractiveSummarizer, HttpSummarizer, summarizer_from_env
from selfctx.adapters.tokenizer import EstimateTokenizer
from selfctx.application.ports.summarizer import Excerpt, SummarizerError
from selfctx.application.service import ContextService
from selfctx.application.settings import Settings
from selfctx.domain.chat import ToolCallRequest
from selfctx.domain.compaction import SAFE_BOUNDARY
from selfctx.domain.errors import InvalidInput
from selfctx.domain.mounts import MountTable
from selfctx.domain.session.state import PolicyConfig
from tests.support import CountingClock, CountingIds, FakeFileReader, WrappedStore

KEY = "sk-test-secret-0123456789"

Answer = Callable[[dict[str, Any]], tuple[int, bytes, float]]
"""From the request body: (status, response body, seconds to wait before answering)."""


class Scripted:
    """A scripted endpoint: ``answer`` decides each response; ``requests`` records them."""

    def __init__(self) -> None:
        self.answer: Answer = lambda body: (500, b"{}", 0.0)
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        scripted = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length))
                headers = {k.lower(): v for k, v in self.headers.items()}
                scripted.requests.append((self.path, headers, body))
                status, payload, delay = scripted.answer(body)
                time.sleep(delay)
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up first (a timeout test)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint() -> Iterator[Scripted]:
    scripted = Scripted()
    yield scripted
    scripted.close()


def openai_reply(text: str) -> bytes:
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]}).encode()


def anthropic_reply(text: str) -> bytes:
    return json.dumps({"content": [{"type": "text", "text": text}]}).encode()


TRANSCRIPT = [
    Excerpt(0, "user", "Fix the parser."),
    Excerpt(1, "assistant", "Done."),
    Excerpt(2, "user", "Now the lexer."),
]


def test_openai_boundary_and_summary(endpoint: Scripted) -> None:
    answers = iter(
        [
            '```json\n{"boundary_index": 2, "boundary_reason": "lexer", "confidence": 0.9}\n```',
            "The parser was fixed.",
        ]
    )
    endpoint.answer = lambda body: (200, openai_reply(next(answers)), 0.0)
    summarizer = HttpSummarizer(endpoint.url, "tiny-model", api="openai", key=KEY)
    boundary = summarizer.detect_boundary(TRANSCRIPT)
    assert (boundary.index, boundary.reason, boundary.confidence) == (2, "lexer", 0.9)
    assert summarizer.summarize(TRANSCRIPT[:2], "before", 50) == "The parser was fixed."
    (path, headers, body), (_, _, second) = endpoint.requests
    assert path == "/v1/chat/completions"
    assert headers["authorization"] == f"Bearer {KEY}"
    assert body["model"] == "tiny-model" and body["temperature"] == 0
    assert "[2] USER: Now the lexer." in body["messages"][1]["content"]
    assert second["max_tokens"] == 50 and "before" in second["messages"][0]["content"]


def test_anthropic_shape(endpoint: Scripted) -> None:
    endpoint.answer = lambda body: (200, anthropic_reply('{"boundary_index": null}'), 0.0)
    summarizer = HttpSummarizer(
        endpoint.url.removesuffix("/v1"), "claude-x", api="anthropic", key=KEY
    )
    assert summarizer.detect_boundary(TRANSCRIPT) == SAFE_BOUNDARY
    path, headers, body = endpoint.requests[0]
    assert path == "/v1/messages"
    assert headers["x-api-key"] == KEY and headers["anthropic-version"] == "2023-06-01"
    assert body["system"].startswith("You read a conversation")
    assert body["messages"][0]["role"] == "user"


def test_garbage_instead_of_json_gives_the_safe_boundary(endpoint: Scripted) -> None:
    endpoint.answer = lambda body: (200, openai_reply("I cannot decide, sorry!"), 0.0)
    summarizer = HttpSummarizer(endpoint.url, "m", api="openai")
    assert summarizer.detect_boundary(TRANSCRIPT) == SAFE_BOUNDARY
    assert "authorization" not in endpoint.requests[0][1]  # no key, no header


@pytest.mark.parametrize(
    ("status", "payload", "message"),
    [
        (500, b'{"error": "overloaded"}', "answered 500"),
        (401, b'{"error": "bad key"}', "answered 401"),
        (200, b"<html>not json</html>", "not JSON"),
        (200, b'{"choices": []}', "unexpected shape"),
        (200, b'{"choices": [{"message": {"content": 7}}]}', "unexpected shape"),
    ],
)
def test_failures_are_summarizer_errors_without_the_key(
    endpoint: Scripted, status: int, payload: bytes, message: str
) -> None:
    endpoint.answer = lambda body: (status, payload, 0.0)
    summarizer = HttpSummarizer(endpoint.url, "m", api="openai", key=KEY)
    with pytest.raises(SummarizerError) as caught:
        summarizer.summarize(TRANSCRIPT, "", 50)
    assert message in str(caught.value)
    assert KEY not in str(caught.value) and KEY not in repr(summarizer)


def test_a_timeout_is_a_summarizer_error(endpoint: Scripted) -> None:
    endpoint.answer = lambda body: (200, openai_reply("late"), 2.0)
    summarizer = HttpSummarizer(endpoint.url, "m", api="openai", timeout=0.2)
    with pytest.raises(SummarizerError, match="did not answer in time"):
        summarizer.detect_boundary(TRANSCRIPT)


def test_a_refused_connection_is_a_summarizer_error() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    summarizer = HttpSummarizer(f"http://127.0.0.1:{port}/v1", "m", api="openai", timeout=2)
    with pytest.raises(SummarizerError, match="cannot reach"):
        summarizer.summarize(TRANSCRIPT, "", 50)


def test_configuration_from_the_environment() -> None:
    assert summarizer_from_env({}) is None
    made = summarizer_from_env(
        {
            "SELFCTX_SUMMARIZER_URL": "https://api.anthropic.com",
            "SELFCTX_SUMMARIZER_MODEL": "claude-x",
            "SELFCTX_SUMMARIZER_KEY": KEY,
        }
    )
    assert made is not None and made.api == "anthropic" and made.model == "claude-x"
    local = summarizer_from_env(
        {"SELFCTX_SUMMARIZER_URL": "http://127.0.0.1:9/v1", "SELFCTX_SUMMARIZER_MODEL": "m"}
    )
    assert local is not None and local.api == "openai"
    with pytest.raises(InvalidInput):
        summarizer_from_env({"SELFCTX_SUMMARIZER_URL": "ftp://x", "SELFCTX_SUMMARIZER_MODEL": "m"})
    with pytest.raises(InvalidInput):
        summarizer_from_env(
            {"SELFCTX_SUMMARIZER_URL": "http://x", "SELFCTX_SUMMARIZER_TIMEOUT": "soon"}
        )


def test_compaction_through_the_service_survives_a_failing_endpoint(
    endpoint: Scripted, store: WrappedStore, files: FakeFileReader, host_id: str
) -> None:
    """A model that times out on the boundary and answers 500 for the summary: compaction still
    happens, with seed 001's safe boundary and the extractive summary."""
    answers = iter([(200, openai_reply("{}"), 2.0), (500, b"{}", 0.0)])
    endpoint.answer = lambda body: next(answers)
    policy = PolicyConfig(
        "inline", compaction_trigger_tokens=200, verbatim_window_tokens=60, min_verbatim_exchanges=1
    )
    service = ContextService(
        store=store,
        clock=CountingClock(),
        ids=CountingIds(),
        files=files,
        mounts=MountTable(host_id),
        tokenizer=EstimateTokenizer(),
        settings=Settings(policy=policy),
        summarizer=HttpSummarizer(endpoint.url, "m", api="openai", timeout=0.3),
        fallback_summarizer=ExtractiveSummarizer(),
    )
    service.start_session("s", "sys")
    for n in range(4):
        service.record_user_message("s", f"Question {n} about the parser, in some detail.")
        call = ToolCallRequest(f"c{n}", "bash", {"command": f"cat f{n}"})
        service.record_assistant_message("s", f"Answer {n}.", [call])
        service.record_tool_call(
            "s", f"c{n}", tool="bash", args={"command": f"cat f{n}"}, output=f"{n} " * 80
        )
    report = service.compact("s")
    assert report is not None and report.case == "summarize"
    assert report.summary.startswith("- user: Question 0 about the parser")
    assert len(endpoint.requests) == 2
