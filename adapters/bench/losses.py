"""``selfctx bench context --losses``: every used line a contender's request did not hold, and why.

A used line (``selfctx.adapters.harness.recall``) that the request for its model call does not
hold is *hidden*. For each one the instrument names the output it was copied from (the latest
earlier tool output holding it): the tool, the command, the file views recognised in it (or
none), how many model calls back it arrived, whether it is still active, and if assembly collapsed
it, by which rule and in which tier, and whether it showed a file of the working set then
(``ContextService.why_collapsed``). A summary counts the hidden lines by cause.
"""

from __future__ import annotations

import bisect
import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from selfctx.adapters.harness.recall import MIN_CHARS, message_strings, request_strings
from selfctx.adapters.harness.session import HarnessSession
from selfctx.adapters.harness.trajectories import Trajectory
from selfctx.domain.errors import SelfContextError
from selfctx.domain.objects import FileObject, ToolcallObject

__all__ = ["LossCollector", "summarize"]

MAX_SHOWN = 120
"""Characters of a line or a command an entry shows."""


def _short(text: str) -> str:
    """At most :data:`MAX_SHOWN` characters of ``text`` on one line."""
    text = re.sub(r"\s*\n\s*", " ", text)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 1] + "…"


class LossCollector:
    """The hidden used lines of one contender on one trajectory."""

    def __init__(self, policy: str, trajectory: Trajectory, observations: Sequence[int]) -> None:
        """``observations``: positions of the messages that are tool outputs (for a text-action
        harness, the user messages that carry observations)."""
        self.policy = policy
        self.trajectory = trajectory
        self.entries: list[dict[str, Any]] = []
        self._sources: dict[str, list[int]] = {}
        """Each line of an output (stripped, long enough) → positions of the outputs holding it."""
        for position in observations:
            message = trajectory.messages[position]
            for text in message_strings(message):
                for line in text.split("\n"):
                    line = line.strip()
                    if len(line) >= MIN_CHARS:
                        found = self._sources.setdefault(line, [])
                        if not found or found[-1] != position:
                            found.append(position)
        self._call_positions = [c.position for c in trajectory.calls]

    def observe(
        self,
        number: int,
        session: HarnessSession,
        request: Mapping[str, Any],
        lines: Sequence[str],
    ) -> None:
        """Record the lines of call ``number`` (1-based) that ``request`` does not hold."""
        if not lines:
            return
        texts = list(request_strings(request))
        hidden = [line for line in lines if not any(line in text for text in texts)]
        position = self._call_positions[number - 1]
        for line in hidden:
            sources = self._sources.get(line, [])
            at = bisect.bisect_left(sources, position)
            source = sources[at - 1] if at else None
            self.entries.append(self._entry(number, session, line, source))

    def _entry(
        self, number: int, session: HarnessSession, line: str, source: int | None
    ) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "policy": self.policy,
            "trajectory": self.trajectory.name,
            "call": number,
            "line": _short(line),
        }
        if source is None:
            entry["cause"] = "no source"
            return entry
        first_call = bisect.bisect_right(self._call_positions, source) + 1
        entry["calls_back"] = number - first_call
        message = self.trajectory.messages[source]
        object_id = _object_of(session, message)
        entry.update(_describe(session, object_id, message))
        return entry


def _object_of(session: HarnessSession, message: Mapping[str, Any]) -> str | None:
    call_id = message.get("tool_call_id")
    if isinstance(call_id, str):
        return session.ids.answer(call_id)
    return None


def _describe(
    session: HarnessSession, object_id: str | None, message: Mapping[str, Any]
) -> dict[str, Any]:
    service, sid = session.service, session.session_id
    out: dict[str, Any] = {"role": message.get("role")}
    if object_id is None:
        out["cause"] = "not an output object"
        return out
    try:
        obj = service.object(sid, object_id)
    except SelfContextError:
        out["cause"] = "not an output object"
        return out
    if not isinstance(obj, ToolcallObject):
        out["cause"] = "not an output object"
        return out
    state = service.state(sid)
    out["output"] = f"#{state.positions[object_id] + 1}" if object_id in state.positions else "?"
    out["tool"] = obj.tool
    args = obj.args or {}
    command = args.get("command") if isinstance(args, Mapping) else None
    if not isinstance(command, str):
        command = json.dumps(dict(args), ensure_ascii=False, default=str)
    out["command"] = _short(command)
    out["program"] = _program(command)
    views = []
    for view in obj.file_views or ():
        file = state.positions.get(view.file)
        path = "?"
        if file is not None:
            try:
                f = service.object(sid, view.file)
                path = f.source.path if isinstance(f, FileObject) else "?"
            except SelfContextError:
                pass
        ranges = ",".join(f"{a}-{b}" for a, b in view.ranges) if view.ranges else ""
        views.append(f"{view.kind} {path}" + (f" {ranges}" if ranges else ""))
    out["views"] = views
    out["view"] = _view_kind(obj)
    out["chars"] = len(obj.content or "")
    if object_id in state.active:
        out["cause"] = "active, not shown"
        return out
    record = service.why_collapsed(sid, object_id)
    if record is None:
        out["cause"] = "collapsed by the agent, before this process or long before"
        return out
    out["cause"] = record.rule
    out["tier"] = record.tier
    out["working_set"] = record.working_set
    return out


def _view_kind(obj: ToolcallObject) -> str:
    kinds = {v.kind for v in obj.file_views or ()}
    if "read" in kinds:
        return "read"
    if "lines" in kinds:
        return "lines"
    if "change" in kinds:
        return "change only"
    return "none"


def _program(command: str) -> str:
    """The program of a shell command that reads or shows something (the first word of the
    first pipeline stage after ``cd ... &&``), for the summary."""
    words = command.replace("&&", " && ").split()
    while len(words) >= 3 and words[0] == "cd" and words[2] in ("&&", ";"):
        words = words[3:]
    return words[0].rsplit("/", 1)[-1][:20] if words else ""


def _bucket(calls: int | None) -> str:
    if calls is None:
        return "?"
    for limit, name in ((1, "0-1"), (3, "2-3"), (10, "4-10"), (30, "11-30")):
        if calls <= limit:
            return name
    return ">30"


def summarize(entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Counts of hidden lines by cause (rule and tier), by view, by program, by age, and by
    whether the output showed the working set when it was collapsed."""

    def count(key: Any) -> dict[str, int]:
        return dict(Counter(key(e) for e in entries).most_common())

    return {
        "hidden": len(entries),
        "by_cause": count(lambda e: f"{e.get('cause')}/{e.get('tier', '-')}"),
        "by_view": count(lambda e: e.get("view", "-")),
        "by_program": count(lambda e: e.get("program", "-")),
        "by_calls_back": count(lambda e: _bucket(e.get("calls_back"))),
        "by_working_set": count(lambda e: str(e.get("working_set", "-"))),
        "by_trajectory": count(lambda e: e["trajectory"]),
    }
