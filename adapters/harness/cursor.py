"""The ingestion cursor: which messages of a harness's whole list are new (decision 0007), with
every tool call mapped to its object id (decision 0030).

The cursor remembers the harness's list as it last saw it (its *view*, as fingerprints, and for
each position the object ids it stands for) and every message recorded (a multiset of
fingerprints). A list that extends the view is new from the view's end; a list that is a prefix of
it is nothing new; a list that diverges (compaction, an edited message) is reconciled message by
message. A tool result is known by the call it answers — the latest call with its id before it in
the list, or the latest recorded one — so that a harness reusing ids (``call_0`` on every turn)
gets a new tool call for each new assistant message, whether the list grew or diverged.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence

import attrs

from selfctx.adapters.harness.ids import CallIds
from selfctx.adapters.harness.messages import (
    SYSTEM_MARK,
    MalformedMessage,
    Message,
    message_fingerprint,
    tool_fingerprint,
)
from selfctx.domain.chat import (
    AssistantMessage,
    ToolCallRequest,
    ToolResult,
    Turn,
    UserMessage,
)

__all__ = ["SYSTEM_MARK", "Cursor", "Plan", "Planned"]


@attrs.frozen
class Planned:
    """A new message of the list, with its calls mapped to object ids."""

    message: Message
    position: int
    """Its index in the harness's list."""
    fingerprint: str
    calls: tuple[ToolCallRequest, ...] = ()
    """For ``assistant``: its calls, under their object ids."""
    answers: str | None = None
    """For ``tool``: the object id of the call it answers."""


@attrs.frozen
class Plan:
    """What one list holds that is new, and what the view becomes once it is recorded."""

    new: tuple[Planned, ...]
    diverged: bool
    fingerprints: tuple[str, ...]
    objects: tuple[tuple[str, ...], ...]
    """For each position of the list: the object ids of an assistant message's calls, or of the
    call a tool result answers."""


class Cursor:
    """What one session's ingestor knows of the harness's list and of what it recorded."""

    def __init__(self, session_id: str, max_output_bytes: int) -> None:
        self.ids = CallIds(session_id)
        """The session's tool calls: the harness's ids and the object ids they are stored as."""
        self.max_output_bytes = max_output_bytes
        self.view: list[str] = []
        self.view_objects: list[tuple[str, ...]] = []
        self.recorded: collections.Counter[str] = collections.Counter()
        self.recorded_calls: dict[str, list[tuple[str, ...]]] = {}
        """Fingerprint of an assistant message → its calls' object ids, for each recorded copy."""
        self.by_harness_ids: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
        """The harness's ids of an assistant message's calls → their object ids, per message."""
        self.total = 0
        """Messages recorded over the session's life."""
        self._keys: dict[int, tuple[Message, str]] = {}
        """The fingerprints of the last list's messages, by identity (messages are immutable, and
        a message's ids map to the same ids for the session's life): a harness that keeps its
        parsed messages, as the proxy does, pays for the new ones only."""

    def restore(self, turns: Iterable[Turn], system_prompt: str) -> None:
        """Rebuild everything from the stored chat (after a resume: nothing is re-recorded when
        the harness sends the same list again)."""
        view: list[str] = []
        objects: list[tuple[str, ...]] = []
        for turn in turns:
            for message in turn.messages:
                calls: tuple[ToolCallRequest, ...] = ()
                held: tuple[str, ...] = ()
                if isinstance(message, UserMessage):
                    fp = message_fingerprint("user", message.text)
                elif isinstance(message, AssistantMessage):
                    calls = message.tool_calls
                    self.ids.add_all(calls)
                    fp = self._assistant_fingerprint(message.text, calls)
                    held = tuple(c.id for c in calls)
                elif isinstance(message, ToolResult):
                    fp = tool_fingerprint(self.ids.provider_id(message.toolcall_id))
                    held = (message.toolcall_id,)
                    self.ids.answered.add(message.toolcall_id)
                else:
                    continue  # the context manager's own notes are not the harness's messages
                view.append(fp)
                objects.append(held)
                self._count(fp, calls)
        if view:  # only a session with recorded messages has its prompt in the view
            view.insert(0, message_fingerprint("system", system_prompt))
            objects.insert(0, ())
        self.view, self.view_objects = view, objects

    def key(self, message: Message) -> str:
        """The fingerprint of a message of the harness's list (an id of ours that came back in
        counts as the harness's id of its call)."""
        canonical = self.ids.canonical
        if message.role == "tool":
            call_id = message.tool_call_id or ""
            mapped = canonical(call_id)
            return message.fingerprint if mapped == call_id else tool_fingerprint(mapped)
        calls = [(canonical(c.id), c.name, c.arguments) for c in message.tool_calls]
        if all(mapped == c.id for (mapped, _, _), c in zip(calls, message.tool_calls, strict=True)):
            return message.fingerprint  # the ids are the harness's own: the message's cached one
        return message_fingerprint(message.role, message.text, calls)

    def _assistant_fingerprint(self, text: str, calls: Sequence[ToolCallRequest]) -> str:
        harness = [(self.ids.provider_id(c.id), c.name, c.arguments) for c in calls]
        return message_fingerprint("assistant", text, harness)

    def _count(self, fp: str, calls: Sequence[ToolCallRequest]) -> None:
        self.recorded[fp] += 1
        if calls:
            held = tuple(c.id for c in calls)
            self.recorded_calls.setdefault(fp, []).append(held)
            harness = tuple(c.provider_id or c.id for c in calls)
            self.by_harness_ids.setdefault(harness, []).append(held)
        self.total += 1

    # -- planning --------------------------------------------------------------------------

    def plan(self, messages: Sequence[Message], lead: int) -> Plan:
        """What is new in ``messages`` (its first ``lead`` messages are the system prompt, never
        new), with every call mapped; raises :class:`MalformedMessage` (nothing recorded) when a
        result answers no call, answers a call a second time, or is too large."""
        kept, used = self._keys, {}
        for message in messages:  # a message met in the last list keeps its fingerprint
            hit = kept.get(id(message))
            if hit is None or hit[0] is not message:
                hit = (message, self.key(message))
            used[id(message)] = hit
        self._keys = used
        fps = tuple(used[id(m)][1] for m in messages)
        prefix = 0
        for seen, fp in zip(self.view, fps, strict=False):
            if seen != fp:
                break
            prefix += 1
        if prefix == len(fps):  # nothing beyond what was seen (a retry or a truncation)
            return Plan((), False, fps, tuple(self.view_objects[:prefix]))
        return _Planner(self, messages, fps, prefix, lead).run()

    def recorded_one(self, item: Planned) -> None:
        """``item`` is now recorded."""
        if item.message.role == "assistant":
            self.ids.add_all(item.calls)
        elif item.answers is not None:
            self.ids.answered.add(item.answers)
        self._count(item.fingerprint, item.calls)

    def settle(self, plan: Plan, consumed: int) -> None:
        """Move the view on after ``consumed`` of the plan's new messages were recorded."""
        if consumed == len(plan.new):
            if plan.diverged or len(plan.fingerprints) > len(self.view):
                self.view = list(plan.fingerprints)  # a prefix keeps the longer view
                self.view_objects = list(plan.objects)
        elif not plan.diverged and consumed:
            # Part of an append was recorded: the view is the list up to the last of it.
            end = plan.new[consumed - 1].position + 1
            self.view = list(plan.fingerprints[:end])
            self.view_objects = list(plan.objects[:end])


class _Planner:
    """One pass over the part of a list after the common prefix with the view."""

    def __init__(
        self,
        cursor: Cursor,
        messages: Sequence[Message],
        fps: tuple[str, ...],
        prefix: int,
        lead: int,
    ) -> None:
        self.cursor = cursor
        self.messages = messages
        self.fps = fps
        self.prefix = prefix
        self.lead = lead
        self.ids = cursor.ids.copy()
        self.diverged = prefix < len(cursor.view)
        self.objects: list[tuple[str, ...]] = list(cursor.view_objects[:prefix])
        self.current: dict[str, str] = {}
        """Harness id → the object id a result naming it answers, as of this point in the list."""
        self.claimed: set[str] = set()
        self.available: collections.Counter[str] = collections.Counter()
        self.matches: collections.Counter[str] = collections.Counter()
        """Per fingerprint: how many messages after the prefix are recorded copies."""
        self.matched: collections.Counter[str] = collections.Counter()
        if self.diverged:
            for message, held in zip(messages[:prefix], self.objects, strict=True):
                self._point(message, held)
            self.available = collections.Counter(cursor.recorded)
            self.available.subtract(fps[:prefix])
            tail = collections.Counter(fps[prefix:])
            self.matches = collections.Counter(
                {fp: min(n, max(0, self.available[fp])) for fp, n in tail.items()}
            )

    def run(self) -> Plan:
        new: list[Planned] = []
        for index in range(self.prefix, len(self.messages)):
            message, fp = self.messages[index], self.fps[index]
            if index < self.lead:  # a leading system message: the prompt, not the chat
                self.objects.append(())
            elif message.role == "tool":
                self._result(message, index, fp, new)
            elif self.diverged and self.available[fp] > 0:
                self._known(message, fp)
            elif self.diverged and (edited := self._edited(message)) is not None:
                self.objects.append(edited)  # an assistant message the harness edited
                self._point(message, edited)
            elif message.role == "assistant":
                calls = tuple(self.ids.request(call) for call in message.tool_calls)
                new.append(Planned(message, index, fp, calls=calls))
                held = tuple(c.id for c in calls)
                self.objects.append(held)
                self._point(message, held)
            else:
                new.append(Planned(message, index, fp))
                self.objects.append(())
        return Plan(tuple(new), self.diverged, self.fps, tuple(self.objects))

    def _point(self, message: Message, held: Sequence[str]) -> None:
        if message.role == "assistant":
            for call, object_id in zip(message.tool_calls, held, strict=False):
                self.current[self.ids.canonical(call.id)] = object_id
                self.claimed.add(object_id)

    def _result(self, message: Message, index: int, fp: str, new: list[Planned]) -> None:
        call_id = self.ids.canonical(message.tool_call_id or "")
        target = self.current.get(call_id) or self.ids.answer(call_id)
        if target is None:
            raise MalformedMessage(
                message.index, f"tool result for {call_id!r}, which no assistant message requested"
            )
        self.objects.append((target,))
        if target in self.ids.answered:
            if self.diverged and target in self.cursor.ids.answered:
                return  # recorded already: a diverging list holds it again
            raise MalformedMessage(message.index, f"a second result for tool call {call_id!r}")
        limit = self.cursor.max_output_bytes
        text = message.text
        if len(text) > limit // 4 and len(text.encode("utf-8", "surrogatepass")) > limit:
            raise MalformedMessage(
                message.index, f"the tool output is over the limit of {limit} bytes"
            )
        self.ids.answered.add(target)
        new.append(Planned(message, index, fp, answers=target))

    def _known(self, message: Message, fp: str) -> None:
        """A message recorded before: its calls are those of a recorded copy (the list is taken
        to hold the latest copies of identical messages, as a compaction keeps the recent ones:
        the j-th match after the prefix is copy ``len(copies) - matches + j``)."""
        self.available[fp] -= 1
        copies = self.cursor.recorded_calls.get(fp, [])
        j = self.matched[fp]
        self.matched[fp] += 1
        held = copies[max(0, len(copies) - self.matches[fp] + j)] if copies else ()
        self.objects.append(held)
        self._point(message, held)

    def _edited(self, message: Message) -> tuple[str, ...] | None:
        """The calls of the recorded assistant message that ``message`` (not recorded as it
        stands) is an edited copy of, or None. An edited copy differs in its text only: it
        carries the same calls — the same harness ids in the same order, with the same names
        and arguments (a harness that reuses ids sends new calls under known ids)."""
        if message.role != "assistant" or not message.tool_calls:
            return None
        harness = tuple(self.ids.canonical(c.id) for c in message.tool_calls)
        wanted = [(c.name, c.arguments) for c in message.tool_calls]
        for held in reversed(self.cursor.by_harness_ids.get(harness, [])):
            if any(i in self.claimed for i in held):
                continue
            calls = [self.cursor.ids.call(i) for i in held]
            if [(c.name, c.arguments) for c in calls if c is not None] == wanted:
                return held
        return None
