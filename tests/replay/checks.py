"""What every replayed model call must satisfy : each answered tool call is an object
holding its exact output; every collapsed output comes back byte-identical when activated (and
collapses again when deactivated); the request is valid for both provider formats; the session's
set invariants hold."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from selfctx.adapters.harness import HarnessSession, to_anthropic, to_openai
from selfctx.adapters.harness.render import validate_anthropic, validate_openai
from selfctx.adapters.harness.replay import context_call
from selfctx.adapters.harness.trajectories import ModelCall, Trajectory
from selfctx.domain.objects import ToolcallObject


@attrs.define
class CallChecker:
    """An observer for :func:`selfctx.adapters.harness.replay.replay` that asserts at every call.

    ``activate_every`` limits the byte-identity check to every n-th call (1: every call); the
    last call is always checked in full.
    """

    trajectory: Trajectory
    activate_every: int = 1
    outputs: dict[str, str] = attrs.field(init=False)
    calls_checked: int = 0
    activations: int = 0
    seen: dict[int, tuple[int, str]] = attrs.field(factory=dict)
    """Per call: the log position and the context's text, before any check changed anything."""
    session: HarnessSession | None = None

    def __attrs_post_init__(self) -> None:
        # A context tool's result is the session's own answer (the replay feeds it in place of
        # the recorded one), not a recorded output: those calls are left out of the output checks.
        context_calls = {
            c["id"]
            for m in self.trajectory.messages
            for c in m.get("tool_calls") or ()
            if context_call(c) is not None
        }
        self.outputs = {
            k: v for k, v in self.trajectory.tool_outputs().items() if k not in context_calls
        }

    def __call__(
        self, number: int, call: ModelCall, session: HarnessSession, request: Mapping[str, Any]
    ) -> None:
        service, sid = session.service, session.session_id
        state = service.state(sid)
        self.session = session
        self.seen[number] = (service.log_position(sid), service.assemble(sid).to_text())
        # the session invariants
        assert state.active <= state.pool, "active ⊄ pool"
        assert state.pool <= set(state.index), "pool ⊄ index"
        assert state.pinned <= set(state.index), "pinned ⊄ index"
        # each answered tool call is an object with its exact output
        answered = [
            m["tool_call_id"]
            for m in self.trajectory.messages[: call.position]
            if m["role"] == "tool"
        ]
        for call_id in answered:
            object_id = session.ids.answer(call_id)  # decision 0030: the harness's ids map
            assert object_id is not None and state.in_index(object_id), call_id
            if call_id not in self.outputs:
                continue
            obj = service.object(sid, object_id)
            assert isinstance(obj, ToolcallObject), call_id
            assert obj.content == self.outputs[call_id], call_id
        # the request is valid for its provider, in both formats
        validate_openai(request)
        context = service.assemble(sid)
        validate_openai(to_openai(context))
        validate_anthropic(to_anthropic(context))
        # every collapsed output comes back byte-identical
        last = number == len(self.trajectory.calls)
        if last or number % self.activate_every == 0:
            shown_as_lines = frozenset(state.pool - state.active)
            harness_id = session.ids.provider_id
            collapsed = [i for i in state.ordered(shown_as_lines) if harness_id(i) in self.outputs]
            for object_id in collapsed:
                self._round_trip(session, object_id)
        self.calls_checked += 1

    def check_past(self, calls: Iterable[int]) -> None:
        """The context rebuilt from stored versions at each call's log position is the context
        the call saw (what ``selfctx show`` relies on)."""
        for number in calls:
            position, text = self.seen[number]
            assert self.session is not None
            rebuilt = self.session.service.context_at(self.session.session_id, position).to_text()
            assert rebuilt == text, f"call {number}: context_at({position}) differs"

    def _round_trip(self, session: HarnessSession, object_id: str) -> None:
        service, sid = session.service, session.session_id
        output = self.outputs[session.ids.provider_id(object_id)]
        before = service.state(sid).active
        answer = session.handle("activate", {"id": object_id})
        assert answer.ok, answer.message
        if service.state(sid).policy.inline_layout:
            # Append-only: the answer itself carries the content, under a one-line header,
            # and nothing shown earlier changes.
            header, _, body = answer.message.partition("\n")
            assert header.startswith("[#") and body == output, object_id
            assert service.state(sid).active == before
            self.activations += 1
            return
        context = service.assemble(sid)
        blocks = {b.object_id: b.content for b in context.active}
        assert blocks[object_id] == output, object_id
        expected = f"ACTIVE_CONTENT id={object_id}\n{output}"
        assert expected in to_openai(context)["messages"][-1]["content"]
        answer = session.handle("deactivate", {"id": object_id})
        assert answer.ok, answer.message
        assert service.state(sid).active == before
        self.activations += 1
