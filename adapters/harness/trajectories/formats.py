"""Converters for trajectories that already hold an OpenAI-style message list: mini-swe-agent,
SWE-agent >= 1.0, and the project's own ``openai-messages`` format (the shipped example)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from selfctx.adapters.harness.trajectories.model import (
    ModelCall,
    Trajectory,
    TrajectoryError,
    assistant_message,
    calls_of,
    parts_text,
    tool_message,
)

__all__ = [
    "OWN_FORMAT",
    "from_message_list",
    "from_mini_swe_agent",
    "from_openai_messages",
    "from_swe_agent",
    "from_swe_agent_0",
]

OWN_FORMAT = "openai-messages"
"""``{"format": "openai-messages", "workspace": .., "cwd": .., "filesystem_id"?: ..,
"messages": [...]}``: a chat-completions list and where its paths live."""

_UPLOADED = re.compile(r"<uploaded_files>\s*(/\S+?)\s*</uploaded_files>")


def _message(raw: Mapping[str, Any], source: str, index: int) -> dict[str, Any] | None:
    """One OpenAI message without harness extras (``extra``, ``provider_specific_fields``,
    ``function_call``, SWE-agent's ``thought``/``action``/``agent``/``cache_control``...)."""
    role = raw.get("role")
    try:
        if role in ("system", "developer", "user"):
            return {
                "role": "system" if role == "developer" else role,
                "content": parts_text(raw.get("content")),
            }
        if role == "assistant":
            return assistant_message(raw.get("content"), raw.get("tool_calls") or ())
        if role == "tool":
            call_id = raw.get("tool_call_id")
            if call_id is None:  # SWE-agent: a list of ids, one per result message
                ids = raw.get("tool_call_ids") or []
                call_id = ids[0] if ids else None
            if not isinstance(call_id, str):
                raise TrajectoryError(source, f"message {index}: a tool message with no call id")
            return tool_message(call_id, raw.get("content"))
    except (KeyError, TypeError) as exc:
        raise TrajectoryError(source, f"message {index}: {exc}") from exc
    if role == "exit":
        return None  # mini-swe-agent's end marker: not sent to the model
    raise TrajectoryError(source, f"message {index}: unknown role {role!r}")


def _messages(raw: Any, source: str) -> tuple[dict[str, Any], ...]:
    if not isinstance(raw, list):
        raise TrajectoryError(source, "the message list is missing")
    out = [_message(m, source, i) for i, m in enumerate(raw) if isinstance(m, Mapping)]
    if len(out) != len(raw):
        raise TrajectoryError(source, "a message is not a JSON object")
    return tuple(m for m in out if m is not None)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def from_mini_swe_agent(data: Mapping[str, Any], name: str, source: str) -> Trajectory:
    """mini-swe-agent (``trajectory_format: mini-swe-agent-1.x``): ``messages`` is the list;
    ``extra.response.usage.prompt_tokens`` of each assistant message is what was billed."""
    raw = data.get("messages")
    messages = _messages(raw, source)
    tokens = [
        _int(((m.get("extra") or {}).get("response") or {}).get("usage", {}).get("prompt_tokens"))
        for m in raw or ()
        if isinstance(m, Mapping) and m.get("role") == "assistant"
    ]
    info = data.get("info") or {}
    cwd = ((info.get("config") or {}).get("environment") or {}).get("cwd") or "/testbed"
    return Trajectory(
        name=name,
        format="mini-swe-agent",
        messages=messages,
        calls=calls_of(messages, tokens),
        workspace=str(cwd),
        cwd=str(cwd),
        notes=(
            "dropped: per-message extra, function_call, provider_specific_fields, the exit entry",
        ),
    )


def from_swe_agent(data: Mapping[str, Any], name: str, source: str) -> Trajectory:
    """SWE-agent >= 1.0 (``.traj``): ``history`` is the list; tool messages name their call in
    ``tool_call_ids``; ``info.model_stats.tokens_sent`` is the harness's own total."""
    messages = _messages(data.get("history"), source)
    stats = (data.get("info") or {}).get("model_stats") or {}
    steps = data.get("trajectory") or []
    cwd = None
    if steps and isinstance(steps[0], Mapping):
        cwd = _state(steps[0].get("state")).get("working_dir")
    first_user = next((m["content"] for m in messages if m["role"] == "user"), "")
    uploaded = _UPLOADED.search(first_user)
    workspace = uploaded.group(1) if uploaded else (cwd or "/testbed")
    return Trajectory(
        name=name,
        format="swe-agent",
        messages=messages,
        calls=calls_of(messages),
        workspace=workspace,
        cwd=str(cwd or workspace),
        recorded_total_prompt_tokens=_int(stats.get("tokens_sent")),
        notes=("dropped: thought, action, agent, message_type, cache_control",),
    )


def _state(state: Any) -> Mapping[str, Any]:
    """A step's environment state: a mapping, or (SWE-agent 0.x) the JSON text of one."""
    if isinstance(state, str):
        try:
            state = json.loads(state)
        except json.JSONDecodeError:
            return {}
    return state if isinstance(state, Mapping) else {}


_CURRENT_DIRECTORY = re.compile(r"\(Current directory: (/[^\n)]*)\)")


def _directory_in(messages: tuple[dict[str, Any], ...]) -> str | None:
    """The working directory a text-action harness states in its observations, if any."""
    for message in messages:
        if message["role"] == "user":
            found = _CURRENT_DIRECTORY.search(str(message.get("content") or "")[-2000:])
            if found:
                return found.group(1).strip()
    return None


def from_swe_agent_0(data: Mapping[str, Any], name: str, source: str) -> Trajectory:
    """SWE-agent 0.x (``.traj``): ``history`` holds the primary agent's messages without tool
    calls: the command in the assistant's text, its output in the next user message (a text
    action, ``harness.text_actions``); a sub-agent's messages (``agent`` other than
    ``primary``) were never sent to this model and are left out."""
    history = data.get("history")
    if not isinstance(history, list):
        raise TrajectoryError(source, "the message list is missing")
    primary = [
        m for m in history if isinstance(m, Mapping) and m.get("agent", "primary") == "primary"
    ]
    messages = _messages(primary, source)
    steps = data.get("trajectory") or []
    state = _state(steps[0].get("state")) if steps and isinstance(steps[0], Mapping) else {}
    cwd = state.get("working_dir") or _directory_in(messages) or "/"
    stats = (data.get("info") or {}).get("model_stats") or {}
    return Trajectory(
        name=name,
        format="swe-agent-0",
        messages=messages,
        calls=calls_of(messages),
        workspace=str(cwd),
        cwd=str(cwd),
        recorded_total_prompt_tokens=_int(stats.get("tokens_sent")),
        notes=("dropped: thought, action, agent, is_demo; sub-agents' messages",),
    )


def from_message_list(data: list[Any], name: str, source: str) -> Trajectory:
    """A bare message list (mini-swe-agent's test trajectories, in text mode or with tool
    calls): the messages as sent, the model's calls at its assistant messages."""
    messages = _messages(data, source)
    text = " ".join(str(m.get("content") or "")[:4000] for m in messages)
    cwd = _directory_in(messages) or ("/testbed" if "/testbed" in text else "/")
    return Trajectory(
        name=name,
        format="message-list",
        messages=messages,
        calls=calls_of(messages),
        workspace="/",
        cwd=cwd,
        notes=("a bare message list: the working directory is a guess",),
    )


def from_openai_messages(data: Mapping[str, Any], name: str, source: str) -> Trajectory:
    """The project's own format (see :data:`OWN_FORMAT`)."""
    messages = _messages(data.get("messages"), source)
    workspace = data.get("workspace")
    if not isinstance(workspace, str) or not workspace.startswith("/"):
        raise TrajectoryError(source, "'workspace' must be an absolute path")
    cwd = data.get("cwd") or workspace
    fs = data.get("filesystem_id")
    return Trajectory(
        name=name,
        format=OWN_FORMAT,
        messages=messages,
        calls=tuple(ModelCall(c.position) for c in calls_of(messages)),
        workspace=workspace,
        cwd=str(cwd),
        filesystem_id=fs if isinstance(fs, str) and fs else None,
    )
