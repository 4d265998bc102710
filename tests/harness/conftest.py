"""Helpers of the harness-boundary tests: services whose every path is a container path (nothing
is read from the host), message builders for both provider formats, and a snapshot of what a
session and its store hold (to check that a refused list changed nothing).

The builders are plain functions (the Hypothesis tests use them too); test modules import them
from here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.harness import HarnessSession
from selfctx.adapters.memory import MemoryStore
from selfctx.application.policies import policy_by_name
from selfctx.application.ports.store import ObjectStore, Receipt
from selfctx.application.service import ContextService
from selfctx.application.settings import Settings
from selfctx.domain.chat import AssistantMessage
from selfctx.domain.identifiers import toolcall_object_id
from selfctx.domain.session.state import SessionState
from tests.support import CountingClock, CountingIds, file_id

CONTAINER = "container-x"
"""The filesystem every agent path belongs to in these tests: never readable from the host."""
CWD = "/testbed"
ROOTS = ("/testbed",)


def make_service(policy: str = "ssot", store: ObjectStore | None = None) -> ContextService:
    """A service over a fresh in-memory store; every path is a container path. Sessions get the
    named layout policy (``ssot`` by default: decision 0006 and the exact renderings below
    are about its layout)."""
    return build_service(
        store=store if store is not None else MemoryStore(),
        default_filesystem_id=CONTAINER,
        clock=CountingClock(),
        ids=CountingIds(),
        settings=Settings(policy=policy_by_name(policy)),
    )


def tc(call_id: str, occurrence: int = 1, session_id: str = "s1") -> str:
    """The object id of the harness's ``occurrence``-th call with id ``call_id`` (decision 0030)."""
    return toolcall_object_id(session_id, call_id, occurrence)


def fid(path: str) -> str:
    """The object id of a container file."""
    return file_id(CONTAINER, path)


def open_harness(
    service: ContextService | None = None,
    fmt: str = "openai",
    session_id: str = "s1",
    system_prompt: str = "",
) -> HarnessSession:
    return HarnessSession(
        service or make_service(),
        session_id,
        fmt,
        system_prompt=system_prompt,
        cwd=CWD,
        roots=ROOTS,
    )


# -- OpenAI chat completions -------------------------------------------------------------------


def o_system(text: str) -> dict[str, Any]:
    return {"role": "system", "content": text}


def o_user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def o_call(call_id: str, name: str = "bash", **arguments: Any) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def o_assistant(text: str | None = "", *calls: Mapping[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = list(calls)
    return message


def o_tool(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def bash(call_id: str, command: str) -> dict[str, Any]:
    return o_call(call_id, "bash", command=command)


# -- Anthropic Messages ----------------------------------------------------------------------


def a_user(*blocks: Mapping[str, Any] | str) -> dict[str, Any]:
    if len(blocks) == 1 and isinstance(blocks[0], str):
        return {"role": "user", "content": blocks[0]}
    return {"role": "user", "content": [_block(b) for b in blocks]}


def a_assistant(*blocks: Mapping[str, Any] | str) -> dict[str, Any]:
    return {"role": "assistant", "content": [_block(b) for b in blocks]}


def _block(block: Mapping[str, Any] | str) -> dict[str, Any]:
    return {"type": "text", "text": block} if isinstance(block, str) else dict(block)


def a_use(call_id: str, name: str = "bash", **arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def a_result(call_id: str, content: Any, is_error: bool = False) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id, "content": content}
    if is_error:
        block["is_error"] = True
    return block


# -- outputs in the style of the real trajectories ----------------------------------------


def mini(output: str, code: int = 0) -> str:
    """A mini-swe-agent tool message (``<returncode>``/``<output>``)."""
    return f"<returncode>{code}</returncode>\n<output>\n{output}</output>"


def mini_long(head: str, tail: str, elided: int = 12345, code: int = 0) -> str:
    """mini-swe-agent's message for an output it cut in the middle."""
    return (
        f"<returncode>{code}</returncode>\n<warning>\nThe output of your last command was too "
        "long.\nPlease try a different command that produces less output.\nIf you're looking at "
        "a file you can try use head, tail or sed to view a smaller number of lines "
        "selectively.\n</warning><output_head>\n"
        f"{head}\n</output_head>\n<elided_chars>\n{elided} characters elided\n</elided_chars>\n"
        f"<output_tail>\n{tail}\n</output_tail>"
    )


def swe(output: str) -> str:
    """A SWE-agent tool message (``OBSERVATION:`` and the terminal's CRLF line ends)."""
    return "OBSERVATION:\n" + output.replace("\n", "\r\n")


def numbered(path: str, text: str, start: int = 1, strip_trailing: bool = False) -> str:
    """An editor ``view`` output: ``cat -n`` of ``text.split("\\n")`` (SWE-agent and OpenHands
    number the empty line after a final newline too). ``strip_trailing`` drops the trailing
    whitespace of the whole output, as SWE-agent's recorded observations do."""
    lines = [f"{n:6}\t{line}" for n, line in enumerate(text.split("\n"), start=start)]
    out = f"Here's the result of running `cat -n` on {path}:\n" + "\n".join(lines) + "\n"
    return out.rstrip() if strip_trailing else out


# -- what a session holds ------------------------------------------------------------------


@attrs.frozen
class Snapshot:
    """Everything a refused call must leave unchanged (read without assembling: under a token
    budget, assembling may collapse objects itself)."""

    state: SessionState
    log_position: int
    latest_tx: Receipt | None


def snapshot(service: ContextService, session_id: str = "s1") -> Snapshot:
    return Snapshot(
        state=service.state(session_id),
        log_position=service.log_position(session_id),
        latest_tx=service.store.latest_tx(),
    )


def chat_roles(service: ContextService, session_id: str = "s1") -> list[str]:
    return [m.role for m in service.assemble(session_id).chat]


def recorded_call_ids(service: ContextService, session_id: str = "s1") -> list[str]:
    """The tool results of the chat, in order, by the harness's ids of their calls."""
    harness_ids = {
        call.id: call.provider_id or call.id
        for turn in service.state(session_id).turns
        for message in turn.messages
        if isinstance(message, AssistantMessage)
        for call in message.tool_calls
    }
    return [
        harness_ids.get(m.toolcall_id, m.toolcall_id)
        for m in service.assemble(session_id).chat
        if m.toolcall_id is not None
    ]


def check_invariants(state: SessionState) -> None:
    """active ⊆ pool ⊆ index (docs/specification.md §2)."""
    index = set(state.index)
    assert set(state.pool) <= index
    assert set(state.active) <= set(state.pool)
    assert len(index) == len(state.index), "an object is in the index twice"


def chat_texts(service: ContextService, session_id: str = "s1") -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in service.assemble(session_id).chat]


def ids_in(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """Tool-call ids requested in an OpenAI list, in order."""
    return [c["id"] for m in messages for c in m.get("tool_calls") or []]
