"""OpenHands event streams to the OpenAI message stream the agent's model saw.

Two schemas occur. The current one: actions carry ``tool_call_metadata`` (``tool_call_id``,
``model_response``); the assistant message of a step is ``model_response.choices[0].message``,
emitted once per response id (a response with several tool calls yields several actions);
each observation with ``tool_call_metadata`` is the ``tool`` message for its call. The text of a
command's observation is rebuilt as OpenHands renders it for the model (prefix, output, suffix,
working directory, interpreter and exit-code lines), an error observation gets OpenHands' error
line, and anything over the run's ``max_message_chars`` is cut in the middle the same way.

The older resolver schema has no ids and no model responses: each action's ``thought`` becomes the
assistant text, ``run``/``run_ipython`` become calls of OpenHands' function-calling tools
``execute_bash`` {command} and ``execute_ipython_cell`` {code} with synthesised ids ``call_001``,
``call_002``... in order, and each observation answers the latest unanswered call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
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

__all__ = ["from_openhands"]

_UPLOADED = re.compile(r"<uploaded_files>\s*(/\S+?)\s*</uploaded_files>")
_ERROR_LINE = "\n[Error occurred in processing last action]"
_SYNTHESISED = {"run": ("execute_bash", "command"), "run_ipython": ("execute_ipython_cell", "code")}
_NOT_ARGUMENTS = {
    "thought",
    "action",
    "is_confirmed",
    "action_risk",
    "keep_prompt",
    "security_risk",
}


def _maybe_json(value: Any) -> Any:
    """Some resolver outputs store objects as JSON strings."""
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _truncate(text: str, limit: int | None) -> str:
    """OpenHands' ``truncate_content``: keep both ends, say what was cut."""
    if not limit or limit < 0 or len(text) <= limit:
        return text
    half = limit // 2
    return text[:half] + "\n[... Observation truncated due to length ...]\n" + text[-half:]


def _observation_text(event: Mapping[str, Any], limit: int | None) -> str:
    content = parts_text(event.get("content"))
    kind = event.get("observation")
    meta = (event.get("extras") or {}).get("metadata")
    if kind == "run" and isinstance(meta, Mapping):
        text = f"{meta.get('prefix') or ''}{content}{meta.get('suffix') or ''}"
        if meta.get("working_dir"):
            text += f"\n[Current working directory: {meta['working_dir']}]"
        if meta.get("py_interpreter_path"):
            text += f"\n[Python interpreter: {meta['py_interpreter_path']}]"
        if meta.get("exit_code", -1) != -1:
            text += f"\n[Command finished with exit code {meta['exit_code']}]"
        return _truncate(text, limit)
    text = _truncate(content, limit)
    return text + _ERROR_LINE if kind == "error" else text


def _usage(response: Mapping[str, Any]) -> int | None:
    tokens = (response.get("usage") or {}).get("prompt_tokens")
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None


class _Stream:
    """The messages being built, with the calls still waiting for a result."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.tokens: list[int | None] = []
        self.requested: set[str] = set()
        self.pending: list[str] = []

    def assistant(
        self, content: Any, calls: Sequence[Mapping[str, Any]], tokens: int | None
    ) -> None:
        message = assistant_message(content, calls)
        self.messages.append(message)
        self.tokens.append(tokens)
        for call in message.get("tool_calls", ()):
            self.requested.add(call["id"])
            self.pending.append(call["id"])

    def result(self, call_id: str, text: str) -> bool:
        """Answer ``call_id``; False if no assistant message is waiting for it."""
        if call_id not in self.pending:
            return False
        self.pending.remove(call_id)
        self.messages.append(tool_message(call_id, text))
        return True

    def user(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})


def _current(history: Sequence[Mapping[str, Any]], limit: int | None) -> tuple[_Stream, list[str]]:
    stream, notes, seen = _Stream(), set(), set()
    for event in history:
        metadata = event.get("tool_call_metadata")
        kind = event.get("action")
        args = event.get("args") or {}
        if kind is not None:
            if kind == "system":
                stream.messages.append(
                    {
                        "role": "system",
                        "content": parts_text(args.get("content", event.get("message"))),
                    }
                )
            elif kind == "message" and event.get("source") == "user":
                stream.user(parts_text(args.get("content", event.get("message"))))
            elif isinstance(metadata, Mapping):
                response = metadata.get("model_response") or {}
                if response.get("id") not in seen:
                    seen.add(response.get("id"))
                    message = response["choices"][0]["message"]
                    stream.assistant(
                        message.get("content"), message.get("tool_calls") or (), _usage(response)
                    )
            elif kind == "message":
                stream.assistant(args.get("content", event.get("message")), (), None)
            elif kind == "recall":
                notes.add(
                    "recall actions and their workspace-context observations are not rebuilt "
                    "(OpenHands renders them with its own templates)"
                )
            else:
                notes.add(f"a {kind!r} action without tool_call_metadata was skipped")
        elif "observation" in event:
            text = _observation_text(event, limit)
            if isinstance(metadata, Mapping):
                if not stream.result(str(metadata.get("tool_call_id")), text):
                    notes.add("an observation for a call no assistant message made was skipped")
            elif event.get("observation") == "recall":
                continue
            else:
                stream.user(text)
                if event.get("observation") == "error":
                    notes.add(
                        "an error observation without a tool call became a user message; "
                        "the model response that caused it is not in the event stream"
                    )
    return stream, sorted(notes)


def _resolver(history: Sequence[Mapping[str, Any]]) -> tuple[_Stream, list[str]]:
    stream, count = _Stream(), 0
    for event in history:
        kind = event.get("action")
        if kind == "message" and not stream.messages:
            stream.user(parts_text(event.get("content")))
        elif kind == "finish" or kind == "message":
            stream.assistant(event.get("thought") or event.get("content") or "", (), None)
        elif kind is not None:
            count += 1
            name, key = _SYNTHESISED.get(kind, (kind, ""))
            arguments = (
                {key: event.get(key, "")}
                if key
                else {k: v for k, v in event.items() if k not in _NOT_ARGUMENTS}
            )
            call = {"id": f"call_{count:03d}", "function": {"name": name, "arguments": arguments}}
            stream.assistant(event.get("thought") or "", [call], None)
        elif "observation" in event:
            text = parts_text(event.get("content"))
            if not (stream.pending and stream.result(stream.pending[-1], text)):
                stream.user(text)
    notes = [
        "older resolver schema: tool calls synthesised (execute_bash, execute_ipython_cell; ids "
        "call_001...), no system prompt recorded, no token usage recorded"
    ]
    return stream, notes


def _workspace(messages: Sequence[Mapping[str, Any]], default: str) -> str:
    first_user = next((m["content"] for m in messages if m["role"] == "user"), "")
    found = _UPLOADED.search(first_user)
    return found.group(1) if found else default


def from_openhands(data: Mapping[str, Any], name: str, source: str) -> Trajectory:
    """One line of an OpenHands ``output.jsonl``."""
    history = data.get("history")
    if not isinstance(history, list) or not all(isinstance(e, Mapping) for e in history):
        raise TrajectoryError(source, f"{name}: 'history' must be a list of events")
    metadata = _maybe_json(data.get("metadata")) or {}
    limit = ((metadata.get("llm_config") or {}) if isinstance(metadata, Mapping) else {}).get(
        "max_message_chars"
    )
    current = any("tool_call_metadata" in e for e in history)
    try:
        stream, notes = _current(history, limit) if current else _resolver(history)
    except (KeyError, IndexError, TypeError) as exc:
        raise TrajectoryError(source, f"{name}: malformed event: {exc!r}") from exc
    messages = tuple(stream.messages)
    workspace = _workspace(messages, "/workspace")
    cwd = workspace
    for event in history:
        meta = (event.get("extras") or {}).get("metadata")
        if isinstance(meta, Mapping) and meta.get("working_dir"):
            cwd = str(meta["working_dir"])
            break
    metrics = _maybe_json(data.get("metrics")) or {}
    total = (
        (metrics.get("accumulated_token_usage") or {}) if isinstance(metrics, Mapping) else {}
    ).get("prompt_tokens")
    calls: tuple[ModelCall, ...] = calls_of(messages, stream.tokens)
    return Trajectory(
        name=name,
        format="openhands" if current else "openhands-resolver",
        messages=messages,
        calls=calls,
        workspace=workspace,
        cwd=cwd,
        recorded_total_prompt_tokens=total if isinstance(total, int) and total > 0 else None,
        notes=tuple(notes),
    )
