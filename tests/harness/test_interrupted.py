"""A client that dies part-way through recording a tool result: the resumed session finishes it.

Recording one tool result is several commands (its reads, the tool call, then the discovery of
what it listed and the indexing of what it wrote or edited). The client is "killed" here by a store
that stops the process's work right after a chosen commit; a new client on the same store then
resumes the session, and must end where a client that never died would have ended — without
applying an edit twice. (``tests/xtdb/test_client_crash.py`` does the same with kill -9 on a real
node at random points.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.harness.session import HarnessSession
from selfctx.adapters.memory import MemoryStore
from selfctx.application.persistence import LOG_TYPE, log_entries
from selfctx.application.ports.store import Document, Expect, Receipt
from selfctx.application.service import ContextService
from selfctx.application.settings import Settings
from tests.support import WrappedStore

SID = "interrupted"


class Killed(BaseException):
    """The client's process died (nothing after this point ran)."""


class DyingStore(WrappedStore):
    """Stops the client right after the commit whose log entry records ``command`` (the n-th)."""

    def __init__(self, inner: MemoryStore, command: str, nth: int = 1) -> None:
        super().__init__(inner)
        self.command, self.nth = command, nth

    def commit(self, puts: Sequence[Document], expect: Sequence[Expect] = ()) -> Receipt:
        receipt = super().commit(puts, expect)
        held = [e for d in puts if d.get("type") == LOG_TYPE for e in log_entries(d)]
        if any(e.get("command") == self.command for e in held):
            self.nth -= 1
            if self.nth == 0:
                raise Killed(self.command)
        return receipt


def service(store: Any) -> ContextService:
    return build_service(
        store=store,
        workspace="/",
        default_filesystem_id="replayed-fs",
        settings=Settings(policy="ssot"),
    )


def asks(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """An assistant message requesting one tool call."""
    function = {"name": name, "arguments": arguments}
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": call_id, "function": function}],
    }


def answer(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def conversation() -> list[dict[str, Any]]:
    view = {"command": "view", "path": "/w/a.py"}
    edit = {"command": "str_replace", "path": "/w/a.py", "old_str": "x = 1"}
    edit["new_str"] = "x = 1  # one"
    return [
        {"role": "system", "content": "You are tested."},
        {"role": "user", "content": "Look around, then fix a.py."},
        asks("c1", "bash", {"command": "ls /w"}),
        answer("c1", "a.py\nb.py\n"),
        asks("c2", "str_replace_editor", view),
        answer("c2", "Here's the result of running `cat -n` on /w/a.py:\n     1\tx = 1\n"),
        asks("c3", "str_replace_editor", edit),
        answer("c3", "The file /w/a.py has been edited."),
        {"role": "assistant", "content": "Done."},
    ]


def run(store: Any, messages: list[dict[str, Any]]) -> HarnessSession:
    session = HarnessSession(service(store), SID, "openai", cwd="/w", roots=["/w"])
    for end in range(1, len(messages) + 1):
        session.ingest(messages[:end])
    return session


@pytest.fixture
def uninterrupted() -> tuple[MemoryStore, HarnessSession]:
    store = MemoryStore()
    return store, run(store, conversation())


def commands(store: MemoryStore) -> list[str]:
    return [e["command"] for e in store.session_log(SID) if e["command"] != "Resume"]


@pytest.mark.parametrize(
    ("command", "nth"),
    [
        ("RecordToolCall", 1),  # the listing's discovery was left undone
        ("RecordToolCall", 3),  # the edit's indexing was left undone
        ("IndexFile", 2),  # the edit was indexed, nothing else was left: it must not run twice
        ("Discover", 1),
    ],
)
def test_a_resumed_client_finishes_the_interrupted_tool_result(
    uninterrupted: tuple[MemoryStore, HarnessSession], command: str, nth: int
) -> None:
    store = MemoryStore()
    with pytest.raises(Killed):
        run(DyingStore(store, command, nth), conversation())
    resumed = run(store, conversation())

    reference_store, reference = uninterrupted
    assert commands(store) == commands(reference_store)
    assert resumed.service.state(SID) == reference.service.state(SID)
    assert resumed.service.assemble(SID) == reference.service.assemble(SID)
    a = resumed.service.object_id_for("/w/a.py")
    assert resumed.service.object(SID, a) == reference.service.object(SID, a)
    assert "# one" in str(resumed.service.object(SID, a).content)  # edited, once
    assert str(resumed.service.object(SID, a).content).count("# one") == 1


def test_a_finished_tool_result_is_not_run_again() -> None:
    store = MemoryStore()
    first = run(store, conversation()[:-1])  # the session ends with the edit's result
    assert commands(store)[-1] == "IndexFile"
    before = commands(store)
    second = HarnessSession(service(store), SID, "openai", cwd="/w", roots=["/w"])
    assert commands(store) == before
    assert second.service.state(SID) == first.service.state(SID)
