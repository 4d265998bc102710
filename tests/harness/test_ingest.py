"""Cursor ingestion (decision 0007) and what tool results become (decision 0006): exact chats,
sets and objects after each list a harness hands over."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.harness import HarnessSession, Ingestor, IngestResult
from selfctx.adapters.harness.messages import parse_openai
from selfctx.adapters.memory import MemoryStore
from selfctx.application.policies import policy_by_name
from selfctx.application.ports.store import StoreError
from selfctx.application.service import ContextService
from selfctx.application.settings import Settings
from selfctx.domain.objects import FileObject, FileView, ToolcallObject
from tests.harness.conftest import (
    CWD,
    ROOTS,
    a_assistant,
    a_result,
    a_use,
    a_user,
    bash,
    chat_texts,
    check_invariants,
    fid,
    make_service,
    mini,
    numbered,
    o_assistant,
    o_call,
    o_system,
    o_tool,
    o_user,
    open_harness,
    recorded_call_ids,
    snapshot,
    tc,
)
from tests.support import CountingClock, CountingIds, WrappedStore

A_PY = "import os\n\nprint(os.getcwd())\n"


def ref(call_id: str, tool: str = "bash", status: str = "ok") -> tuple[str, str]:
    return ("tool", f"toolcall_ref id={tc(call_id)} tool={tool} status={status}")


def base() -> list[dict[str, Any]]:
    return [
        o_system("You are a careful engineer."),
        o_user("Fix the bug."),
        o_assistant("Let me read it.", bash("c1", "cat a.py")),
        o_tool("c1", mini(A_PY)),
    ]


def toolcall(service: ContextService, call_id: str) -> ToolcallObject:
    obj = service.object("s1", tc(call_id))
    assert isinstance(obj, ToolcallObject)
    return obj


def file(service: ContextService, path: str) -> FileObject:
    obj = service.object("s1", fid(path))
    assert isinstance(obj, FileObject)
    return obj


# -- the cursor -----------------------------------------------------------------------------


def test_first_list_and_an_append() -> None:
    h = open_harness()
    assert h.ingest(base()) == IngestResult(consumed=3, diverged=False, total=3)
    assert h.service.system_prompt("s1") == "You are a careful engineer."
    more = [*base(), o_assistant("Now list.", bash("c2", "ls")), o_tool("c2", mini("b.py\n"))]
    assert h.ingest(more) == IngestResult(consumed=2, diverged=False, total=5)
    assert chat_texts(h.service) == [
        ("user", "Fix the bug."),
        ("assistant", "Let me read it."),
        ref("c1"),
        ("assistant", "Now list."),
        ref("c2"),
    ]
    check_invariants(h.service.state("s1"))


def test_a_retry_records_nothing_and_writes_nothing() -> None:
    h = open_harness()
    h.ingest(base())
    before = snapshot(h.service)
    assert h.ingest(base()) == IngestResult(consumed=0, diverged=False, total=3)
    assert snapshot(h.service) == before


def test_a_truncated_list_records_nothing_and_the_longer_view_is_kept() -> None:
    h = open_harness()
    full = [*base(), o_user("And the tests?")]
    h.ingest(full)
    before = snapshot(h.service)
    assert h.ingest(full[:2]) == IngestResult(consumed=0, diverged=False, total=4)
    assert snapshot(h.service) == before
    # The harness sends its full list again (a retry after a dropped request): not re-recorded.
    assert h.ingest(full) == IngestResult(consumed=0, diverged=False, total=4)
    assert snapshot(h.service) == before


def test_a_resent_message_after_a_truncation_is_not_recorded_twice() -> None:
    h = open_harness()
    full = [*base(), o_user("And the tests?")]
    h.ingest(full)
    h.ingest(full[:-1])
    again = [*full[:-1], o_user("And the tests?"), o_user("Quickly.")]
    assert h.ingest(again) == IngestResult(consumed=1, diverged=False, total=5)
    assert [t for r, t in chat_texts(h.service) if r == "user"] == [
        "Fix the bug.",
        "And the tests?",
        "Quickly.",
    ]


def test_divergence_after_compaction_records_only_the_summary_and_new_messages() -> None:
    h = open_harness()
    old = [
        *base(),
        o_user("Now run the tests."),
        o_assistant("", bash("c2", "pytest -q")),
        o_tool("c2", mini("3 passed\n")),
    ]
    h.ingest(old)
    compacted = [
        o_system("You are a careful engineer."),
        o_user("Summary: read a.py, ran the tests."),
        *old[4:],  # the recent messages are kept
        o_assistant("All good.", bash("c3", "git diff")),
        o_tool("c3", mini("")),
    ]
    assert h.ingest(compacted) == IngestResult(consumed=3, diverged=True, total=9)
    assert chat_texts(h.service) == [
        ("user", "Fix the bug."),
        ("assistant", "Let me read it."),
        ref("c1"),
        ("user", "Now run the tests."),
        ("assistant", ""),
        ref("c2"),
        ("user", "Summary: read a.py, ran the tests."),
        ("assistant", "All good."),
        ref("c3"),
    ]
    # The compacted list is now the view: appending to it records only the new tail.
    assert h.ingest([*compacted, o_user("Thanks")]).consumed == 1


def test_an_edited_middle_message_is_recorded_after_the_history() -> None:
    h = open_harness()
    old = [*base(), o_user("And the tests?")]
    h.ingest(old)
    edited = [old[0], o_user("Fix the bug, please."), *old[2:]]
    assert h.ingest(edited) == IngestResult(consumed=1, diverged=True, total=5)
    assert chat_texts(h.service)[-1] == ("user", "Fix the bug, please.")
    assert h.ingest(edited).consumed == 0


def test_an_edited_tool_output_is_the_same_tool_message() -> None:
    # Harnesses shorten old outputs; the call id says it is the message already recorded.
    h = open_harness()
    h.ingest(base())
    before = snapshot(h.service)
    shortened = [*base()[:3], o_tool("c1", "[output truncated]")]
    assert h.ingest(shortened) == IngestResult(consumed=0, diverged=False, total=3)
    assert snapshot(h.service) == before
    assert toolcall(h.service, "c1").content == mini(A_PY)


def test_an_edited_assistant_message_with_recorded_calls_is_not_refused() -> None:
    # The harness trims an assistant message's text; its calls are the ones recorded, so it is
    # that message, not a new one reusing their ids — and every later list must still ingest.
    h = open_harness()
    h.ingest(base())
    before = snapshot(h.service)
    trimmed = [*base()[:2], o_assistant("", bash("c1", "cat a.py")), base()[3]]
    assert h.ingest(trimmed) == IngestResult(consumed=0, diverged=True, total=3)
    assert snapshot(h.service) == before
    assert h.ingest([*trimmed, o_user("next")]).consumed == 1


def test_divergence_with_a_repeated_plain_message_is_the_documented_ambiguity() -> None:
    # Decision 0007: after a divergence, a plain message identical to one recorded earlier (a
    # second "continue") is taken as already recorded.
    h = open_harness()
    old = [*base(), o_user("continue")]
    h.ingest(old)
    compacted = [o_system("You are a careful engineer."), o_user("Summary."), o_user("continue")]
    assert h.ingest(compacted) == IngestResult(consumed=1, diverged=True, total=5)
    assert [t for r, t in chat_texts(h.service) if r == "user"] == [
        "Fix the bug.",
        "continue",
        "Summary.",
    ]
    # In an append (no divergence) the same text is a new message.
    assert h.ingest([*compacted, o_user("continue")]).consumed == 1


# -- resume -----------------------------------------------------------------------------------


def test_a_new_ingestor_rebuilds_its_view_and_records_nothing_for_the_same_list() -> None:
    h = open_harness()
    h.ingest(base())
    before = snapshot(h.service)
    again = Ingestor(h.service, "s1", cwd=CWD, roots=ROOTS)
    assert again.ingest(parse_openai(base())) == IngestResult(consumed=0, diverged=False, total=3)
    assert snapshot(h.service) == before
    more = [*base(), o_user("next")]
    assert again.ingest(parse_openai(more)) == IngestResult(consumed=1, diverged=False, total=4)


def test_resume_over_the_same_store_records_nothing() -> None:
    first = make_service()
    h = open_harness(first)
    h.ingest([*base(), o_assistant("", bash("c2", "ls")), o_tool("c2", mini("x.py\n"))])
    second = ContextService(
        store=first.store,
        clock=first._runner.clock,
        ids=first._runner.ids,
        files=first._deps.files,
        mounts=first.mounts,
        tokenizer=first.tokenizer,
    )
    resumed = open_harness(second)
    assert resumed.resumed is not None
    latest = first.store.latest_tx()
    listing = [*base(), o_assistant("", bash("c2", "ls")), o_tool("c2", mini("x.py\n"))]
    assert resumed.ingest(listing) == IngestResult(consumed=0, diverged=False, total=5)
    assert first.store.latest_tx() == latest


def test_resume_with_a_mid_conversation_system_message_records_nothing() -> None:
    h = open_harness()
    listing = [*base(), o_system("Note: the tests are slow."), o_user("go on")]
    assert h.ingest(listing).consumed == 5
    assert chat_texts(h.service)[-2:] == [
        ("user", "[system] Note: the tests are slow."),
        ("user", "go on"),
    ]
    before = snapshot(h.service)
    again = Ingestor(h.service, "s1", cwd=CWD, roots=ROOTS)
    assert again.ingest(parse_openai(listing)).consumed == 0
    assert snapshot(h.service) == before


def test_resume_after_two_leading_system_messages_records_nothing() -> None:
    h = open_harness()
    listing = [o_system("one"), o_system("two"), *base()[1:]]
    h.ingest(listing)
    assert h.service.system_prompt("s1") == "one\n\ntwo"
    before = snapshot(h.service)
    again = Ingestor(h.service, "s1", cwd=CWD, roots=ROOTS)
    assert again.ingest(parse_openai(listing)).consumed == 0
    assert snapshot(h.service) == before


# -- the system prompt --------------------------------------------------------------------


def test_the_system_prompt_follows_the_leading_system_messages() -> None:
    h = open_harness(system_prompt="from the harness setup")
    assert h.service.system_prompt("s1") == "from the harness setup"
    h.ingest([o_user("hi")])  # no system message: the prompt stays
    assert h.service.system_prompt("s1") == "from the harness setup"
    h.ingest([o_system("new prompt"), o_user("hi")])
    assert h.service.system_prompt("s1") == "new prompt"
    assert chat_texts(h.service) == [("user", "hi")]


def test_anthropic_system_parameter_is_the_prompt() -> None:
    h = open_harness(fmt="anthropic")
    h.ingest([a_user("hi")], system="Be brief.")
    assert h.service.system_prompt("s1") == "Be brief."
    assert chat_texts(h.service) == [("user", "hi")]


# -- tool results and their effects --------------------------------------------------------


def test_a_whole_file_read_indexes_the_file_and_links_the_call_without_activating_it() -> None:
    h = open_harness()
    h.ingest(base())
    state = h.service.state("s1")
    a_py = fid("/testbed/a.py")
    assert list(state.index) == [a_py, tc("c1")]
    assert set(state.pool) == {a_py, tc("c1")}
    assert set(state.active) == {a_py}  # decision 0006: the file, not the call too
    assert file(h.service, "/testbed/a.py").content == A_PY
    call = toolcall(h.service, "c1")
    assert (call.tool, call.status, call.content) == ("bash", "ok", mini(A_PY))
    assert tuple(call.file_refs or ()) == (a_py,)
    # The output is still retrievable byte for byte.
    assert h.service.activate("s1", tc("c1")).ok
    assert toolcall(h.service, "c1").content == mini(A_PY)


def test_a_partial_read_stays_an_active_tool_call() -> None:
    h = open_harness()
    h.ingest(
        [
            o_user("look"),
            o_assistant("", bash("c1", "head -3 a.py")),
            o_tool("c1", mini("1\n2\n3\n")),
            o_assistant("", bash("c2", "sed -n 5,10p a.py")),
            o_tool("c2", mini("5\n")),
        ]
    )
    state = h.service.state("s1")
    a_py = h.service.object_id_for("/testbed/a.py")
    # the viewed file is discovered (a stub: its content is never taken from a partial view)
    assert list(state.index) == [tc("c1"), a_py, tc("c2")]
    assert set(state.active) == {tc("c1"), tc("c2")}
    assert file(h.service, "/testbed/a.py").is_stub
    # each call records which lines of it the output shows (decision 0020)
    first, second = toolcall(h.service, "c1"), toolcall(h.service, "c2")
    assert first.file_refs == (a_py,) and second.file_refs == (a_py,)
    assert first.file_views == (FileView(a_py, "lines", ((1, 3),)),)
    assert second.file_views == (FileView(a_py, "lines", ((5, 10),)),)


def test_writes_and_edits_are_recorded_as_changes() -> None:
    h = open_harness()
    h.ingest(
        [
            o_user("fix"),
            o_assistant("", bash("c1", "cat a.py")),
            o_tool("c1", mini(A_PY)),
            o_assistant("", bash("c2", "sed -i 's/x/y/' a.py")),
            o_tool("c2", mini("")),
        ]
    )
    a_py = h.service.object_id_for("/testbed/a.py")
    assert toolcall(h.service, "c1").file_views == (FileView(a_py, "read"),)
    edit = toolcall(h.service, "c2")
    assert edit.file_views == (FileView(a_py, "change"),) and edit.file_refs is None


def test_an_editor_view_with_a_range_is_a_partial_read() -> None:
    h = open_harness(fmt="anthropic")
    args = {"command": "view", "path": "/testbed/a.py", "view_range": [1, 2]}
    h.ingest(
        [
            a_user("look"),
            a_assistant(a_use("t1", "str_replace_editor", **args)),
            a_user(a_result("t1", numbered("/testbed/a.py", "x\ny"))),
        ]
    )
    assert set(h.service.state("s1").active) == {tc("t1")}


def test_reads_and_listings_outside_the_roots_are_dropped() -> None:
    h = open_harness()
    h.ingest(
        [
            o_user("look"),
            o_assistant("", bash("c1", "cat /etc/hosts")),
            o_tool("c1", mini("127.0.0.1 localhost\n")),
            o_assistant("", bash("c2", "find / -name '*.py'")),
            o_tool("c2", mini("/usr/lib/x.py\n/testbed/b.py\n/testbed2/c.py\n")),
        ]
    )
    state = h.service.state("s1")
    b_py = fid("/testbed/b.py")
    assert list(state.index) == [tc("c1"), tc("c2"), b_py]
    assert set(state.active) == {tc("c1"), tc("c2")}  # the /etc read stays a tool call
    assert file(h.service, "/testbed/b.py").is_stub


def test_listing_paths_relative_to_cd() -> None:
    h = open_harness()
    h.ingest(
        [
            o_user("look"),
            o_assistant("", bash("c1", "cd /testbed/src && ls")),
            o_tool("c1", mini("main.py\nutil.py\nREADME.md\n")),
        ]
    )
    assert list(h.service.state("s1").index) == [
        tc("c1"),
        fid("/testbed/src/main.py"),
        fid("/testbed/src/util.py"),
        fid("/testbed/src/README.md"),
    ]


def test_a_str_replace_on_known_content_is_applied() -> None:
    h = open_harness()
    edit = o_call(
        "c2",
        "str_replace_editor",
        command="str_replace",
        path="/testbed/a.py",
        old_str="print(os.getcwd())",
        new_str="print(os.getcwd(), flush=True)",
    )
    h.ingest(
        [
            *base(),
            o_assistant("", edit),
            o_tool("c2", "The file /testbed/a.py has been edited."),
        ]
    )
    assert file(h.service, "/testbed/a.py").content == (
        "import os\n\nprint(os.getcwd(), flush=True)\n"
    )
    assert set(h.service.state("s1").active) == {fid("/testbed/a.py"), tc("c2")}


def test_a_str_replace_on_unknown_or_ambiguous_content_changes_no_file() -> None:
    h = open_harness()
    unknown = o_call(
        "c9", "str_replace_editor", command="str_replace", path="/testbed/b.py", old_str="x"
    )
    h.ingest([o_user("edit"), o_assistant("", unknown), o_tool("c9", "has been edited")])
    assert list(h.service.state("s1").index) == [tc("c9")]  # a container file: nothing to read
    twice = o_call(
        "c2", "str_replace_editor", command="str_replace", path="/testbed/a.py", old_str="o"
    )
    h.ingest([*base(), o_assistant("", twice), o_tool("c2", "has been edited")])
    assert file(h.service, "/testbed/a.py").content == A_PY  # 'o' occurs twice: not guessed


def test_create_indexes_its_file_text() -> None:
    h = open_harness()
    create = o_call(
        "c1", "str_replace_editor", command="create", path="/testbed/new.py", file_text="x = 1\n"
    )
    h.ingest(
        [
            o_user("write"),
            o_assistant("", create),
            o_tool("c1", "File created successfully at: /testbed/new.py"),
        ]
    )
    assert file(h.service, "/testbed/new.py").content == "x = 1\n"
    assert list(h.service.state("s1").index) == [tc("c1"), fid("/testbed/new.py")]


def test_a_write_whose_content_is_unknown_is_not_indexed_in_a_container() -> None:
    h = open_harness()
    h.ingest([o_user("w"), o_assistant("", bash("c1", "echo x > out.txt")), o_tool("c1", mini(""))])
    assert list(h.service.state("s1").index) == [tc("c1")]


def test_fail_statuses() -> None:
    h = open_harness()
    h.ingest(
        [
            o_user("go"),
            o_assistant("", bash("c1", "python x.py")),
            o_tool("c1", mini("Traceback ...\n", 1)),
            o_assistant("", bash("c2", "true")),
            o_tool("c2", mini("", 0)),
        ]
    )
    assert toolcall(h.service, "c1").status == "fail"
    assert toolcall(h.service, "c2").status == "ok"
    a = open_harness(fmt="anthropic", session_id="s2", service=h.service)
    a.ingest([a_user("go"), a_assistant(a_use("t1")), a_user(a_result("t1", "no", is_error=True))])
    obj = h.service.object("s2", tc("t1", session_id="s2"))
    assert isinstance(obj, ToolcallObject) and obj.status == "fail"


def test_results_in_odd_order_and_a_user_message_between_call_and_result() -> None:
    h = open_harness()
    h.ingest(
        [
            o_user("go"),
            o_assistant("", bash("c1", "ls"), bash("c2", "pwd")),
            o_tool("c2", mini("/testbed\n")),
            o_user("(the user interrupts)"),
            o_tool("c1", mini("a.py\n")),
        ]
    )
    assert recorded_call_ids(h.service) == ["c2", "c1"]
    assert [r for r, _ in chat_texts(h.service)] == ["user", "assistant", "tool", "user", "tool"]


def test_a_list_starting_with_an_assistant_message() -> None:
    h = open_harness()
    assert h.ingest([o_assistant("Hello, how can I help?"), o_user("fix it")]).consumed == 2
    assert chat_texts(h.service) == [("assistant", "Hello, how can I help?"), ("user", "fix it")]


def test_harness_session_over_an_existing_session_keeps_the_session() -> None:
    service = make_service()
    h = open_harness(service)
    h.ingest(base())
    again = HarnessSession(service, "s1", "openai", cwd=CWD, roots=ROOTS)
    assert again.ingest(base()).consumed == 0


def test_a_repeated_plain_message_whose_first_copy_is_in_the_common_prefix_is_recorded() -> None:
    # The copy in the common prefix is that recorded message: only copies beyond it may match.
    h = open_harness()
    h.ingest([o_user("go"), o_assistant("ok")])
    result = h.ingest([o_user("go"), o_user("new"), o_user("go")])
    assert result == IngestResult(consumed=2, diverged=True, total=4)
    assert chat_texts(h.service) == [
        ("user", "go"),
        ("assistant", "ok"),
        ("user", "new"),
        ("user", "go"),
    ]


def test_an_openhands_exit_code_is_the_status() -> None:
    h = open_harness()
    done = "\n[The command completed with exit code {0}.]\n[Command finished with exit code {0}]"
    h.ingest(
        [
            o_user("go"),
            o_assistant("", o_call("c1", "execute_bash", command="make")),
            o_tool("c1", "error: no rule" + done.format(2)),
            o_assistant("", o_call("c2", "execute_bash", command="true")),
            o_tool("c2", "" + done.format(0)),
        ]
    )
    assert toolcall(h.service, "c1").status == "fail"
    assert toolcall(h.service, "c2").status == "ok"


@pytest.mark.parametrize("failing_commit", range(1, 8))
def test_a_store_failure_mid_list_loses_nothing_and_records_nothing_twice(
    failing_commit: int,
) -> None:
    # The n-th commit of the ingest fails before reaching the store; the harness sends the same
    # list again: what was recorded stays, the rest follows, nothing twice.
    store = WrappedStore(MemoryStore())
    service = build_service(
        store=store,
        default_filesystem_id="container-x",
        clock=CountingClock(),
        ids=CountingIds(),
        settings=Settings(policy=policy_by_name("ssot")),
    )
    h = open_harness(service)
    listing = [
        *base(),
        o_user("And the tests?"),
        o_assistant("Done."),
    ]
    inner = store.commit
    calls = {"n": 0}

    def commit(puts: Any, expect: Any = ()) -> Any:
        calls["n"] += 1
        if calls["n"] == failing_commit:
            store.fail_commits = 1
        return inner(puts, expect)

    store.commit = commit  # type: ignore[method-assign]
    with contextlib.suppress(StoreError):
        h.ingest(listing)
    store.commit = inner  # type: ignore[method-assign]
    h.ingest(listing)
    assert chat_texts(h.service) == [
        ("user", "Fix the bug."),
        ("assistant", "Let me read it."),
        ref("c1"),
        ("user", "And the tests?"),
        ("assistant", "Done."),
    ]


def test_before_commit_reads_the_new_messages_and_is_in_the_same_transaction() -> None:
    """``before_commit`` (decision 0078) is called once, after everything new is recorded and
    before it is committed: it reads the session with the new messages, and what it records is
    committed with them, in one transaction."""
    store = WrappedStore(MemoryStore())
    service = build_service(store=store, clock=CountingClock(), ids=CountingIds())
    h = open_harness(service)
    h.ingest(base())
    seen: list[tuple[int, list[str]]] = []
    pinned: list[str] = []

    def before_commit() -> None:
        seen.append((store.commits, recorded_call_ids(service)))
        last = service.state("s1").turns[-1].toolcall_ids[-1]  # c2's object
        pinned.append(last)
        service.pin("s1", last)  # decided in the batch: committed with the messages

    commits = store.commits
    more = [*base(), o_assistant("Now list.", bash("c2", "ls")), o_tool("c2", mini("b.py\n"))]
    result = h.ingestor.ingest(parse_openai(more), before_commit=before_commit)
    assert result.consumed == 2 and not result.redone
    assert seen == [(commits, ["c1", "c2"])]
    assert store.commits == commits + 1
    fresh = build_service(store=store.inner, clock=CountingClock(), ids=CountingIds())
    fresh.resume_session("s1")
    assert pinned[0] in fresh.state("s1").pinned
