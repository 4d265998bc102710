"""Hypothesis fuzzing of ingestion: random OpenAI and Anthropic streams — well-formed and
malformed lists, appends, retries, truncations, compactions (a middle range replaced by a
summary), edited messages, resumes, store failures part-way through a list (a commit refused, or
durable with its answer lost; the list is sent again) — with tool outputs of file-like commands.

After every call: no exception but the project's typed errors (a malformed list raises
``MalformedMessage`` and changes nothing); active ⊆ pool ⊆ index; every recorded tool call is in
the chat exactly once; the chat holds exactly the distinct messages ever handed over (plain texts
are unique, so decision 0007's one ambiguity never arises — ``test_the_documented_ambiguity``
shows it); the assembled request validates in both formats.

Runs: the ``harness-fuzz`` profile gives these tests 10,000 streams in total (one fresh service
over the in-memory store per stream, under the ``ssot`` or the ``inline`` layout policy).
``SELFCTX_HARNESS_FUZZ_SCALE`` multiplies that (e.g. 0.1 for a quick local run, 10 for a long
one).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import math
import os
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from selfctx.adapters.harness import HarnessSession, MalformedMessage
from selfctx.adapters.harness.render import (
    to_anthropic,
    to_openai,
    validate_anthropic,
    validate_openai,
)
from selfctx.adapters.memory import MemoryStore
from selfctx.application.ports.store import StoreError
from selfctx.domain.chat import AssistantMessage, ToolResult, UserMessage
from selfctx.domain.errors import SelfContextError
from selfctx.domain.identifiers import is_valid_toolcall_id
from tests.harness.conftest import (
    CWD,
    ROOTS,
    check_invariants,
    make_service,
    mini,
    numbered,
    snapshot,
    swe,
)
from tests.support import WrappedStore

TOTAL_STREAMS = 10_000
POLICIES = st.sampled_from(["ssot", "inline", "relevance"])
"""Each stream runs under one of the layout policies (decision 0008)."""
SHARE = {"openai": 0.4, "anthropic": 0.4, "malformed": 0.2}
_SCALE = float(os.environ.get("SELFCTX_HARNESS_FUZZ_SCALE", "1"))

settings.register_profile(
    "harness-fuzz",
    parent=settings(),  # the loaded profile (its derandomize, database, ...)
    max_examples=TOTAL_STREAMS,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def fuzz(share: str, fraction: float = 1.0) -> settings:
    """The ``harness-fuzz`` profile with this test's share of the streams."""
    examples = max(1, round(TOTAL_STREAMS * SHARE[share] * fraction * _SCALE))
    return settings(settings.get_profile("harness-fuzz"), max_examples=examples)


# -- a conversation in neutral form -------------------------------------------------------------


@attrs.frozen
class Call:
    id: str
    """The id the harness sends (``call_0`` again and again when it reuses ids)."""
    name: str
    args: dict[str, Any]
    output: str
    is_error: bool = False
    uid: int = 0
    """What tells the test's calls apart when the harness reuses ids."""


@attrs.frozen
class Item:
    """One step of the harness's history: ``system``, ``user``, ``note`` (a system message in
    mid-conversation), ``assistant`` (text and calls) or ``results`` (outputs, and a user text
    that comes with them)."""

    kind: str
    text: str = ""
    calls: tuple[Call, ...] = ()


PATHS = [
    "a.py",
    "src/b.py",
    "/testbed/c.txt",
    "/testbed/pkg/__init__.py",
    "/etc/hosts",
    "../outside.py",
    "dir with space/x.py",
    "weird$name.py",
    "Makefile",
]
TEXT = st.text(alphabet=st.sampled_from("abc xyz_.:/\n\t-=()'\"#é😀\ud800"), max_size=30)


@st.composite
def tool_call(draw: st.DrawFn, call_id: str, fmt: str, uid: int = 0) -> Call:
    """A tool call with the output of a file-like command, wrapped as the harness would."""
    return attrs.evolve(draw(_tool_call(call_id, fmt)), uid=uid)


@st.composite
def _tool_call(draw: st.DrawFn, call_id: str, fmt: str) -> Call:
    path = draw(st.sampled_from(PATHS))
    content = draw(TEXT)
    code = draw(st.sampled_from([0, 0, 0, 1, 2]))
    kind = draw(
        st.sampled_from(
            ["cat", "head", "sed", "ls", "find", "grep", "cd", "view", "create", "edit", "other"]
        )
    )
    wrap = draw(st.sampled_from(["mini", "swe", "plain"] if fmt == "anthropic" else ["mini"]))

    def out(text: str) -> str:
        return {"mini": lambda: mini(text, code), "swe": lambda: swe(text), "plain": lambda: text}[
            wrap
        ]()

    names = draw(st.lists(st.sampled_from([*PATHS, "src", "x y.py", "*.py", ""]), max_size=4))
    if kind == "cat":
        return Call(call_id, "bash", {"command": f"cat {path}"}, out(content))
    if kind == "head":
        n = draw(st.integers(1, 5))
        return Call(call_id, "bash", {"command": f"head -n {n} {path}"}, out(content))
    if kind == "sed":
        n = draw(st.integers(1, 5))
        start = draw(st.sampled_from([1, 1, 3]))
        return Call(call_id, "bash", {"command": f"sed -n {start},{n}p {path}"}, out(content))
    if kind == "ls":
        flags = draw(st.sampled_from(["", "-la ", "-R "]))
        return Call(call_id, "bash", {"command": f"ls {flags}src"}, out("\n".join(names)))
    if kind == "find":
        lines = "\n".join(f"./{n}" for n in names)
        return Call(call_id, "bash", {"command": "find . -name '*.py' | head"}, out(lines))
    if kind == "grep":
        lines = "\n".join(f"{n}:3:{content}" for n in names)
        return Call(call_id, "bash", {"command": "grep -rn x ."}, out(lines))
    if kind == "cd":
        return Call(call_id, "bash", {"command": f"cd /testbed/src && cat {path}"}, out(content))
    if kind == "view":
        args: dict[str, Any] = {"command": "view", "path": f"/testbed/{path.lstrip('./')}"}
        if draw(st.booleans()):
            args["view_range"] = [1, 2]
        return Call(call_id, "str_replace_editor", args, numbered(args["path"], content))
    if kind == "create":
        args = {"command": "create", "path": f"/testbed/{path.lstrip('./')}", "file_text": content}
        return Call(call_id, "str_replace_editor", args, "File created successfully.")
    if kind == "edit":
        args = {
            "command": "str_replace",
            "path": f"/testbed/{path.lstrip('./')}",
            "old_str": content[:3],
            "new_str": draw(TEXT),
        }
        return Call(call_id, "str_replace_editor", args, "The file has been edited.")
    command = draw(st.sampled_from(["python x.py", "pytest -q", "echo hi > out.txt", "git diff"]))
    return Call(call_id, "bash", {"command": command}, out(content), is_error=code != 0)


@attrs.define
class Names:
    """Unique texts and call ids for one stream (plain texts never repeat). With ``reuse``, the
    harness numbers calls per message, as harnesses over llama.cpp or Kimi do (``call_0`` on
    every turn): a reused id after a new assistant message is a new call."""

    fmt: str
    reuse: bool = False
    counter: Iterator[int] = attrs.field(factory=itertools.count)

    def text(self, what: str, draw: st.DrawFn | None = None) -> str:
        """A text never used before: plain, ending with whitespace, or whitespace only."""
        n = next(self.counter)
        style = draw(st.sampled_from(["plain"] * 6 + ["trailing", "blank"])) if draw else "plain"
        if style == "blank":
            return " " * (n + 1)
        return f"{what} #{n}" + ("\n\n" if style == "trailing" else "")

    def call_id(self, position: int = 0) -> str:
        prefix = "toolu" if self.fmt == "anthropic" else "call"
        if self.reuse:
            return f"functions.bash:{position}" if self.fmt == "openai" else f"{prefix}_{position}"
        return f"{prefix}_{next(self.counter)}"

    def uid(self) -> int:
        return next(self.counter)


@st.composite
def conversation(draw: st.DrawFn, fmt: str, names: Names) -> list[Item]:
    """A well-formed conversation: leading system messages, then turns of user messages,
    assistant messages and the results of their calls."""
    items = [Item("system", names.text("system")) for _ in range(draw(st.integers(0, 2)))]
    if fmt == "anthropic":
        items = items[:1]  # Anthropic's system is one separate parameter
    if draw(st.booleans()) or not items:
        items.append(Item("user", names.text("task", draw)))
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["assistant", "assistant", "user", "note"]))
        if kind == "note" and fmt == "openai":
            items.append(Item("note", names.text("note", draw)))
        elif kind == "user":
            items.append(Item("user", names.text("user", draw)))
        else:
            n = draw(st.integers(0, 3))
            calls = tuple(draw(tool_call(names.call_id(k), fmt, names.uid())) for k in range(n))
            if names.reuse:  # distinct messages (decision 0007's ambiguity is shown elsewhere)
                calls = tuple(attrs.evolve(c, args={**c.args, "n": c.uid}) for c in calls)
            text = draw(st.sampled_from(["", names.text("assistant", draw)])) if calls else ""
            items.append(
                Item("assistant", text or ("" if calls else names.text("assistant", draw)), calls)
            )
            if calls:
                order = draw(st.permutations(calls))
                with_text = draw(st.booleans())
                items.append(
                    Item("results", names.text("between", draw) if with_text else "", tuple(order))
                )
    return items


def render(items: list[Item], fmt: str) -> tuple[list[dict[str, Any]], str | None]:
    """The harness's message list (and Anthropic's separate system prompt)."""
    out: list[dict[str, Any]] = []
    system = None
    for item in items:
        if item.kind == "system":
            if fmt == "anthropic":
                system = item.text
            else:
                out.append({"role": "system", "content": item.text})
        elif item.kind == "note":
            out.append({"role": "system", "content": item.text})
        elif item.kind == "user":
            out.append({"role": "user", "content": item.text})
        elif item.kind == "assistant" and fmt == "openai":
            message: dict[str, Any] = {"role": "assistant", "content": item.text or None}
            if item.calls:
                message["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": _json(c.args)},
                    }
                    for c in item.calls
                ]
            out.append(message)
        elif item.kind == "assistant":
            blocks: list[dict[str, Any]] = (
                [{"type": "text", "text": item.text}] if item.text else []
            )
            blocks += [
                {"type": "tool_use", "id": c.id, "name": c.name, "input": c.args}
                for c in item.calls
            ]
            out.append({"role": "assistant", "content": blocks})
        elif fmt == "openai":  # results: tool messages, a user message among them
            tools = [
                {"role": "tool", "tool_call_id": c.id, "content": c.output} for c in item.calls
            ]
            if item.text:
                tools.insert(len(tools) // 2, {"role": "user", "content": item.text})
            out += tools
        else:
            results: list[dict[str, Any]] = [
                {
                    "type": "tool_result",
                    "tool_use_id": c.id,
                    "content": c.output,
                    "is_error": c.is_error,
                }
                for c in item.calls
            ]
            if item.text:
                results.append({"type": "text", "text": item.text})
            out.append({"role": "user", "content": results})
    return out, system


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


# -- the stream of calls a harness makes -----------------------------------------------------------


@attrs.frozen
class Step:
    op: str
    items: tuple[Item, ...]
    bad: tuple[dict[str, Any], ...] | None = None
    """Malformed messages appended after ``items`` and a fresh user message."""
    bad_offset: int = 0
    """Position of the first bad message within ``bad``."""
    fail_at: int | None = None
    """Make the n-th commit of the ingest fail; the harness then sends the same list again."""
    lost_ack: bool = False
    """The failing commit reaches the store and only its answer is lost."""


def well_paired(items: list[Item]) -> tuple[Item, ...]:
    """The items without results whose calls are not those of the assistant item right before
    them. A harness that reuses ids sends a result right after its call (providers require it):
    a result cut off from its call by a truncation or a compaction would name another call."""
    out: list[Item] = []
    for item in items:
        if item.kind == "results":
            before = out[-1] if out else None
            asked = (
                {c.uid for c in before.calls} if before and before.kind == "assistant" else set()
            )
            if not {c.uid for c in item.calls} <= asked:
                continue
        out.append(item)
    return tuple(out)


def edited(item: Item, names: Names, draw: st.DrawFn) -> Item:
    if item.kind == "results":
        # bool(): mypy checks the right operand of `and` in the context of the left one's type,
        # and draw() against a tuple strategy would not type-check.
        if bool(item.calls) and draw(st.booleans()):  # a shortened output: the same tool message
            first, *rest = item.calls
            return attrs.evolve(item, calls=(attrs.evolve(first, output="[cut]"), *rest))
        return attrs.evolve(item, text=names.text("edited between", draw)) if item.text else item
    return attrs.evolve(item, text=names.text(f"edited {item.kind}", draw))


@st.composite
def streams(draw: st.DrawFn, fmt: str, malformed: bool = False) -> list[Step]:
    names = Names(fmt, reuse=draw(st.booleans()))

    def listed(items: list[Item]) -> tuple[Item, ...]:
        return well_paired(items) if names.reuse else tuple(items)

    pending = draw(conversation(fmt, names))
    lead = next((n for n, i in enumerate(pending) if i.kind != "system"), len(pending))
    history: list[Item] = pending[:lead]
    pending = pending[lead:]
    steps: list[Step] = []
    ops = ["grow", "grow", "grow", "retry", "shorter", "truncate", "compact", "edit", "resume"]
    if malformed:
        ops += ["bad", "bad", "bad"]
    for _ in range(draw(st.integers(1, 7))):
        op = draw(st.sampled_from(ops)) if len(history) > lead else "grow"
        if op == "grow" and pending:
            n = draw(st.integers(1, 3))
            history, pending = history + pending[:n], pending[n:]
        elif op == "shorter":  # a retry with fewer messages: the history stays as it is
            k = draw(st.integers(lead, len(history) - 1))
            steps.append(Step(op, listed(history[:k])))
            continue
        elif op == "truncate" and len(history) > lead + 1:
            history = history[: draw(st.integers(lead + 1, len(history) - 1))]
        elif op == "compact" and len(history) > lead + 1:
            i = draw(st.integers(lead, len(history) - 1))
            j = draw(st.integers(i + 1, len(history)))
            history = [*history[:i], Item("user", names.text("summary", draw)), *history[j:]]
        elif op == "edit" and len(history) > lead:
            k = draw(st.integers(lead, len(history) - 1))
            history = [*history[:k], edited(history[k], names, draw), *history[k + 1 :]]
        elif op == "bad":  # after the history or a shorter list (then it diverges)
            base = list(listed(history[: draw(st.integers(lead, len(history)))]))
            bad, offset = draw(bad_tail(fmt, base, names))
            steps.append(Step(op, tuple(base), tuple(bad), offset))
            continue
        fail_at = draw(st.sampled_from([None] * 5 + [1, 2, 3, 4, 6]))
        lost = fail_at is not None and draw(st.booleans())
        steps.append(Step(op, listed(history), fail_at=fail_at, lost_ack=lost))
    return steps


@st.composite
def bad_tail(draw: st.DrawFn, fmt: str, history: list[Item], names: Names) -> tuple[list[Any], int]:
    """Malformed messages, and the position of the one the error must name. A second result is
    for a call of ``history``, the list the bad messages follow, whose latest request there is
    answered (a reused id requested again awaits a result of its own)."""
    latest_answered: dict[str, bool] = {}
    for item in history:
        for c in item.calls:
            latest_answered[c.id] = item.kind == "results"
    answered = sorted(i for i, done in latest_answered.items() if done)
    new_id = f"fresh_{names.uid()}"
    if fmt == "openai":
        call = {"id": new_id, "type": "function", "function": {"name": "bash", "arguments": "{}"}}
        options: list[tuple[list[Any], int]] = [
            ([{"role": "robot", "content": "x"}], 0),
            ([{"role": "user", "content": 42}], 0),
            (["not an object"], 0),
            ([{"role": "assistant", "content": "", "tool_calls": "x"}], 0),
            ([{"role": "assistant", "content": "", "tool_calls": [{"id": new_id}]}], 0),
            (
                [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f"}}]}],
                0,
            ),
            ([{"role": "assistant", "content": "", "tool_calls": [call, call]}], 0),
            ([{"role": "tool", "content": "no id"}], 0),
            ([{"role": "tool", "tool_call_id": "nobody", "content": "x"}], 0),
            (
                [
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [
                            dict(call, function={"name": "f", "arguments": {"n": math.nan}})
                        ],
                    }
                ],
                0,
            ),
            (
                [
                    {"role": "assistant", "content": "", "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": new_id, "content": "a"},
                    {"role": "tool", "tool_call_id": new_id, "content": "b"},
                ],
                2,
            ),
        ]
        if answered:
            again = draw(st.sampled_from(answered))
            options += 3 * [([{"role": "tool", "tool_call_id": again, "content": "again"}], 0)]
    else:
        use = {"type": "tool_use", "id": new_id, "name": "bash", "input": {}}
        options = [
            ([{"role": "system", "content": 7}], 0),
            ([{"role": "user", "content": 42}], 0),
            (
                [
                    {
                        "role": "user",
                        "content": [{"type": "tool_use", "id": new_id, "name": "b", "input": {}}],
                    }
                ],
                0,
            ),
            (
                [
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "name": "b", "input": {}}],
                    }
                ],
                0,
            ),
            ([{"role": "assistant", "content": [dict(use, input="x")]}], 0),
            ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "nobody"}]}], 0),
            ([{"role": "user", "content": [{"text": "untyped"}]}], 0),
            ([{"role": "assistant", "content": [use, use]}], 0),
            ([{"role": "assistant", "content": [dict(use, input={"n": math.inf})]}], 0),
        ]
        if answered:
            again = draw(st.sampled_from(answered))
            result = {"type": "tool_result", "tool_use_id": again, "content": "again"}
            options += 3 * [([{"role": "user", "content": [result]}], 0)]
    tail: tuple[list[Any], int] = draw(st.sampled_from(options))
    return tail


# -- running a stream -----------------------------------------------------------------------------


def paired(items: tuple[Item, ...]) -> tuple[Item, ...]:
    """The items with each result's call taken to be the latest call with its id before it in
    the list, as the harness's list pairs them (with reused ids, a stream cut and grown again
    can pair a result with another call than the one it was drawn for)."""
    latest: dict[str, Call] = {}
    out = []
    for item in items:
        if item.kind == "assistant":
            latest.update({c.id: c for c in item.calls})
        elif item.kind == "results":
            calls = tuple(
                attrs.evolve(c, uid=latest[c.id].uid) if c.id in latest else c for c in item.calls
            )
            item = attrs.evolve(item, calls=calls)
        out.append(item)
    return tuple(out)


def identities(items: tuple[Item, ...], fmt: str) -> set[tuple[Any, ...]]:
    """What makes a message distinct for the cursor (decision 0007): a tool result the call it
    answers; an assistant message with calls its calls (edited, it is that message); others
    their role and text."""
    out: set[tuple[Any, ...]] = set()
    # Leading system messages (a note is one in OpenAI lists) are the system prompt.
    prompt = ("system", "note") if fmt == "openai" else ("system",)
    lead = next((n for n, i in enumerate(items) if i.kind not in prompt), len(items))
    for item in paired(items)[lead:]:
        if item.kind in ("user", "note"):
            out.add(("user", ("[system] " if item.kind == "note" else "") + item.text))
        elif item.kind == "assistant":
            calls = tuple(c.uid for c in item.calls)
            out.add(("calls", calls) if calls else ("assistant", item.text))
        else:
            out |= {("tool", c.uid) for c in item.calls}
            if item.text:
                out.add(("user", item.text))
    return out


def chat_messages(h: HarnessSession) -> list[Any]:
    state = h.service.state(h.session_id)
    return [
        m
        for turn in state.turns
        for m in turn.messages
        if isinstance(m, UserMessage | AssistantMessage | ToolResult)
    ]


@contextlib.contextmanager
def failing_commit(store: WrappedStore, n: int, lost_ack: bool) -> Iterator[None]:
    """The n-th commit from now fails: before it reaches the inner store, or (``lost_ack``)
    after it is durable, as a connection dropping before the answer."""
    inner = store.commit
    count = itertools.count(1)

    def commit(puts: Any, expect: Any = ()) -> Any:
        if next(count) == n:
            if lost_ack:
                store.lose_acks = 1
            else:
                store.fail_commits = 1
        return inner(puts, expect)

    store.commit = commit  # type: ignore[method-assign]
    try:
        yield
    finally:
        store.commit = inner  # type: ignore[method-assign]
        store.fail_commits = store.lose_acks = 0


@attrs.define
class Run:
    fmt: str
    h: HarnessSession
    store: WrappedStore
    seen: set[tuple[Any, ...]] = attrs.field(factory=set)
    answered: set[int] = attrs.field(factory=set)
    """The uids of the calls whose results were handed over."""

    def send(self, step: Step) -> None:
        messages, system = render(list(step.items), self.fmt)
        if step.bad is not None:
            fresh = {"role": "user", "content": "a valid message before the bad one"}
            bad_list = [*messages, fresh, *step.bad]
            before = snapshot(self.h.service, self.h.session_id)
            with pytest.raises(MalformedMessage) as caught:
                self.h.ingest(bad_list, system=system)
            assert caught.value.kind == "malformed_message"
            assert caught.value.index == len(messages) + 1 + step.bad_offset, caught.value
            assert snapshot(self.h.service, self.h.session_id) == before
            return
        if step.op == "resume":
            self.h = HarnessSession(
                self.h.service, self.h.session_id, self.fmt, cwd=CWD, roots=ROOTS
            )
        if step.fail_at is not None:
            failing = failing_commit(self.store, step.fail_at, step.lost_ack)
            with failing, contextlib.suppress(StoreError):
                self.h.ingest(messages, system=system)
        self.h.ingest(messages, system=system)
        self.seen |= identities(step.items, self.fmt)
        results = [c.uid for i in paired(step.items) if i.kind == "results" for c in i.calls]
        self.answered |= set(results)
        self.check()

    def check(self) -> None:
        service, sid = self.h.service, self.h.session_id
        check_invariants(service.state(sid))
        chat = chat_messages(self.h)
        results = collections.Counter(m.toolcall_id for m in chat if isinstance(m, ToolResult))
        assert len(results) == len(self.answered)
        assert all(n == 1 for n in results.values()), results
        for object_id in results:  # every id emitted is valid in both formats (decision 0030)
            assert is_valid_toolcall_id(object_id), object_id
        assert all(service.state(sid).in_index(i) for i in results)
        assert len(chat) == len(self.seen), (len(chat), len(self.seen))
        context = service.assemble(sid)
        validate_openai(to_openai(context))
        validate_anthropic(to_anthropic(context))


def run(fmt: str, steps: list[Step], policy: str) -> None:
    store = WrappedStore(MemoryStore())
    h = HarnessSession(make_service(policy, store), "fuzz", fmt, cwd=CWD, roots=ROOTS)
    state = Run(fmt, h, store)
    for step in steps:
        try:
            state.send(step)
        except SelfContextError as exc:  # the only kind of error a harness may see
            if isinstance(exc, MalformedMessage) and step.bad is not None:
                raise
            raise AssertionError(f"a well-formed list was refused at {step.op}: {exc!r}") from exc


@fuzz("openai")
@given(streams("openai"), POLICIES)
def test_openai_streams(steps: list[Step], policy: str) -> None:
    run("openai", steps, policy)


@fuzz("anthropic")
@given(streams("anthropic"), POLICIES)
def test_anthropic_streams(steps: list[Step], policy: str) -> None:
    run("anthropic", steps, policy)


@fuzz("malformed", 0.5)
@given(streams("openai", malformed=True), POLICIES)
def test_malformed_openai_streams(steps: list[Step], policy: str) -> None:
    run("openai", steps, policy)


@fuzz("malformed", 0.5)
@given(streams("anthropic", malformed=True), POLICIES)
def test_malformed_anthropic_streams(steps: list[Step], policy: str) -> None:
    run("anthropic", steps, policy)


def test_the_documented_ambiguity() -> None:
    """Decision 0007: after a divergence, a plain message identical to one recorded earlier but no
    longer in the harness's list is taken as already recorded — the one case where the chat holds
    fewer messages than were handed over."""
    h = HarnessSession(make_service(), "s", "openai", cwd=CWD, roots=ROOTS)
    h.ingest([{"role": "user", "content": "task"}, {"role": "user", "content": "continue"}])
    compacted = [
        {"role": "user", "content": "summary"},
        {"role": "user", "content": "continue"},  # a second, new "continue"
    ]
    assert h.ingest(compacted).consumed == 1  # only the summary
    texts = [m.text for m in chat_messages(h) if isinstance(m, UserMessage)]
    assert texts == ["task", "continue", "summary"]  # 4 handed over, 3 recorded
