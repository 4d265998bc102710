"""A summarizer that asks a model over HTTP: any OpenAI-compatible (``/chat/completions``) or
Anthropic-compatible (``/v1/messages``) endpoint (decision 0043).

Configured by the ``summarizer.*`` settings (docs/configuration.md), read by
:func:`summarizer_from_env` from the environment or the configuration file:

- ``SELFCTX_SUMMARIZER_URL``: the endpoint's base URL (``https://api.openai.com/v1``, a local
  server's ``http://127.0.0.1:8080/v1``, ``https://api.anthropic.com``);
- ``SELFCTX_SUMMARIZER_MODEL``: the model name;
- ``SELFCTX_SUMMARIZER_KEY``: the API key (optional for local servers; never logged, never part
  of an error message);
- ``SELFCTX_SUMMARIZER_API``: ``openai`` or ``anthropic`` (default: ``anthropic`` when the URL's
  host is Anthropic's, else ``openai``);
- ``SELFCTX_SUMMARIZER_TIMEOUT``: seconds per request (default 30).

Every failure — no connection, a timeout, a status other than 200, a body that is not the API's
shape — raises :class:`SummarizerError`; compaction then falls back to safe defaults.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final
from urllib.parse import urlparse

import httpx

from selfctx.adapters.config import Config, load_config
from selfctx.application.ports.summarizer import Excerpt, Summarizer, SummarizerError
from selfctx.domain.compaction import MAX_MESSAGES, TopicBoundary, format_transcript, parse_boundary
from selfctx.domain.errors import InvalidInput

__all__ = ["APIS", "HttpSummarizer", "summarizer_from_env"]

APIS: Final = ("openai", "anthropic")
MAX_ANSWER_BYTES: Final = 1 << 20
"""A larger answer is refused (a summary is a few hundred tokens)."""
_ANTHROPIC_VERSION: Final = "2023-06-01"

_DETECT = """You read a conversation between a user and a coding agent, as numbered messages.
Find the first message of the CURRENT topic, if the topic changed: an explicit task switch ("now
let's work on..."), a move to a different file or component, a change in the kind of work
(debugging to feature work), or a reset ("forget that", "let's try something else").
Answer with one JSON object and nothing else:
{"boundary_index": <the message number, or null>, "boundary_reason": "<why>",
 "confidence": <0.0 to 1.0>, "summary": "<a summary of everything before the boundary>"}"""

_SUMMARIZE = """Summarize this part of a conversation between a user and a coding agent for the
agent itself, who will no longer see it: the task, decisions, what was tried and found, files
changed, errors still open. At most {budget} tokens. Plain text, no preamble.{previous}"""


class HttpSummarizer(Summarizer):
    """:class:`Summarizer` over an OpenAI- or Anthropic-compatible endpoint."""

    name = "http"

    def __init__(
        self,
        url: str,
        model: str,
        *,
        api: str = "openai",
        key: str | None = None,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if api not in APIS:
            raise InvalidInput("summarizer api", api, f"use one of {list(APIS)}")
        if not url.startswith(("http://", "https://")):
            raise InvalidInput("summarizer url", url, "must start with http:// or https://")
        if not model:
            raise InvalidInput("summarizer model", model, "must not be empty")
        self.url = url.rstrip("/")
        self.model = model
        self.api = api
        self._key = key
        self._http = httpx.Client(timeout=timeout, transport=transport)

    def __repr__(self) -> str:  # the key stays out of every representation
        return f"HttpSummarizer(url={self.url!r}, model={self.model!r}, api={self.api!r})"

    def close(self) -> None:
        self._http.close()

    # -- the port --------------------------------------------------------------------------

    def detect_boundary(self, transcript: Sequence[Excerpt]) -> TopicBoundary:
        shown = list(transcript)[-MAX_MESSAGES:]
        text = format_transcript([(e.number, e.role, e.text) for e in shown])
        answer = self._complete(_DETECT, text, max_tokens=600)
        return parse_boundary(answer, [e.number for e in shown])

    def summarize(self, transcript: Sequence[Excerpt], previous: str, budget_tokens: int) -> str:
        before = (
            f"\n\nThe summary of what came before it, to carry on:\n{previous}" if previous else ""
        )
        system = _SUMMARIZE.format(budget=budget_tokens, previous=before)
        text = format_transcript([(e.number, e.role, e.text) for e in transcript])
        answer = self._complete(system, text, max_tokens=budget_tokens)
        if not answer.strip():
            raise SummarizerError(f"{self.url} answered with an empty summary")
        return answer.strip()

    # -- HTTP ------------------------------------------------------------------------------

    def _complete(self, system: str, user: str, *, max_tokens: int) -> str:
        if self.api == "anthropic":
            url = (
                f"{self.url}/v1/messages"
                if not self.url.endswith("/v1")
                else f"{self.url}/messages"
            )
            headers = {"anthropic-version": _ANTHROPIC_VERSION}
            if self._key:
                headers["x-api-key"] = self._key
            body: dict[str, Any] = {
                "model": self.model,
                "max_tokens": max_tokens,
                "system": system,
                "messages": [{"role": "user", "content": user}],
            }
        else:
            url = f"{self.url}/chat/completions"
            headers = {"authorization": f"Bearer {self._key}"} if self._key else {}
            body = {
                "model": self.model,
                "max_tokens": max_tokens,
                "temperature": 0,
                "messages": [
                    {"role": "system", "content": system},
                    {"role": "user", "content": user},
                ],
            }
        try:
            response = self._http.post(url, json=body, headers=headers)
        except httpx.TimeoutException as exc:
            raise SummarizerError(f"{url} did not answer in time") from exc
        except httpx.HTTPError as exc:
            raise SummarizerError(f"cannot reach {url}: {type(exc).__name__}") from exc
        if response.status_code != 200:
            raise SummarizerError(f"{url} answered {response.status_code}")
        if len(response.content) > MAX_ANSWER_BYTES:
            raise SummarizerError(f"{url} answered with {len(response.content)} bytes")
        try:
            data = response.json()
        except ValueError as exc:
            raise SummarizerError(f"{url} answered with something that is not JSON") from exc
        text = _answer_text(data, self.api)
        if text is None:
            raise SummarizerError(f"{url} answered in an unexpected shape")
        return text


def _answer_text(data: Any, api: str) -> str | None:
    """The text of a completion, or None when the body is not the API's shape."""
    if not isinstance(data, Mapping):
        return None
    if api == "anthropic":
        blocks = data.get("content")
        if not isinstance(blocks, list):
            return None
        texts = [
            b.get("text") for b in blocks if isinstance(b, Mapping) and b.get("type") == "text"
        ]
        return "".join(t for t in texts if isinstance(t, str)) if texts else None
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        return None
    message = choices[0].get("message")
    content = message.get("content") if isinstance(message, Mapping) else None
    return content if isinstance(content, str) else None


def summarizer_from_env(
    environ: Mapping[str, str] | None = None, *, config: Config | None = None
) -> HttpSummarizer | None:
    """The HTTP summarizer the ``summarizer.*`` settings configure (their variables in
    ``environ``, default ``os.environ``, or the configuration file), or None when no URL is set."""
    config = config if config is not None else load_config(environ=environ)
    url = config.get("summarizer.url")
    if not url:
        return None
    host = urlparse(url).hostname or ""
    api = config.get("summarizer.api") or ("anthropic" if "anthropic" in host else "openai")
    timeout = config.get("summarizer.timeout")
    if not timeout > 0:
        raise InvalidInput("SELFCTX_SUMMARIZER_TIMEOUT", timeout, "must be positive")
    return HttpSummarizer(
        url,
        config.get("summarizer.model") or "",
        api=api,
        key=config.get("summarizer.key") or None,
        timeout=timeout,
    )
