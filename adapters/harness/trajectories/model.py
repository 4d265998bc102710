"""A recorded agent session as the replay sees it: one OpenAI message stream and its model calls.

Every converter (``formats``, ``openhands``) produces a :class:`Trajectory`. The stream is plain
chat-completions JSON (``system``/``user``/``assistant`` with ``tool_calls``/``tool`` with
``tool_call_id``); a model call is the position of the assistant message it produced, and what the
harness sent for it is the stream before that position.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from selfctx.adapters.harness.text_actions import observations
from selfctx.domain.errors import InvalidInput

__all__ = [
    "ModelCall",
    "Trajectory",
    "TrajectoryError",
    "assistant_message",
    "parts_text",
    "tool_message",
]


class TrajectoryError(InvalidInput):
    """A trajectory file cannot be read or converted; names the file and the reason."""

    kind = "invalid_trajectory"

    def __init__(self, source: str, reason: str) -> None:
        InvalidInput.__init__(self, "trajectory", source, reason)
        self.source = source


@attrs.frozen
class ModelCall:
    """One call the original harness made to its model."""

    position: int
    """Index in :attr:`Trajectory.messages` of the assistant message the call produced; the
    harness sent ``messages[:position]``."""
    recorded_prompt_tokens: int | None = None
    """Prompt tokens the provider billed for this call, when the trajectory records them (the
    provider's own tokenizer, tool schemas included)."""


@attrs.frozen
class Trajectory:
    """One recorded session, converted."""

    name: str
    """``<file stem>`` or ``<file stem>#<n>`` when a file holds several (``n`` from 1)."""
    format: str
    """``mini-swe-agent``, ``swe-agent``, ``openhands``, ``openhands-resolver`` or
    ``openai-messages`` (the project's own)."""
    messages: tuple[Mapping[str, Any], ...]
    """The whole stream, OpenAI chat-completions messages."""
    calls: tuple[ModelCall, ...]
    workspace: str
    """Root of the agent's workspace as the agent saw it (``/testbed``, ``/workspace``)."""
    cwd: str
    """Working directory the agent's relative paths resolve against."""
    recorded_total_prompt_tokens: int | None = None
    """The harness's own total of prompt tokens over the session, when recorded."""
    filesystem_id: str | None = None
    """Filesystem the agent's paths live on, when the trajectory fixes it (the shipped example
    does, so its file ids are stable); else the replay picks one that is not the host's."""
    notes: tuple[str, ...] = ()
    """What the conversion dropped or synthesised, in a sentence each."""

    def prompt(self, call: ModelCall) -> list[Mapping[str, Any]]:
        """The message list the harness sent for ``call``."""
        return list(self.messages[: call.position])

    @property
    def recorded_prompt_tokens(self) -> int | None:
        """Sum of the per-call recorded prompt tokens, or the recorded total, or None."""
        per_call = [c.recorded_prompt_tokens for c in self.calls]
        if per_call and all(t is not None for t in per_call):
            return sum(t for t in per_call if t is not None)
        return self.recorded_total_prompt_tokens

    def observation_positions(self) -> list[int]:
        """Positions of the messages that carry what tools printed: the tool messages, and the
        user messages of a text-action harness that are a command's output."""
        tools = [n for n, m in enumerate(self.messages) if m.get("role") == "tool"]
        return sorted(tools + [o.position for o in observations(self.messages)])

    def tool_outputs(self) -> dict[str, str]:
        """Each answered tool call's id and the exact text of its result."""
        return {
            str(m["tool_call_id"]): str(m.get("content") or "")
            for m in self.messages
            if m.get("role") == "tool"
        }

    def with_unique_call_ids(self) -> Trajectory:
        """The same session with a reused tool-call id renamed (``id#2``, ``id#3``...) from its
        second call on, results following the latest call of that id. Harnesses that number
        calls per response (``toolu_01``) can repeat ids; a provider id names one object."""
        seen: set[str] = set()
        latest: dict[str, str] = {}
        renamed = 0
        out = []
        for message in self.messages:
            message = dict(message)
            if message.get("role") == "tool":
                call_id = str(message.get("tool_call_id"))
                message["tool_call_id"] = latest.get(call_id, call_id)
            elif message.get("tool_calls"):
                calls = []
                for call in message["tool_calls"]:
                    new, n = call["id"], 1
                    while new in seen:
                        n += 1
                        new = f"{call['id']}#{n}"
                    seen.add(new)
                    latest[call["id"]] = new
                    renamed += new != call["id"]
                    calls.append({**call, "id": new})
                message["tool_calls"] = calls
            out.append(message)
        if not renamed:
            return self
        note = f"{renamed} reused tool-call id(s) renamed id#2, id#3..."
        return attrs.evolve(self, messages=tuple(out), notes=(*self.notes, note))


# -- building messages ----------------------------------------------------------------------

_REPR_LIST = re.compile(r"\A\s*\[\s*\{\s*['\"]type['\"]\s*:")


def parts_text(content: Any) -> str:
    """Text of message content given as a string, a list of ``{"type": "text", "text": ...}``
    parts, or such a list written as a Python repr (some SWE-agent versions save ``str(list)``).
    The repr is read with :func:`ast.literal_eval`, which evaluates literals only; a string that
    does not parse as a list of parts is text. Non-text parts become ``[type]``."""
    if content is None:
        return ""
    if isinstance(content, str):
        if not _REPR_LIST.match(content):
            return content
        try:
            parsed = ast.literal_eval(content)
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            return content
        if not _is_parts(parsed):
            return content
        content = parsed
    if isinstance(content, Mapping):
        content = [content]
    if not isinstance(content, list) or not _is_parts(content):
        raise TypeError(f"content is neither text nor a list of typed parts: {content!r:.80}")
    return "".join(
        str(p.get("text") or "") if p["type"] == "text" else f"[{p['type']}]" for p in content
    )


def _is_parts(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(p, Mapping) and isinstance(p.get("type"), str) for p in value
    )


def _arguments_text(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)


def assistant_message(content: Any, tool_calls: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """An OpenAI assistant message; tool calls keep only ``id``, ``type`` and ``function`` (name,
    arguments as the JSON text the model emitted)."""
    calls = [
        {
            "id": str(call["id"]),
            "type": "function",
            "function": {
                "name": str(call["function"]["name"]),
                "arguments": _arguments_text(call["function"].get("arguments")),
            },
        }
        for call in tool_calls
    ]
    message: dict[str, Any] = {"role": "assistant", "content": parts_text(content) or None}
    if calls:
        message["tool_calls"] = calls
    elif message["content"] is None:
        message["content"] = ""
    return message


def tool_message(call_id: str, content: Any) -> dict[str, Any]:
    """An OpenAI tool message answering ``call_id``."""
    return {"role": "tool", "tool_call_id": call_id, "content": parts_text(content)}


def calls_of(
    messages: Sequence[Mapping[str, Any]], tokens: Sequence[int | None] = ()
) -> tuple[ModelCall, ...]:
    """One model call per assistant message, with recorded prompt tokens in order when given."""
    positions = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    recorded = list(tokens) + [None] * (len(positions) - len(tokens))
    return tuple(ModelCall(p, t) for p, t in zip(positions, recorded, strict=False))
