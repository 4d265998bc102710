"""A whole session under Hypothesis: random reads, discoveries, tool calls, turns, context tools,
external edits and deletes, resumes — beside a plain model that implements the design's rules with
Python sets and lists (nothing from the domain's own functions).

After every step: the invariants of §3.1 hold; the model agrees with ``service.state`` and with the
assembled context; the persisted log replays to the same state (from scratch and from the latest
snapshot); ``state_at`` and ``context_at`` give back what the model recorded after each command.

The machine runs on every store kind of ``store_factory`` (``tests/conftest.py``). On the in-memory
store the example count comes from the Hypothesis profile (``SELFCTX_HYPOTHESIS_PROFILE=long`` for
a longer run); on a real XTDB node every step costs dozens of HTTP requests, so it runs a fixed,
smaller number of shorter examples, each in a namespace of its own on the shared node.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable
from typing import Any

import attrs
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from pyrsistent import thaw

from selfctx.adapters.memory import MemoryStore
from selfctx.application.persistence import decode_events, entry_events
from selfctx.application.ports.files import SourceMissing, SourceUnreachable
from selfctx.application.ports.store import ObjectStore, StoreUnavailable
from selfctx.application.runner import SessionRunner
from selfctx.application.service import ContextService
from selfctx.domain.chat import AssistantMessage, ToolCallRequest, ToolResult, UserMessage
from selfctx.domain.compaction import summary_text
from selfctx.domain.errors import (
    DuplicateCheckpoint,
    DuplicateObject,
    NotAContentObject,
    UnknownCheckpoint,
    UnknownObject,
)
from selfctx.domain.mounts import MountMapping, MountTable
from selfctx.domain.rendering import AssembledContext
from selfctx.domain.session.machine import fold, fold_many
from selfctx.domain.session.state import CollapseWindow, PolicyConfig, SessionState
from tests.conftest import StoreFactory, profile_max_examples
from tests.support import (
    CONTAINER_FS,
    CountingClock,
    CountingIds,
    FakeFileReader,
    WrappedStore,
    compose_service,
    file_id,
    utf16_len,
)

HOST = "host-fs"
SID = "main"
OTHER = "other"

# Agent-visible path -> (filesystem, canonical path, file_type). The agent is sandboxed:
# /workspace is a bind mount of the host's /home/u/proj; /tmp is the container's own.
PATHS: dict[str, tuple[str, str, str]] = {
    "/workspace/a.py": (HOST, "/home/u/proj/a.py", "py"),
    "/workspace/b.md": (HOST, "/home/u/proj/b.md", "md"),
    "/workspace/sub/c.txt": (HOST, "/home/u/proj/sub/c.txt", "txt"),
    "/workspace/Makefile": (HOST, "/home/u/proj/Makefile", ""),
    "/workspace/locked.txt": (HOST, "/home/u/proj/locked.txt", "txt"),
    "/tmp/t.log": (CONTAINER_FS, "/tmp/t.log", "log"),
}
LOCKED = "/home/u/proj/locked.txt"
HOST_PATHS = [p for p, (fs, canon, _) in PATHS.items() if fs == HOST and canon != LOCKED]

TEXT = st.text(alphabet=st.sampled_from("ab \nzé𝄞"), max_size=6)
DISK_BYTES = st.one_of(
    TEXT.map(lambda s: s.encode("utf-8")),
    st.sampled_from([b"\xff\xfe\x00", b"caf\xe9", b"a\x00b", b""]),
)


def fid(agent_path: str) -> str:
    fs, canon, _ = PATHS[agent_path]
    return file_id(fs, canon)


@attrs.frozen
class Version:
    """The model of one stored file version."""

    status: str
    """``stub``, ``text``, ``binary`` or ``deleted``."""
    content: str | None
    raw: bytes | None
    """The bytes the version's file_hash was taken of (None for stubs and deletions)."""
    reported: bool = False
    """Content the harness handed over that the source did not hold (decision 0031)."""


def observe(raw: bytes) -> Version:
    """What full indexing makes of bytes read from disk."""
    if b"\x00" in raw[:8192]:
        return Version("binary", None, raw)
    try:
        return Version("text", raw.decode("utf-8"), raw)
    except UnicodeDecodeError:
        return Version("binary", None, raw)


@attrs.frozen
class Frozen:
    """The model's session after one command, for comparing with the past."""

    index: tuple[str, ...]
    pool: frozenset[str]
    active: frozenset[str]
    pinned: frozenset[str]
    auto: frozenset[str]
    chat: tuple[tuple[tuple[Any, ...], ...], ...]
    context: tuple[Any, ...]
    compaction: tuple[int, str] = (0, "")
    """Turns before the first number are compacted into the summary (decision 0043)."""


class Model:
    """The design's session rules on plain sets and lists."""

    def __init__(self, per_turn: int, turns: int) -> None:
        self.per_turn, self.turns = per_turn, turns
        self.index: list[str] = []
        self.pool: set[str] = set()
        self.active: set[str] = set()
        self.pinned: set[str] = set()
        self.auto: set[str] = set()
        self.chat: list[list[tuple[Any, ...]]] = [[]]
        self.turn_of: dict[str, int] = {}
        self.calls: dict[str, tuple[str, dict[str, Any], str | None, str]] = {}
        """Tool-call id -> (tool, args, output, status)."""
        self.db: dict[str, Version] = {}
        """Agent path -> latest stored version."""
        self.versions: dict[str, int] = {}
        self.path_of: dict[str, str] = {}
        self.prompt = "You are tested."
        self.seq = 0
        self.past: dict[int, Frozen] = {}
        self.checkpoints: dict[str, int] = {}
        """Checkpoint label -> the log position it restores (the state after that many)."""
        self.compacted = 0
        self.summary = ""

    # -- the rules ---------------------------------------------------------------------------

    def collapse(self) -> None:
        oldest_kept = len(self.chat) - 1 - self.turns + 1
        for call in sorted(self.auto):
            turn = self.turn_of[call]
            in_turn = [m[1] for m in self.chat[turn] if m[0] == "tool"]
            if turn < oldest_kept or call not in in_turn[-self.per_turn :]:
                if call in self.pinned:
                    event("the window spared a pinned tool call")
                    continue
                event("the window collapsed a tool call")
                self.auto.discard(call)
                self.active.discard(call)

    def encounter(self, object_id: str) -> bool:
        """Into the index and the pool; True if that changed anything (an object a rollback
        left in the index only comes back into the pool)."""
        if object_id in self.index:
            if object_id in self.pool:
                return False
            self.pool.add(object_id)
            return True
        self.index.append(object_id)
        self.pool.add(object_id)
        return True

    def fresh_label(self, base: str) -> str:
        label, n = base, 1
        while label in self.checkpoints:
            n += 1
            label = f"{base}.{n}"
        return label

    def roll_back(self, label: str) -> str:
        """Conversation rollback: the sets and chat of the checkpoint; returns the label saving
        the state before it."""
        saved = self.fresh_label("before-rollback")
        self.checkpoints[saved] = self.seq
        then = self.past[self.checkpoints[label]]
        self.pool, self.active = set(then.pool), set(then.active)
        self.pinned, self.auto = set(then.pinned), set(then.auto)
        self.chat = [list(turn) for turn in then.chat]
        self.compacted, self.summary = then.compaction
        for number, turn in enumerate(self.chat):
            for message in turn:
                if message[0] == "tool":
                    self.turn_of[message[1]] = number
        return saved

    def write(self, path: str, version: Version) -> None:
        self.db[path] = version
        self.versions[path] = self.versions.get(path, 0) + 1
        self.path_of[fid(path)] = path

    def full_index(self, path: str, seen: Version) -> str:
        """Full indexing step 3: the outcome, writing a version when there is one to write."""
        stored = self.db.get(path)
        if stored is None:
            self.write(path, seen)
            return "created"
        if stored.raw is None or stored.raw != seen.raw or stored.status != seen.status:
            self.write(path, seen)
            return "updated"
        if stored.reported and not seen.reported:  # a report, now read from the source
            self.write(path, seen)
            return "updated"
        return "unchanged"

    def agent_read(self, path: str, seen: Version) -> tuple[str, bool]:
        """Outcome, and whether the session changed (a log entry is written)."""
        outcome = self.full_index(path, seen)
        new = self.encounter(fid(path))
        activated = fid(path) not in self.active
        self.active.add(fid(path))
        self.pool.add(fid(path))
        return outcome, outcome != "unchanged" or new or activated

    def commit(self) -> None:
        self.collapse()
        self.seq += 1
        self.past[self.seq] = self.freeze()

    # -- views -------------------------------------------------------------------------------

    def metadata_line(self, object_id: str) -> str:
        if object_id in self.calls:
            tool, _, _, status = self.calls[object_id]
            return f"id={object_id} type=toolcall tool={tool} status={status}"
        path = self.path_of[object_id]
        head = f"id={object_id} type=file path={path} file_type={PATHS[path][2]}"
        version = self.db[path]
        if version.status == "text":
            assert version.content is not None
            return f"{head} char_count={utf16_len(version.content)}"
        return {"stub": f"{head} [unread]", "deleted": f"{head} [deleted]"}.get(
            version.status, f"{head} [binary]"
        )

    def content_of(self, object_id: str) -> str | None:
        if object_id in self.calls:
            return self.calls[object_id][2]
        return self.db[self.path_of[object_id]].content

    def rendered_chat(self) -> tuple[Any, ...]:
        out: list[Any] = []
        if self.compacted:
            out.append(("user", summary_text(self.compacted, self.summary), (), None))
        for message in itertools.chain.from_iterable(self.chat[self.compacted :]):
            if message[0] == "tool":
                tool, _, _, status = self.calls[message[1]]
                ref = f"toolcall_ref id={message[1]} tool={tool} status={status}"
                out.append(("tool", ref, (), message[1]))
            elif message[0] == "user":
                out.append(("user", message[1], (), None))
            else:
                out.append(("assistant", message[1], message[2], None))
        return tuple(out)

    def context(self) -> tuple[Any, ...]:
        return (
            self.prompt,
            tuple(self.metadata_line(i) for i in self.index if i in self.pool),
            self.rendered_chat(),
            tuple((i, self.content_of(i)) for i in self.index if i in self.active),
        )

    def freeze(self) -> Frozen:
        return Frozen(
            index=tuple(self.index),
            pool=frozenset(self.pool),
            active=frozenset(self.active),
            pinned=frozenset(self.pinned),
            auto=frozenset(self.auto),
            chat=tuple(tuple(turn) for turn in self.chat),
            context=self.context(),
            compaction=(self.compacted, self.summary),
        )


def chat_of(state: SessionState) -> tuple[tuple[tuple[Any, ...], ...], ...]:
    """A state's chat in the model's form."""

    def message(m: Any) -> tuple[Any, ...]:
        if isinstance(m, UserMessage):
            return ("user", m.text)
        if isinstance(m, AssistantMessage):
            calls = tuple((c.id, c.name, thaw(c.arguments)) for c in m.tool_calls)
            return ("assistant", m.text, calls)
        assert isinstance(m, ToolResult)
        return ("tool", m.toolcall_id)

    return tuple(tuple(message(m) for m in turn.messages) for turn in state.turns)


def frozen_of(state: SessionState, context: AssembledContext) -> Frozen:
    return Frozen(
        index=tuple(state.index),
        pool=frozenset(state.pool),
        active=frozenset(state.active),
        pinned=frozenset(state.pinned),
        auto=frozenset(state.auto_active),
        chat=chat_of(state),
        context=context_of(context),
        compaction=(state.compacted, state.summary),
    )


def context_of(ctx: AssembledContext) -> tuple[Any, ...]:
    chat = tuple(
        (
            m.role,
            m.text,
            tuple((c.id, c.name, thaw(c.arguments)) for c in m.tool_calls),
            m.toolcall_id,
        )
        for m in ctx.chat
    )
    return (
        ctx.system_prompt,
        ctx.metadata,
        chat,
        tuple((b.object_id, b.content) for b in ctx.active),
    )


class SessionMachine(RuleBasedStateMachine):
    make_store: Callable[[], ObjectStore] = MemoryStore
    """The store each example runs on (a fresh one, or a fresh namespace of a shared one)."""

    def __init__(self) -> None:
        super().__init__()
        self.store = WrappedStore(self.make_store())
        self.files = FakeFileReader(HOST)
        self.files.make_unreachable(LOCKED)
        self.ids = CountingIds()
        self.clock = CountingClock()
        self.service = self.new_service()
        self.other: ContextService | None = None
        """A second service with the session open, behind on the log until it writes."""
        self.model = Model(5, 3)
        self.disk: dict[str, bytes] = {}
        """Canonical host path -> bytes, the model of the host filesystem."""
        self.previous_index: tuple[str, ...] = ()
        self.calls = 0
        self.checked = 0

    def new_service(self) -> ContextService:
        mounts = MountTable(CONTAINER_FS, (MountMapping("/workspace", "/home/u/proj", HOST),))
        return compose_service(
            store=self.store, clock=self.clock, ids=self.ids, files=self.files, mounts=mounts
        )

    @initialize(per_turn=st.integers(1, 3), turns=st.integers(1, 3))
    def start(self, per_turn: int, turns: int) -> None:
        self.model = Model(per_turn, turns)
        window = CollapseWindow(per_turn=per_turn, turns=turns)
        # No trigger: only the compact rule compacts, its window small enough that it can.
        policy = PolicyConfig("ssot", verbatim_window_tokens=3, min_verbatim_exchanges=1)
        self.service.start_session(SID, "You are tested.", window=window, policy=policy)
        self.model.commit()
        # Another session with objects of its own: their ids must stay out of reach.
        self.service.start_session(OTHER, "other")
        self.service.index_file(OTHER, "/workspace/other.txt", "theirs")
        self.service.record_tool_call(OTHER, "o-tc", tool="bash", args={}, output="secret")

    # -- reads and discoveries -----------------------------------------------------------------

    @rule(path=st.sampled_from(sorted(PATHS)), content=TEXT)
    def read_with_content(self, path: str, content: str) -> None:
        result = self.service.index_file(SID, path, content)
        raw = content.encode("utf-8")
        fs, canon, _ = PATHS[path]
        on_source = fs == HOST and canon != LOCKED and self.disk.get(canon) == raw
        seen = Version("text", content, raw, reported=not on_source)
        outcome, changed = self.model.agent_read(path, seen)
        assert (result.object_id, result.outcome.value, result.path) == (fid(path), outcome, path)
        if changed:
            self.model.commit()

    @rule(path=st.sampled_from(sorted(PATHS)))
    def read_from_source(self, path: str) -> None:
        fs, canon, _ = PATHS[path]
        if fs != HOST or canon == LOCKED:
            self.refused(SourceUnreachable, lambda: self.service.index_file(SID, path))
            return
        if canon not in self.disk:
            self.refused(SourceMissing, lambda: self.service.index_file(SID, path))
            return
        result = self.service.index_file(SID, path)
        outcome, changed = self.model.agent_read(path, observe(self.disk[canon]))
        assert (result.object_id, result.outcome.value) == (fid(path), outcome)
        if changed:
            self.model.commit()

    @rule(paths=st.lists(st.sampled_from(sorted(PATHS)), min_size=1, max_size=4))
    def discover(self, paths: list[str]) -> None:
        report = self.service.discover(SID, paths)
        changed = False
        outcomes = {}
        for path in dict.fromkeys(paths):
            if path in self.model.db:
                outcomes[path] = "unchanged"
            else:
                self.model.write(path, Version("stub", None, None))
                outcomes[path] = "created"
                changed = True
            changed |= self.model.encounter(fid(path))
        assert [(r.object_id, r.outcome.value) for r in report.found] == [
            (fid(p), outcomes[p]) for p in paths
        ]
        if changed:
            self.model.commit()

    # -- chat and tool calls -------------------------------------------------------------------

    @rule(text=TEXT)
    def user_message(self, text: str) -> None:
        self.service.record_user_message(SID, text)
        self.model.chat.append([("user", text)])
        self.model.commit()

    @rule(
        text=TEXT,
        calls=st.integers(1, 4),
        activate=st.sampled_from([True, True, True, False]),
    )
    def a_turn_of_tool_calls(self, text: str, calls: int, activate: bool) -> None:
        """A user message and an assistant message with several tool calls: what moves the
        collapse window most."""
        self.user_message(text)
        self.assistant_with_tool_calls(text, [(text * 3, "ok")] * calls, activate)

    @rule(
        text=TEXT,
        outputs=st.lists(
            st.tuples(st.one_of(st.none(), TEXT), st.sampled_from(["ok", "fail"])), max_size=4
        ),
        activate=st.sampled_from([True, True, True, False]),
    )
    def assistant_with_tool_calls(
        self, text: str, outputs: list[tuple[str | None, str]], activate: bool
    ) -> None:
        ids = []
        for _ in outputs:
            self.calls += 1
            ids.append(f"tc-{self.calls}")
        requests = [ToolCallRequest(i, "bash", {"n": [n], "s": "x"}) for n, i in enumerate(ids)]
        self.service.record_assistant_message(SID, text, requests)
        calls = tuple((r.id, r.name, {"n": [n], "s": "x"}) for n, r in enumerate(requests))
        self.model.chat[-1].append(("assistant", text, calls))
        self.model.commit()
        for n, (call_id, (output, status)) in enumerate(zip(ids, outputs, strict=True)):
            args = {"n": [n], "s": "x"}
            got = self.service.record_tool_call(
                SID,
                call_id,
                tool="bash",
                args=args,
                output=output,
                status=status,  # type: ignore[arg-type]
                activate=activate,
            )
            assert got == call_id
            m = self.model
            m.calls[call_id] = ("bash", args, output, status)
            m.chat[-1].append(("tool", call_id))
            m.turn_of[call_id] = len(m.chat) - 1
            m.encounter(call_id)
            if activate:
                m.active.add(call_id)
                m.auto.add(call_id)
            m.commit()

    @rule(text=st.sampled_from(["You are tested.", "Be brief.", ""]))
    def set_system_prompt(self, text: str) -> None:
        changed = self.service.set_system_prompt(SID, text)
        assert changed == (text != self.model.prompt)
        if changed:
            self.model.prompt = text
            self.model.commit()

    @precondition(lambda self: self.model.calls)
    @rule(data=st.data(), same=st.booleans())
    def record_a_tool_call_again(self, data: st.DataObject, same: bool) -> None:
        call_id = data.draw(st.sampled_from(sorted(self.model.calls)))
        tool, args, output, status = self.model.calls[call_id]
        if same:
            got = self.service.record_tool_call(
                SID,
                call_id,
                tool=tool,
                args=args,
                output=output,
                status=status,  # type: ignore[arg-type]
            )
            assert got == call_id
        else:
            self.refused(
                DuplicateObject,
                lambda: self.service.record_tool_call(
                    SID, call_id, tool=tool, args=args, output=f"{output}!", status="ok"
                ),
            )

    # -- the agent's context tools -------------------------------------------------------------

    def target(self, data: st.DataObject) -> str:
        bad = [
            "nope",
            "",
            "o-tc",
            file_id(HOST, "/home/u/proj/other.txt"),
            f"chat:{SID}",
            f"system_prompt:{SID}",
            f"session:{OTHER}",
        ]
        if not self.model.index:
            return data.draw(st.sampled_from(bad))
        # Mostly ids the session knows (tool calls as often as files), sometimes a bad one.
        known = st.sampled_from(self.model.index)
        calls = [i for i in self.model.index if i in self.model.calls]
        recent = st.sampled_from(calls[-3:]) if calls else known
        return data.draw(st.one_of(known, recent, recent, st.sampled_from(bad)))

    def check_known(self, object_id: str, call: Any) -> bool:
        """Refusals for ids not in the index; True when the id may be used."""
        if object_id in self.model.index:
            return True
        if object_id.startswith(("chat:", "system_prompt:", "session:")):
            self.refused(NotAContentObject, call)
        else:
            self.refused(UnknownObject, call)
        return False

    @rule(data=st.data())
    def activate(self, data: st.DataObject) -> None:
        object_id = self.target(data)

        def call() -> Any:
            return self.service.activate(SID, object_id)

        if not self.check_known(object_id, call):
            return
        m = self.model
        path = m.path_of.get(object_id)
        if path is not None and m.db[path].status == "deleted":
            # a deleted file is read from its source first: it may be back (then it is a new
            # version); still gone or out of reach, its deletion shows
            fs, canon, _ = PATHS[path]
            if fs == HOST and canon != LOCKED and canon in self.disk:
                assert call().ok
                assert m.full_index(path, observe(self.disk[canon])) == "updated"
                m.active.add(object_id)
                m.pool.add(object_id)
                m.auto.discard(object_id)
                m.commit()
                return
        if path is not None and m.db[path].status == "stub":
            fs, canon, _ = PATHS[path]
            if fs != HOST or canon == LOCKED:
                self.refused(SourceUnreachable, call)
                return
            if canon not in self.disk:
                self.refused(SourceMissing, call)
                return
            assert call().ok
            assert m.full_index(path, observe(self.disk[canon])) == "updated"
            m.active.add(object_id)
            m.pool.add(object_id)
            m.commit()
            return
        assert call().ok
        if object_id in m.active and object_id not in m.auto:
            return
        m.active.add(object_id)
        m.pool.add(object_id)  # an object in the index only comes back into the pool
        m.auto.discard(object_id)
        m.commit()

    @rule(data=st.data())
    def deactivate(self, data: st.DataObject) -> None:
        object_id = self.target(data)

        def call() -> Any:
            return self.service.deactivate(SID, object_id)

        if not self.check_known(object_id, call):
            return
        assert call().ok
        if object_id in self.model.active:
            self.model.active.discard(object_id)
            self.model.auto.discard(object_id)
            self.model.commit()

    @rule(data=st.data(), pin=st.booleans())
    def pin_or_unpin(self, data: st.DataObject, pin: bool) -> None:
        object_id = self.target(data)
        method = self.service.pin if pin else self.service.unpin

        def call() -> Any:
            return method(SID, object_id)

        if not self.check_known(object_id, call):
            return
        assert call().ok
        if pin and object_id not in self.model.pinned:
            self.model.pinned.add(object_id)
            self.model.commit()
        elif not pin and object_id in self.model.pinned:
            self.model.pinned.discard(object_id)
            self.model.commit()

    @precondition(lambda self: self.model.auto - self.model.pinned)
    @rule(data=st.data())
    def pin_an_auto_activated_tool_call(self, data: st.DataObject) -> None:
        """Pins of tool calls the window still holds are what the exemption is about."""
        object_id = data.draw(st.sampled_from(sorted(self.model.auto - self.model.pinned)))
        assert self.service.pin(SID, object_id).ok
        self.model.pinned.add(object_id)
        self.model.commit()

    # -- checkpoints and rollback --------------------------------------------------------------

    @rule(label=st.sampled_from([None, "a", "b", "c"]))
    def checkpoint(self, label: str | None) -> None:
        m = self.model
        if label is not None and label in m.checkpoints:
            self.refused(DuplicateCheckpoint, lambda: self.service.checkpoint(SID, label))
            return
        expected = label if label is not None else m.fresh_label("checkpoint-1")
        created = self.service.checkpoint(SID, label)
        assert (created.label, created.position) == (expected, m.seq)
        m.checkpoints[expected] = m.seq
        m.commit()

    @precondition(lambda self: self.model.checkpoints)
    @rule(data=st.data())
    def rollback(self, data: st.DataObject) -> None:
        """Conversation rollbacks, to any checkpoint (those rollbacks saved included)."""
        m = self.model
        label = data.draw(st.sampled_from(sorted(m.checkpoints)))
        report = self.service.rollback(SID, label)
        event(
            f"a rollback left {len(report.leaving)} objects in the index only"
            if report.leaving
            else "a rollback left every object in the pool"
        )
        assert report.position == m.checkpoints[label]
        assert report.saved_as == m.roll_back(label)
        m.commit()

    @precondition(lambda self: len(self.model.chat) > 2)
    @rule()
    def compact(self) -> None:
        """A forced compaction: which turns it takes is the rules' business (tested on their
        own); that everything else still agrees with the model is this machine's."""
        m = self.model
        seq = self.service.log_position(SID)
        report = self.service.compact(SID)
        if report is None:
            assert self.service.log_position(SID) == seq
            return
        event(f"compacted ({report.case})")
        assert m.compacted < report.upto <= len(m.chat) - 1  # the newest turn always stays
        m.compacted, m.summary = report.upto, report.summary
        m.commit()

    @rule()
    def rollback_to_an_unknown_checkpoint_changes_nothing(self) -> None:
        self.refused(UnknownCheckpoint, lambda: self.service.rollback(SID, "never-taken"))

    # -- the outside world ---------------------------------------------------------------------

    @rule(path=st.sampled_from(HOST_PATHS), data=DISK_BYTES)
    def external_write(self, path: str, data: bytes) -> None:
        canon = PATHS[path][1]
        self.disk[canon] = data
        self.files.write(canon, data)

    @precondition(lambda self: self.disk)
    @rule(data=st.data())
    def external_delete(self, data: st.DataObject) -> None:
        canon = data.draw(st.sampled_from(sorted(self.disk)))
        del self.disk[canon]
        self.files.delete(canon)

    @rule(fresh_service=st.booleans())
    def resume(self, fresh_service: bool) -> None:
        if fresh_service:
            # The old service stays open on the session too: see write_through_the_other_service.
            self.service, self.other = self.new_service(), self.service
        report = self.service.resume_session(SID)
        m = self.model
        updated, deleted, orphaned, unchanged = [], [], [], 0
        for object_id in m.index:
            path = m.path_of.get(object_id)
            if path is None or m.db[path].status == "stub":
                continue  # tool calls are not reconciled; stubs were never read
            fs, canon, _ = PATHS[path]
            if fs != HOST or canon == LOCKED:
                orphaned.append(object_id)
            elif canon not in self.disk:
                if m.db[path].status == "deleted":
                    unchanged += 1
                else:
                    m.write(path, Version("deleted", None, None))
                    deleted.append(object_id)
            elif m.db[path].raw == self.disk[canon]:
                unchanged += 1
            else:
                m.write(path, observe(self.disk[canon]))
                updated.append(object_id)
        assert (report.updated, report.deleted, report.orphaned, report.unchanged) == (
            tuple(updated),
            tuple(deleted),
            tuple(orphaned),
            unchanged,
        )
        m.commit()

    @precondition(lambda self: self.other is not None)
    @rule(text=TEXT)
    def write_through_the_other_service(self, text: str) -> None:
        """Two services on one session: the one behind conflicts, catches up, and retries."""
        assert self.other is not None
        self.service, self.other = self.other, self.service
        self.user_message(text)

    @rule(text=TEXT)
    def a_failing_commit_changes_nothing(self, text: str) -> None:
        self.store.fail_commits = 1
        self.refused(StoreUnavailable, lambda: self.service.record_user_message(SID, text))

    @precondition(lambda self: self.model.seq > 1)
    @rule(data=st.data())
    def the_past_is_kept(self, data: st.DataObject) -> None:
        seq = data.draw(st.integers(1, self.model.seq))
        past = self.service.state_at(SID, seq)
        context = self.service.context_at(SID, seq)
        assert past.seq == seq
        assert frozen_of(past.state, context) == self.model.past[seq]

    # -- checks --------------------------------------------------------------------------------

    def refused(self, error: type[Exception], call: Any) -> None:
        seq, state, commits = self.model.seq, self.service.state(SID), self.store.commits
        try:
            call()
        except error as exc:
            assert type(exc) is error, exc
        else:
            raise AssertionError(f"expected {error.__name__}")
        assert (self.service.log_position(SID), self.service.state(SID)) == (seq, state)
        assert self.store.commits == commits

    @invariant()
    def sets_obey_the_ssot(self) -> None:
        if not self.model.seq:
            return
        state = self.service.state(SID)
        index = tuple(state.index)
        assert len(set(index)) == len(index)
        assert set(state.active) <= set(state.pool) <= set(index)
        assert set(state.pinned) <= set(index)
        assert set(state.auto_active) <= set(state.active)
        assert index[: len(self.previous_index)] == self.previous_index  # never shrinks
        assert not any(
            i.startswith(("chat:", "system_prompt:", "session:"))
            for i in itertools.chain(index, state.pool, state.active, state.pinned)
        )
        assert all(state.kinds[i] in ("file", "toolcall") for i in index)
        self.previous_index = index

    @invariant()
    def model_agrees(self) -> None:
        if not self.model.seq:
            return
        state = self.service.state(SID)
        assert self.service.log_position(SID) == self.model.seq
        assert frozen_of(state, self.service.assemble(SID)) == self.model.past[self.model.seq]
        for path, count in self.model.versions.items():
            assert len(self.service.history(fid(path))) == count, path

    @invariant()
    def checkpoints_agree(self) -> None:
        if not self.model.seq:
            return
        listed = [(cp.label, cp.position) for cp in self.service.checkpoints(SID)]
        assert listed == sorted(self.model.checkpoints.items(), key=lambda kv: kv[1])
        assert list(self.service.state(SID).checkpoints) == [label for label, _ in listed]

    @invariant()
    def the_log_replays_to_the_same_state(self) -> None:
        if not self.model.seq:
            return
        state = self.service.state(SID)
        entries = self.store.session_log(SID)
        assert [e["seq"] for e in entries] == list(range(1, self.model.seq + 1))
        events = [event for e in entries for event in decode_events(entry_events(e))]
        assert fold(events) == state
        assert fold_many(events) == state  # in place, as a resume folds its log (0087)
        assert SessionRunner(self.store, self.clock, self.ids).load(SID).state == state
        latest = self.service.state_at(SID, self.model.seq)
        assert latest.state == state
        context = self.service.context_at(SID, self.model.seq)
        assert context == self.service.assemble(SID)

    def teardown(self) -> None:
        self.store.close()


def test_session_machine(store_factory: StoreFactory) -> None:
    if store_factory.shared:
        # One namespace per example: literal ids (main, tc-1, host-fs) recur in every example.
        def make() -> ObjectStore:
            return WrappedStore(store_factory.make(), namespace=f"m{uuid.uuid4().hex[:10]}-")

        examples, steps = 8, 30
    else:
        make = store_factory.make
        # Stateful examples are cheap and varied ones need many: three times the profile's count.
        examples, steps = 3 * profile_max_examples(), 50

    class Machine(SessionMachine):
        make_store = staticmethod(make)

    run_state_machine_as_test(
        Machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
