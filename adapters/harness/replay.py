"""Replaying a recorded trajectory through the context manager, one model call at a time.

For each call the original harness made, the replay hands a :class:`HarnessSession` the message
list the harness sent (it ingests what is new), asks for the managed request, and measures both
with one :class:`PromptCounter`: the *naive* prompt is the harness's own list, the *managed* one
is ours. A context tool the recorded model called (``activate``, ``deactivate``, ``pin``,
``unpin``, as a tool of its own or, as mini-swe-agent runs them, as a shell command such as
``activate #12``) is run on the session right before its result is ingested, as a harness would.
The caller builds the service (and so picks the store); the replay never reads a host file as
long as the service's default filesystem is not the host's (:func:`replay_filesystem_id`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from selfctx.adapters.harness.recall import Recall, used_lines, visible_lines
from selfctx.adapters.harness.render import to_anthropic, to_openai
from selfctx.adapters.harness.session import HarnessSession
from selfctx.adapters.harness.tokens import PromptCounter
from selfctx.adapters.harness.tools import SHELL_TOOLS, context_command, is_context_tool
from selfctx.adapters.harness.trajectories import ModelCall, Trajectory
from selfctx.application.service import ContextService
from selfctx.domain.errors import InvalidInput
from selfctx.domain.objects import FileObject

__all__ = [
    "CallFigures",
    "Observer",
    "ReplayReport",
    "context_call",
    "replay",
    "replay_filesystem_id",
    "session_id_for",
    "totals",
]


@attrs.frozen
class CallFigures:
    """What one model call would have been sent, naive and managed."""

    call: int
    """1-based number of the call in its trajectory."""
    messages: int
    """Length of the harness's list for this call."""
    naive_tokens: int
    managed_tokens: int
    objects: int
    """Objects in the session index."""
    active: int
    """Objects whose full content is in the prompt."""
    collapsed: int
    """Objects shown as their metadata line only (pool minus active), discovery stubs aside."""
    unread: int
    """Discovery stubs: files seen listed, never read (a metadata line too)."""
    pinned: int
    log_position: int
    """The session's log position when the request was assembled (``selfctx show`` reads it)."""
    recorded_prompt_tokens: int | None = None
    """What the original provider billed for this call, when recorded."""
    used_lines: int = 0
    """Lines of the recorded response copied from an earlier tool output (``recall``)."""
    visible_lines: int = 0
    """How many of them the managed request holds."""

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class ReplayReport:
    """One trajectory's replay."""

    trajectory: str
    format: str
    session_id: str
    tokenizer: str
    calls: tuple[CallFigures, ...]
    recorded_prompt_tokens: int | None = None
    """The original harness's own total of prompt tokens, when recorded."""
    context_answers: tuple[tuple[str, str], ...] = ()
    """``(call id, answer)`` of each context tool the replay ran, in order."""

    @property
    def naive_tokens(self) -> int:
        return sum(c.naive_tokens for c in self.calls)

    @property
    def managed_tokens(self) -> int:
        return sum(c.managed_tokens for c in self.calls)

    @property
    def peak_naive(self) -> int:
        return max((c.naive_tokens for c in self.calls), default=0)

    @property
    def peak_managed(self) -> int:
        return max((c.managed_tokens for c in self.calls), default=0)

    @property
    def recall(self) -> Recall:
        """Used lines, and how many the managed requests held (see ``harness.recall``)."""
        return Recall(
            sum(c.used_lines for c in self.calls), sum(c.visible_lines for c in self.calls)
        )

    def total(self) -> dict[str, Any]:
        return {
            "naive_tokens": self.naive_tokens,
            "managed_tokens": self.managed_tokens,
            "peak_naive": self.peak_naive,
            "peak_managed": self.peak_managed,
            "recorded_prompt_tokens": self.recorded_prompt_tokens,
            **self.recall.figures(),
        }


def totals(reports: Sequence[ReplayReport]) -> dict[str, Any]:
    """Totals over several replays (peaks are the largest single prompt)."""
    recorded = [r.recorded_prompt_tokens for r in reports]
    recall = Recall()
    for report in reports:
        recall.add(report.recall.used, report.recall.visible)
    return {
        "naive_tokens": sum(r.naive_tokens for r in reports),
        "managed_tokens": sum(r.managed_tokens for r in reports),
        "peak_naive": max((r.peak_naive for r in reports), default=0),
        "peak_managed": max((r.peak_managed for r in reports), default=0),
        "recorded_prompt_tokens": (
            sum(r for r in recorded if r is not None)
            if recorded and all(r is not None for r in recorded)
            else None
        ),
        **recall.figures(),
    }


Observer = Callable[[int, ModelCall, HarnessSession, Mapping[str, Any]], None]
"""Called at each model call with its number, the call, the session and the managed request."""


def session_id_for(trajectory: Trajectory, suffix: str = "") -> str:
    """A valid session id naming the trajectory (``replay-<name>[-<suffix>]``)."""
    base = re.sub(r"[^A-Za-z0-9._@+=-]+", "-", f"replay-{trajectory.name}").strip("-")
    return f"{base}-{suffix}"[:200] if suffix else base[:200]


def replay_filesystem_id(trajectory: Trajectory) -> str:
    """The filesystem the trajectory's paths belong to: the one it names, else one of its own
    (never the host's, so no host file is ever read for a recorded path)."""
    return trajectory.filesystem_id or f"replay:{trajectory.format}:{trajectory.name}"


def replay(
    trajectory: Trajectory,
    service: ContextService,
    counter: PromptCounter,
    *,
    session_id: str | None = None,
    request_format: str = "openai",
    observe: Observer | None = None,
    progress: Callable[[int, int], None] | None = None,
    policy: Any = None,
) -> ReplayReport:
    """Replay every model call of ``trajectory`` into a new session of ``service``; then ingest
    the rest of the stream (results after the last call), so the stored session is complete.
    ``policy`` (a layout and collapse policy, as ``HarnessSession`` takes it) is passed on when
    given; the session's default otherwise."""
    if request_format not in ("openai", "anthropic"):
        raise InvalidInput("format", request_format, "use 'openai' or 'anthropic'")
    session_id = session_id or session_id_for(trajectory)
    if session_id in service.sessions():
        raise InvalidInput("session id", session_id, "a session with this id exists already")
    options: dict[str, Any] = {} if policy is None else {"policy": policy}
    session = HarnessSession(
        service, session_id, "openai", cwd=trajectory.cwd, roots=[trajectory.workspace], **options
    )
    feed = _Feed(session, trajectory.messages)
    used = used_lines(trajectory.messages, [c.position for c in trajectory.calls])
    figures = []
    total = len(trajectory.calls)
    for number, call in enumerate(trajectory.calls, 1):
        feed.advance(call.position)
        context = service.assemble(session_id)
        request = to_openai(context) if request_format == "openai" else to_anthropic(context)
        state = service.state(session_id)
        unread = sum(1 for i in state.pool - state.active if _is_stub(service, session_id, i))
        figures.append(
            CallFigures(
                call=number,
                messages=call.position,
                naive_tokens=counter(trajectory.messages[: call.position]),
                managed_tokens=counter(request),
                objects=len(state.index),
                active=len(state.active),
                collapsed=len(state.pool) - len(state.active) - unread,
                unread=unread,
                pinned=len(state.pinned),
                log_position=service.log_position(session_id),
                recorded_prompt_tokens=call.recorded_prompt_tokens,
                used_lines=len(used[number - 1]),
                visible_lines=visible_lines(request, used[number - 1]),
            )
        )
        if observe is not None:
            observe(number, call, session, request)
        if progress is not None:
            progress(number, total)
    feed.advance(len(trajectory.messages))
    return ReplayReport(
        trajectory=trajectory.name,
        format=trajectory.format,
        session_id=session_id,
        tokenizer=counter.name,
        calls=tuple(figures),
        recorded_prompt_tokens=trajectory.recorded_prompt_tokens,
        context_answers=tuple(feed.answers),
    )


def context_call(call: Mapping[str, Any]) -> tuple[str, dict[str, Any], bool] | None:
    """The context tool a recorded tool call ran: its name, its arguments, and whether it was
    a shell command (whose answer mini-swe-agent wraps as a command's output); None for any
    other call."""
    name = call["function"]["name"]
    if is_context_tool(name):
        return name, _arguments(call), False
    command = _arguments(call).get("command") if name in SHELL_TOOLS else None
    parsed = context_command(command)
    if parsed is None or parsed[1] is None:
        return None  # not a context tool, or one the environment answered with its usage
    return parsed[0], {"id": parsed[1]}, True


class _Feed:
    """Hands the session growing prefixes of the stream, running context tools on the way."""

    def __init__(self, session: HarnessSession, messages: Sequence[Mapping[str, Any]]) -> None:
        self.session = session
        self.messages = list(messages)
        """The stream as this harness hands it over: a context tool's result is the answer the
        session gave, as a real harness would send it (the recorded one came from whatever
        policy the recording ran)."""
        self.done = 0
        self.context_calls: dict[str, tuple[str, dict[str, Any], bool]] = {}
        self.answers: list[tuple[str, str]] = []
        for message in messages:
            for call in message.get("tool_calls") or ():
                found = context_call(call)
                if found is not None:
                    self.context_calls[call["id"]] = found

    def advance(self, end: int) -> None:
        """Ingest ``messages[:end]``; a context tool's result first runs the tool."""
        for index in range(self.done, end):
            message = self.messages[index]
            call_id = str(message.get("tool_call_id"))
            call = self.context_calls.get(call_id)
            if message.get("role") == "tool" and call is not None:
                self.session.ingest(list(self.messages[:index]))
                name, arguments, shell = call
                result = self.session.handle(name, arguments)
                answer = result.message
                if shell:  # as mini-swe-agent's environment wrapper returns it
                    code = 0 if result.ok else 1
                    answer = f"<returncode>{code}</returncode>\n<output>\n{answer}\n</output>"
                self.answers.append((call_id, answer))
                self.messages[index] = {**message, "content": answer}
        if end > self.done:
            self.session.ingest(list(self.messages[:end]))
        self.done = max(self.done, end)


def _is_stub(service: ContextService, session_id: str, object_id: str) -> bool:
    obj = service.object(session_id, object_id)
    return isinstance(obj, FileObject) and obj.file_hash is None and obj.content_status is None


def _arguments(call: Mapping[str, Any]) -> dict[str, Any]:
    raw = call["function"].get("arguments")
    if isinstance(raw, Mapping):
        return dict(raw)
    try:
        parsed = json.loads(raw or "{}")
    except (TypeError, json.JSONDecodeError):
        return {}
    return parsed if isinstance(parsed, dict) else {}
