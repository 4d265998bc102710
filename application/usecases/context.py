"""The agent's context tools (docs/specification.md §2, the agent's tools)."""

from __future__ import annotations

import attrs

from selfctx.application.ports.files import SourceUnavailable
from selfctx.application.runner import OpenSession, Reads
from selfctx.application.usecases.base import Deps, observe_source
from selfctx.domain.objects import FileObject, ToolcallObject
from selfctx.domain.session import commands as c
from selfctx.domain.session.machine import decide
from selfctx.domain.session.state import SessionState

__all__ = ["ActionResult", "Activate", "Deactivate", "Pin", "Unpin"]


@attrs.frozen
class ActionResult:
    """The answer to one of the agent's context tools."""

    ok: bool
    message: str
    """A short sentence for the model."""


def _describe(session: OpenSession, deps: Deps, object_id: str) -> str:
    obj = session.objects[object_id]
    if isinstance(obj, ToolcallObject):
        return f"tool call {object_id} ({obj.tool})"
    return f"file {deps.mounts.display_path(obj.source)}"


class Activate:
    """Load an object's content into the active set; a file with neither bytes nor content (a
    discovery stub, or a deletion: the file may be back) is read from its source first."""

    def __init__(self, deps: Deps) -> None:
        self._deps = deps

    def __call__(self, session: OpenSession, object_id: str) -> ActionResult:
        def build(reads: Reads, state: SessionState) -> c.Command:
            # Validate first (unknown ids, other sessions' ids, infrastructure ids): reading a
            # source for an id this session may not use would leak it.
            decide(state, c.Activate(object_id))
            obj = session.objects.get(object_id)
            if isinstance(obj, FileObject) and obj.needs_read:
                try:
                    observed = observe_source(self._deps, obj.source)
                except SourceUnavailable:
                    if obj.is_stub:
                        raise  # never read and cannot be: nothing to activate
                    return c.Activate(object_id)  # still gone, or out of reach: its deletion shows
                stored = reads.stored_file(obj)
                return c.Activate(object_id, c.IndexFile(observed, stored, "activation"))
            if isinstance(obj, FileObject) and obj.reported_elsewhere(session.session_id):
                # Another session's harness reported this content: read the file itself when
                # it can be read here (decision 0031); else it is shown marked as a report.
                try:
                    observed = observe_source(self._deps, obj.source)
                except SourceUnavailable:
                    return c.Activate(object_id)
                stored = reads.stored_file(obj)
                return c.Activate(object_id, c.IndexFile(observed, stored, "activation"))
            return c.Activate(object_id)

        self._deps.runner.execute(session, build)
        # The answer states the resulting state, not the transition, so a retried call (after a
        # lost answer or a crash) answers exactly as the first one did.
        what = _describe(session, self._deps, object_id)
        obj = session.objects[object_id]
        if obj.content is None:
            return ActionResult(True, f"{what} is active; it has no content ({_why_empty(obj)})")
        return ActionResult(True, f"{what} is active ({len(obj.content)} characters)")


def _why_empty(obj: FileObject | ToolcallObject) -> str:
    if isinstance(obj, FileObject) and obj.content_status is not None:
        return obj.content_status.replace("_", " ")
    return "empty"


class _SetCommand:
    """Deactivate, Pin and Unpin: a command on one id, and an answer stating the resulting state
    (the same whether or not the command changed anything, so a retry answers the same)."""

    command: type[c.Deactivate] | type[c.Pin] | type[c.Unpin]
    state: str

    def __init__(self, deps: Deps) -> None:
        self._deps = deps

    def __call__(self, session: OpenSession, object_id: str) -> ActionResult:
        command = self.command(object_id)
        self._deps.runner.execute(session, lambda reads, state: command)
        return ActionResult(True, f"{_describe(session, self._deps, object_id)} {self.state}")


class Deactivate(_SetCommand):
    """Collapse an object to its metadata line."""

    command = c.Deactivate
    state = "is not active"


class Pin(_SetCommand):
    """Exempt an object from auto-collapse."""

    command = c.Pin
    state = "is pinned"


class Unpin(_SetCommand):
    """Let the collapse window apply to an object again."""

    command = c.Unpin
    state = "is not pinned"
