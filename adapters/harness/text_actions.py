"""Text-action harnesses: observations that arrive as user messages are tool outputs too.

Some harnesses never use tool calls. The model writes its command in its text and the harness
answers with a user message holding the command's output:

* **mini-swe-agent's text mode**: one fenced block (`` ```bash `` or `` ```mswea_bash_command ``)
  in the assistant message; the next user message starts with ``<returncode>``.
* **SWE-agent 0.x**: the command in a fenced block or between ``<command>`` tags; the next user
  message ends with the shell prompt SWE-agent adds (``(Current directory: ...)`` and
  ``bash-$``).
* **aider's** ``/run``: the user ran a command; aider adds its output to the chat as a user
  message (``I ran this command:`` ... ``And got this output:`` ...), with no assistant message
  asking for it.

:func:`to_tool_calls` turns such a list into the tool-call form the context manager records (a
``bash`` tool call for each observation, with an id derived from what it answers, so the same
list always gets the same ids), and :func:`to_text` turns a managed request back into the
harness's own shapes: the assistant message keeps its text and loses the tool calls, the tool
result is a user message again (aider's with its own framing), collapsed or not. Nothing else of
the list changes, so a harness that is not a text-action one is never touched.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import attrs

from selfctx.domain.hashing import sha256_hex

__all__ = [
    "Observation",
    "TextActions",
    "observations",
    "to_text",
    "to_tool_calls",
]

ID_PREFIX = "ta_"
"""Tool-call ids made for text actions start with this (decision 0030's ids are made from them)."""

_FENCE = re.compile(
    r"^```(bash|sh|shell|mswea_bash_command)?[ \t]*\n(.*?)\n```[ \t]*$", re.M | re.S
)
_COMMAND_TAG = re.compile(r"<command>\n?(.*?)\n?</command>", re.S)
_MINI_OBSERVATION = re.compile(r"\A(?:<exception>.*?</exception>\s*)?<returncode>", re.S)
_SWE_PROMPT = re.compile(r"\(Current directory: [^\n]*\)\s*\n\s*bash-\$\s*\Z")
_AIDER_RUN = re.compile(
    r"\A(?P<prefix>.*?)I ran this command:\n\n(?P<command>.*?)\n\nAnd got this output:\n\n"
    r"(?P<output>.*)\n\Z",
    re.S,
)
_MAX_SCAN = 200_000
"""Characters of a message searched for an action (a longer text is not an action's)."""


@attrs.frozen
class Observation:
    """A user message that is a command's output."""

    position: int
    """Its index in the list."""
    command: str
    call_id: str
    kind: str
    """``reply`` (it answers the assistant message before it) or ``run`` (aider's ``/run``)."""
    prefix: str = ""
    """aider: what the user wrote before the framing (their instructions)."""


def _text(message: Mapping[str, Any]) -> str | None:
    content = message.get("content")
    return content if isinstance(content, str) else None


def _action(message: Mapping[str, Any]) -> str | None:
    """The one command an assistant message gives in its text (None: none, or several)."""
    if not isinstance(message, Mapping):
        return None
    if message.get("role") != "assistant" or message.get("tool_calls"):
        return None
    text = _text(message)
    if not text or len(text) > _MAX_SCAN:
        return None
    tagged = _COMMAND_TAG.findall(text)
    if len(tagged) == 1:
        return str(tagged[0])
    blocks = _FENCE.findall(text)
    return str(blocks[0][1]) if len(blocks) == 1 and not tagged else None


def _call_id(kind: str, position: int, *texts: str) -> str:
    digest = sha256_hex(json.dumps([kind, position, *texts], ensure_ascii=False))
    return f"{ID_PREFIX}{digest[:24]}"


def observations(messages: Sequence[Mapping[str, Any]], start: int = 0) -> list[Observation]:
    """The user messages of ``messages`` that are commands' outputs (``start``: where the list
    begins in the whole conversation, which the calls' ids are made from)."""
    out = []
    for n, message in enumerate(messages):
        # (a dict is asked first: this walks every message of a resent list)
        if type(message) is not dict and not isinstance(message, Mapping):
            continue  # not an observation (what is not a message is refused when parsed)
        if message.get("role") != "user":
            continue
        text = _text(message)
        if text is None:
            continue
        run = _AIDER_RUN.match(text) if len(text) <= 10 * _MAX_SCAN else None
        if run is not None:
            command = run["command"]
            out.append(
                Observation(n, command, _call_id("run", start + n, text), "run", run["prefix"])
            )
            continue
        if n == 0 or not (_MINI_OBSERVATION.match(text) or _SWE_PROMPT.search(text[-500:])):
            continue
        command = _action(messages[n - 1])
        if command is not None:
            previous = _text(messages[n - 1]) or ""
            out.append(Observation(n, command, _call_id("reply", start + n, previous), "reply"))
    return out


@attrs.define
class TextActions:
    """The text-action calls of one session: what :func:`to_text` needs to give a request back
    its harness's shapes."""

    runs: dict[str, str] = attrs.field(factory=dict)
    """aider ``/run`` calls: id → the user's text before the framing."""
    commands: dict[str, str] = attrs.field(factory=dict)
    """Every text-action call: id → its command."""

    def __bool__(self) -> bool:
        return bool(self.commands)


def to_tool_calls(
    messages: Sequence[Mapping[str, Any]], made: TextActions | None = None, *, start: int = 0
) -> tuple[list[dict[str, Any]], TextActions]:
    """``messages`` with each observation as a ``bash`` call and its ``tool`` result (an
    assistant message with no text carries the call of an aider ``/run``), and the calls made
    (added to ``made`` when given). ``start``: where ``messages`` begins in the conversation (an
    appended part of it)."""
    made = made if made is not None else TextActions()
    found = {o.position: o for o in observations(messages, start)}
    if not found:  # nothing to turn into calls (a tool-calling harness): the list as it is
        return cast(list[dict[str, Any]], list(messages)), made
    out: list[dict[str, Any]] = []
    for n, message in enumerate(messages):
        answer = found.get(n + 1)
        observation = found.get(n)
        if answer is not None and answer.kind == "reply":
            out.append({**message, "tool_calls": [_call(answer)]})
            made.commands[answer.call_id] = answer.command
        elif observation is not None and observation.kind == "run":
            out.append({"role": "assistant", "content": "", "tool_calls": [_call(observation)]})
            made.commands[observation.call_id] = observation.command
            made.runs[observation.call_id] = observation.prefix
            out.append(_result(observation, message))
        elif observation is not None:
            out.append(_result(observation, message))
        else:
            out.append(dict(message) if isinstance(message, Mapping) else message)
    return out, made


def _call(observation: Observation) -> dict[str, Any]:
    arguments = json.dumps({"command": observation.command}, ensure_ascii=False)
    return {
        "id": observation.call_id,
        "type": "function",
        "function": {"name": "bash", "arguments": arguments},
    }


def _result(observation: Observation, message: Mapping[str, Any]) -> dict[str, Any]:
    text = _text(message) or ""
    if observation.kind == "run":
        match = _AIDER_RUN.match(text)
        text = match["output"] if match is not None else text
    return {"role": "tool", "tool_call_id": observation.call_id, "content": text}


def to_text(
    request: Sequence[Mapping[str, Any]],
    made: TextActions,
    harness_id: Callable[[str], str] = str,
) -> list[dict[str, Any]]:
    """A managed OpenAI request in the harness's own shapes (see the module's docstring);
    ``harness_id`` maps the ids the request names calls by back to the ones made here."""
    if not made:
        return [dict(m) for m in request]
    out: list[dict[str, Any]] = []
    for message in request:
        role = message.get("role")
        calls = [harness_id(str(c.get("id"))) for c in message.get("tool_calls") or ()]
        if role == "assistant" and calls and all(c in made.commands for c in calls):
            if all(c in made.runs for c in calls) and not message.get("content"):
                continue  # the call of an aider /run: the user ran it, no assistant asked
            item = {k: v for k, v in message.items() if k != "tool_calls"}
            out.append({**item, "content": message.get("content") or ""})
        elif role == "tool" and harness_id(str(message.get("tool_call_id"))) in made.commands:
            content = message.get("content")
            call_id = harness_id(str(message.get("tool_call_id")))
            if call_id in made.runs and isinstance(content, str):
                command = made.commands.get(call_id, "")
                content = (
                    f"{made.runs[call_id]}I ran this command:\n\n{command}\n\n"
                    f"And got this output:\n\n{content}\n"
                )
            out.append({"role": "user", "content": content})
        else:
            out.append(dict(message))
    return out
