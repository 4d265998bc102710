"""mini-swe-agent with its context managed: a model wrapper and an environment wrapper.

mini-swe-agent's agent keeps the whole history in ``agent.messages`` and hands all of it to
``model.query`` at every step. :class:`ContextModel` wraps any of its models: each query's
messages are ingested into a :class:`HarnessSession` (new messages once, by the cursor) and the
wrapped model receives the managed request instead: the system prompt, the metadata pool, the
chat with ``toolcall_ref`` lines where tool outputs were, and the active content.

Context tools: mini-swe-agent's models offer the model one tool, ``bash`` (``LitellmModel`` sends
``tools=[BASH_TOOL]`` and turns any other tool name into a format error; the text-based models
parse one bash block). So the context tools are commands: ``activate ID``, ``deactivate ID``,
``pin ID``, ``unpin ID``, alone in an action, with the id as the model is shown it (a ``#12``
handle under the ``inline`` policy, ``id=...`` under ``ssot``). :class:`ContextEnvironment`
answers them itself instead of running them, and the system prompt the model sees explains them.

Both of mini-swe-agent's action styles work: tool calls (``tool_calls`` and ``tool`` messages),
and text actions (observations as ``user`` messages), which are recorded as tool calls with ids
derived from their position and sent back to the model in text form.

Nothing here imports mini-swe-agent: models and environments are duck-typed, as its own
``Model`` and ``Environment`` protocols are.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from selfctx.adapters.harness.ingest import IngestResult
from selfctx.adapters.harness.session import HarnessSession
from selfctx.adapters.harness.tools import CONTEXT_COMMAND, context_command
from selfctx.application.service import ContextService

__all__ = [
    "CONTEXT_COMMAND",
    "SHELL_TOOLS_PROMPT",
    "ContextEnvironment",
    "ContextModel",
    "attach",
    "context_command",
    "to_openai_messages",
    "to_text_actions",
]

SHELL_TOOLS_PROMPT = """\
## Context management
Your context shows every file and tool output you have seen; old tool outputs collapse to one
line. Each object is named by an id: a handle like `#12` or the id after `id=`. To manage your
context, run one of these as a command on its own (ID is the handle or id as shown):
- `activate ID`: load an object's full content (a file listed as [unread] is read)
- `deactivate ID`: collapse an object to its line (it stays retrievable)
- `pin ID`: keep a tool output from collapsing
- `unpin ID`: let it collapse again"""


def _observation(message: Mapping[str, Any], exact: bool) -> Any:
    """The text to record for one observation.

    With ``exact``, the command's own output and exit code as ``<returncode>``/``<output>``:
    mini-swe-agent's templates strip trailing whitespace or encode the output as JSON, and a file
    read must be recorded byte for byte. An output the template cut (``output_head``) is kept as
    the model saw it, so the context manager never shows more than mini-swe-agent chose to."""
    content = message.get("content")
    extra = message.get("extra") or {}
    raw, code = extra.get("raw_output"), extra.get("returncode")
    if not exact or not isinstance(raw, str) or not isinstance(code, int):
        return content
    if isinstance(content, str) and "output_head" in content and "output_head" not in raw:
        return content
    info = extra.get("exception_info")
    head = f"<exception>{info}</exception>\n" if info else ""
    return f"{head}<returncode>{code}</returncode>\n<output>\n{raw}</output>"


def _is_observation(message: Mapping[str, Any]) -> bool:
    extra = message.get("extra") or {}
    return isinstance(extra, Mapping) and "returncode" in extra and "raw_output" in extra


def to_openai_messages(
    messages: Sequence[Mapping[str, Any]], session_id: str, *, exact: bool = True
) -> tuple[list[dict[str, Any]], bool]:
    """mini-swe-agent's history as an OpenAI message list, and whether it uses text actions.

    ``extra`` and the final ``exit`` message are dropped. A text action (an assistant message
    whose ``extra.actions`` carry no ``tool_call_id``) becomes a ``bash`` tool call with the id
    ``mswea-{session}-{message index}-{action index}``, and the observations after it become its
    ``tool`` messages, in order."""
    out: list[dict[str, Any]] = []
    pending: list[str] = []
    text_actions = False
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "exit":
            continue
        if role == "assistant":
            item: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
            extra = message.get("extra") or {}
            actions = [a for a in extra.get("actions", []) if "tool_call_id" not in a]
            if message.get("tool_calls"):
                item["tool_calls"] = message["tool_calls"]
                pending = []
            elif actions:
                text_actions = True
                pending = [f"mswea-{session_id}-{index}-{k}" for k in range(len(actions))]
                item["tool_calls"] = [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": "bash",
                            "arguments": json.dumps({"command": action.get("command", "")}),
                        },
                    }
                    for call_id, action in zip(pending, actions, strict=True)
                ]
            out.append(item)
        elif role == "tool":
            tool_call_id = message.get("tool_call_id")
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": tool_call_id,
                    "content": _observation(message, exact),
                }
            )
        elif role == "user" and pending and _is_observation(message):
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": pending.pop(0),
                    "content": _observation(message, exact),
                }
            )
        else:
            out.append({"role": role, "content": message.get("content")})
    return out, text_actions


def to_text_actions(request: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A managed request for a text-action model: an assistant message keeps its text (which
    holds its command block), a tool result becomes a user message."""
    out: list[dict[str, Any]] = []
    for message in request:
        if message["role"] == "assistant":
            out.append({"role": "assistant", "content": message.get("content") or ""})
        elif message["role"] == "tool":
            out.append({"role": "user", "content": message["content"]})
        else:
            out.append(dict(message))
    return out


class ContextModel:
    """A mini-swe-agent model whose every query sends the managed request.

    ``requests`` counts the queries; ``last_request`` is the message list the wrapped model
    received last.
    """

    def __init__(
        self,
        model: Any,
        session: HarnessSession,
        *,
        tools_prompt: str | None = SHELL_TOOLS_PROMPT,
        exact_outputs: bool = True,
    ) -> None:
        if session.format != "openai":
            raise ValueError("mini-swe-agent speaks OpenAI messages: use an 'openai' session")
        self.model = model
        self.session = session
        self.tools_prompt = tools_prompt
        self.exact_outputs = exact_outputs
        self.text_actions = False
        self.requests = 0
        self.last_request: list[dict[str, Any]] = []

    @property
    def config(self) -> Any:
        return self.model.config

    def sync(self, messages: Sequence[Mapping[str, Any]]) -> IngestResult:
        """Ingest the agent's history (what is new in it). ``query`` calls it; call it once more
        after a run to record the last observations."""
        converted, text_actions = to_openai_messages(
            messages, self.session.session_id, exact=self.exact_outputs
        )
        self.text_actions = self.text_actions or text_actions
        if self.tools_prompt and converted and converted[0]["role"] == "system":
            prompt = converted[0]["content"]
            if isinstance(prompt, str) and self.tools_prompt not in prompt:
                converted[0] = {"role": "system", "content": f"{prompt}\n\n{self.tools_prompt}"}
        return self.session.ingest(converted)

    def managed_request(self) -> list[dict[str, Any]]:
        """The message list the wrapped model is sent now."""
        messages: list[dict[str, Any]] = self.session.request()["messages"]
        return to_text_actions(messages) if self.text_actions else messages

    def query(self, messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        self.sync(messages)
        self.last_request = self.managed_request()
        self.requests += 1
        answer: dict[str, Any] = self.model.query(self.last_request, **kwargs)
        return answer

    def format_message(self, **kwargs: Any) -> dict[str, Any]:
        message: dict[str, Any] = self.model.format_message(**kwargs)
        return message

    def format_observation_messages(
        self, message: dict[str, Any], outputs: list[dict[str, Any]], template_vars: Any = None
    ) -> list[dict[str, Any]]:
        observations: list[dict[str, Any]] = self.model.format_observation_messages(
            message, outputs, template_vars
        )
        return observations

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        variables: dict[str, Any] = self.model.get_template_vars(**kwargs)
        return variables

    def serialize(self) -> dict[str, Any]:
        data: dict[str, Any] = self.model.serialize()
        data.setdefault("info", {})["context_manager"] = {
            "session_id": self.session.session_id,
            "managed_requests": self.requests,
        }
        return data

    def __getattr__(self, name: str) -> Any:
        if name == "model":  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.model, name)


class ContextEnvironment:
    """A mini-swe-agent environment that answers the context tools itself and runs every other
    command in the wrapped environment."""

    def __init__(self, env: Any, session: HarnessSession) -> None:
        self.env = env
        self.session = session

    @property
    def config(self) -> Any:
        return self.env.config

    def execute(self, action: dict[str, Any], cwd: str = "", **kwargs: Any) -> dict[str, Any]:
        parsed = context_command(action.get("command"))
        if parsed is None:
            output: dict[str, Any] = self.env.execute(action, cwd, **kwargs)
            return output
        name, object_id = parsed
        if object_id is None:
            return {
                "output": f"usage: {name} ID (one id or #handle, as shown, as a command on "
                "its own)\n",
                "returncode": 2,
                "exception_info": "",
            }
        answer = self.session.handle(name, {"id": object_id})
        return {
            "output": answer.message + "\n",
            "returncode": 0 if answer.ok else 1,
            "exception_info": "",
        }

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        variables: dict[str, Any] = self.env.get_template_vars(**kwargs)
        return variables

    def serialize(self) -> dict[str, Any]:
        data: dict[str, Any] = self.env.serialize()
        return data

    def __getattr__(self, name: str) -> Any:
        if name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)


def attach(
    model: Any,
    env: Any,
    service: ContextService,
    session_id: str,
    *,
    cwd: str | None = None,
    roots: Sequence[str] | None = None,
    tools_prompt: str | None = SHELL_TOOLS_PROMPT,
) -> tuple[ContextModel, ContextEnvironment]:
    """Wrap a mini-swe-agent model and environment around one session (started, or resumed if
    it exists). ``cwd`` defaults to the environment's working directory: relative paths in
    commands resolve against it. ``roots`` (default: ``cwd``) bound the paths tool outputs may
    add to the session."""
    cwd = os.path.realpath(cwd or getattr(getattr(env, "config", None), "cwd", "") or os.getcwd())
    session = HarnessSession(service, session_id, "openai", cwd=cwd, roots=list(roots or [cwd]))
    return ContextModel(model, session, tools_prompt=tools_prompt), ContextEnvironment(env, session)
