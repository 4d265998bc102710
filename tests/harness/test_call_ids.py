"""A harness's tool-call ids and the object ids they are stored and shown under (decision
0030).

The harness names its calls as it likes; none of its ids is ever an object id. Ids shaped like
the store's own documents wedge no session; an id equal to a file's or another session's object
id is a call like any other; reused ids are new calls; every id sent to a provider is valid for
its format, and every id the model or the harness sends back maps to its call.
"""

from __future__ import annotations

from typing import Any

import pytest

from selfctx.adapters.harness import HarnessSession
from selfctx.adapters.harness.ids import CallIds, emitted_id
from selfctx.adapters.harness.render import (
    InvalidRequest,
    to_anthropic,
    to_openai,
    validate_anthropic,
    validate_openai,
)
from selfctx.application import persistence
from selfctx.application.usecases import chat as chat_usecase
from selfctx.domain.chat import AssistantMessage, ToolCallRequest, ToolResult
from selfctx.domain.errors import DuplicateObject, InvalidInput
from selfctx.domain.identifiers import (
    RESERVED_PREFIXES,
    is_valid_toolcall_id,
    toolcall_id_problem,
    toolcall_object_id,
)
from selfctx.domain.infrastructure import chat_id_for, session_id_for
from selfctx.domain.objects import FileObject, ToolcallObject
from selfctx.domain.session import machine
from tests.harness.conftest import (
    CWD,
    ROOTS,
    a_assistant,
    a_result,
    a_use,
    a_user,
    bash,
    fid,
    make_service,
    mini,
    o_assistant,
    o_call,
    o_system,
    o_tool,
    o_user,
    open_harness,
    recorded_call_ids,
    tc,
)


def both_valid(h: HarnessSession) -> tuple[dict[str, Any], dict[str, Any]]:
    context = h.service.assemble(h.session_id)
    openai, anthropic = to_openai(context), to_anthropic(context)
    validate_openai(openai)
    validate_anthropic(anthropic)
    return openai, anthropic


def toolcalls(h: HarnessSession) -> list[ToolcallObject]:
    state = h.service.state(h.session_id)
    out = []
    for object_id in state.index:
        obj = h.service.object(h.session_id, object_id)
        if isinstance(obj, ToolcallObject):
            out.append(obj)
    return out


# -- ids shaped like the store's own documents -------------------------------------------------


@pytest.mark.parametrize(
    "hostile",
    [
        "log:victim:000000003",
        "log:victim:000000004",
        "session:victim",
        "chat:victim",
        "system_prompt:victim",
    ],
)
def test_a_call_id_shaped_like_another_sessions_documents_wedges_nothing(hostile: str) -> None:
    service = make_service()
    victim = open_harness(service, session_id="victim")
    victim.ingest([o_user("first")])
    attacker = open_harness(service, session_id="attacker")
    attacker.ingest([o_user("go"), o_assistant("", bash(hostile, "ls")), o_tool(hostile, "x")])
    # The attacker's call is recorded, under an id of its own.
    assert [t.content for t in toolcalls(attacker)] == ["x"]
    assert recorded_call_ids(service, "attacker") == [hostile]
    # The victim moves on: its next log entries, prompt, chat and session are its own.
    for n in range(2, 6):
        victim.ingest([o_user("first"), *[o_user(f"more {k}") for k in range(2, n + 1)]])
    assert victim.ingestor.total == 5
    service.close_session("victim")
    again = open_harness(service, session_id="victim")  # and after a resume
    more = [o_user(f"more {k}") for k in range(2, 7)]
    assert again.ingest([o_user("first"), *more]).consumed == 1
    entry = service.store.get(persistence.log_entry_id("victim", 3))
    assert entry is not None and entry["type"] == "session_log"
    stored = service.store.get(hostile)
    assert stored is None or stored["type"] != "toolcall"


def test_no_infrastructure_id_is_a_valid_toolcall_id() -> None:
    """Every id the store gives its own documents fails the rule every toolcall id passes."""
    infrastructure = [
        persistence.log_entry_id("s1", 3),
        session_id_for("s1"),
        chat_id_for("s1"),
        "system_prompt:s1",
        fid("/testbed/a.py"),
    ]
    for object_id in infrastructure:
        assert toolcall_id_problem(object_id) is not None, object_id
    for prefix in RESERVED_PREFIXES:
        assert not is_valid_toolcall_id(f"{prefix}x")
    assert is_valid_toolcall_id(toolcall_object_id("s1", "log:s1:000000001", 1))


@pytest.mark.parametrize("bad", ["log:s1:000000009", "chat:s1", "a" * 41, "a b", "x/y", "#2"])
def test_the_service_refuses_an_invalid_toolcall_id_before_recording_anything(bad: str) -> None:
    service = make_service()
    service.start_session("s1", "")
    service.record_user_message("s1", "go")
    before = service.log_position("s1"), service.store.latest_tx()
    with pytest.raises(InvalidInput):
        service.record_assistant_message("s1", "", [ToolCallRequest(bad, "bash", {})])
    with pytest.raises(InvalidInput):
        service.record_tool_call("s1", bad, tool="bash", args={}, output="x")
    assert (service.log_position("s1"), service.store.latest_tx()) == before


# -- ids equal to other objects' ids -----------------------------------------------------------


def test_a_call_id_equal_to_a_file_read_in_the_same_list_is_a_call_of_its_own() -> None:
    h = open_harness()
    a_py = fid("/testbed/a.py")
    h.ingest(
        [
            o_user("go"),
            o_assistant("", bash("c1", "cat a.py")),
            o_tool("c1", mini("x = 1\n")),
            o_assistant("", bash(a_py, "ls")),  # the id of the file read just before
            o_tool(a_py, mini("a.py\n")),
        ]
    )
    assert h.ingestor.total == 5
    assert recorded_call_ids(h.service) == ["c1", a_py]
    assert isinstance(h.service.object("s1", a_py), FileObject)
    assert h.ingest([o_user("go"), o_user("and on")]).consumed == 1  # diverged, moves on
    h.service.close_session("s1")
    resumed = open_harness(h.service)
    assert resumed.ingestor.total == 6
    both_valid(resumed)


def test_squatting_the_id_of_a_file_nobody_has_read_blocks_nobody() -> None:
    service = make_service()
    future = fid("/testbed/later.py")
    squatter = open_harness(service, session_id="squatter")
    squatter.ingest([o_user("go"), o_assistant("", bash(future, "true")), o_tool(future, "")])
    open_harness(service, session_id="reader")
    for sid in ("squatter", "reader"):
        result = service.index_file(sid, "/testbed/later.py", "print(1)\n")
        assert result.object_id == future
        assert isinstance(service.object(sid, future), FileObject)


def test_a_call_id_another_session_recorded_is_a_call_of_its_own() -> None:
    service = make_service()
    other = open_harness(service, session_id="other")
    other.ingest([o_user("hi"), o_assistant("", bash("c1", "ls")), o_tool("c1", "theirs")])
    h = open_harness(service)
    h.ingest([o_user("hi"), o_assistant("", bash("c1", "ls")), o_tool("c1", "mine")])
    assert [t.content for t in toolcalls(h)] == ["mine"]
    assert [t.content for t in toolcalls(other)] == ["theirs"]
    assert tc("c1") != tc("c1", session_id="other")


def test_an_object_id_another_session_holds_refuses_the_list_and_records_none_of_it() -> None:
    # Object ids are digests no other session produces; a store that holds one all the same
    # (written by hand, or by a client that took the id) refuses the list's transaction, and
    # the ingest names the id without recording any of the list (decision 0080).
    service = make_service()
    open_harness(service, session_id="squatter")
    service.record_tool_call("squatter", tc("c1"), tool="bash", args={}, output="theirs")
    h = open_harness(service)
    h.ingest([o_user("first")])
    before = service.log_position(h.session_id)
    with pytest.raises(DuplicateObject) as refused:
        h.ingest([o_user("first"), o_assistant("", bash("c1", "ls")), o_tool("c1", "mine")])
    assert refused.value.object_id == tc("c1")
    assert service.log_position(h.session_id) == before
    assert toolcalls(h) == []
    # the session goes on: a list without the call is recorded as usual
    h.ingest([o_user("first"), o_user("second")])
    assert service.log_position(h.session_id) == before + 1
    assert service.object("squatter", tc("c1")).content == "theirs"


# -- reused ids ------------------------------------------------------------------------------


def turn(call_id: str, n: int) -> list[dict[str, Any]]:
    return [
        o_user(f"step {n}"),
        o_assistant("", o_call(call_id, "bash", command=f"echo {n}")),
        o_tool(call_id, mini(f"{n}\n")),
    ]


@pytest.mark.parametrize("call_id", ["call_0", "functions.bash:0"])
def test_a_reused_call_id_after_a_new_assistant_message_is_a_new_call(call_id: str) -> None:
    h = open_harness()
    history = [o_system("sys")]
    for n in range(1, 4):
        history += turn(call_id, n)
        result = h.ingest(history)
        assert (result.consumed, result.diverged) == (3, False)
    assert [t.content for t in toolcalls(h)] == [mini(f"{n}\n") for n in (1, 2, 3)]
    assert [t.id for t in toolcalls(h)] == [tc(call_id, n) for n in (1, 2, 3)]
    openai, _ = both_valid(h)
    assert [m["tool_call_id"] for m in openai["messages"] if m["role"] == "tool"] == [
        tc(call_id, n) for n in (1, 2, 3)
    ]
    # A retry of the same list records nothing; a resume rebuilds the map and goes on.
    assert h.ingest(history).consumed == 0
    h.service.close_session("s1")
    h = open_harness(h.service)
    assert h.ingest(history).consumed == 0
    history += turn(call_id, 4)
    assert h.ingest(history).consumed == 3
    assert toolcalls(h)[-1].id == tc(call_id, 4)
    # A second result for the latest call is refused, as for any call.
    with pytest.raises(Exception, match="a second result"):
        h.ingest([*history, o_tool(call_id, "again")])


def test_reused_ids_across_a_compaction() -> None:
    h = open_harness()
    history = [o_system("sys"), *turn("call_0", 1), *turn("call_0", 2), *turn("call_0", 3)]
    h.ingest(history)
    compacted = [o_system("sys"), o_user("summary of steps 1-2"), *turn("call_0", 3)[1:]]
    compacted += turn("call_0", 4)
    result = h.ingest(compacted)
    # The summary and step 4 are new; step 3 (its call and its result) was recorded.
    assert (result.consumed, result.diverged) == (4, True)
    assert [t.content for t in toolcalls(h)] == [mini(f"{n}\n") for n in (1, 2, 3, 4)]
    assert recorded_call_ids(h.service) == ["call_0"] * 4
    both_valid(h)
    h.service.close_session("s1")
    assert open_harness(h.service).ingest(compacted).consumed == 0


def test_reused_anthropic_ids_in_parallel_calls() -> None:
    h = open_harness(fmt="anthropic")
    messages: list[dict[str, Any]] = [a_user("go")]
    for n in range(3):
        messages += [
            a_assistant(a_use("toolu_01", command=f"ls {n}"), a_use("toolu_02", command="pwd")),
            a_user(a_result("toolu_02", "/"), a_result("toolu_01", f"{n}")),
        ]
    h.ingest(messages)
    assert [t.content for t in toolcalls(h)] == [x for n in range(3) for x in ("/", f"{n}")]
    both_valid(h)


# -- ids valid for their format, and back ------------------------------------------------------

ODD_IDS = [
    "functions.bash:0",
    "toolu_01#2",
    "replay-x/call_1",
    "call_" + "x" * 60,
    "a b\tc",
    "é😀",
    "\ud800",
    "x" * 256,
]


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_every_emitted_id_is_valid_for_both_formats(fmt: str) -> None:
    h = open_harness(fmt=fmt)
    if fmt == "openai":
        messages = [o_user("go")]
        for n, call_id in enumerate(ODD_IDS):
            messages += [o_assistant("", bash(call_id, f"echo {n}")), o_tool(call_id, str(n))]
    else:
        messages = [a_user("go")]
        for n, call_id in enumerate(ODD_IDS):
            messages += [
                a_assistant(a_use(call_id, command=f"echo {n}")),
                a_user(a_result(call_id, str(n))),
            ]
    h.ingest(messages)
    openai, anthropic = both_valid(h)
    emitted = [c["id"] for m in openai["messages"] for c in m.get("tool_calls", [])]
    assert len(emitted) == len(set(emitted)) == len(ODD_IDS)
    assert all(is_valid_toolcall_id(i) for i in emitted)
    uses = [b["id"] for m in anthropic["messages"] for b in m["content"] if b["type"] == "tool_use"]
    assert uses == emitted
    # The model calls a context tool with an id it was shown, or the harness's id: same object.
    shown, harness_id = emitted[1], ODD_IDS[1]
    assert h.handle("deactivate", {"id": shown}).ok
    assert shown not in h.service.state("s1").active
    assert h.handle("activate", {"id": harness_id}).ok
    assert shown in h.service.state("s1").active


def test_a_result_naming_the_emitted_id_answers_its_call() -> None:
    """A harness that sends back the id it was given (the call as the assembled request showed
    it) answers that call; the list is still known after a resume."""
    h = open_harness()
    h.ingest([o_user("go"), o_assistant("", bash("functions.bash:0", "ls"))])
    emitted = tc("functions.bash:0")
    history = [
        o_user("go"),
        o_assistant("", bash("functions.bash:0", "ls")),
        o_tool(emitted, mini("a.py\n")),
    ]
    assert h.ingest(history).consumed == 1
    assert toolcalls(h)[0].content == mini("a.py\n")
    h.service.close_session("s1")
    assert open_harness(h.service).ingest(history).consumed == 0


@pytest.mark.parametrize(
    ("request_", "validate"),
    [
        (
            {"messages": [{"role": "assistant", "content": None, "tool_calls": [
                {"id": "c" * 41, "type": "function",
                 "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c" * 41, "content": "x"}]},
            validate_openai,
        ),
        (
            {"messages": [{"role": "user", "content": "go"},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "functions.bash:0", "name": "f", "input": {}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "functions.bash:0", "content": "x"}]}]},
            validate_anthropic,
        ),
    ],
)  # fmt: skip
def test_the_validators_check_the_id_patterns(request_: dict[str, Any], validate: Any) -> None:
    with pytest.raises(InvalidRequest, match="id"):
        validate(request_)


def test_ids_stored_before_the_scheme_are_sent_under_an_alias_that_maps_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A session recorded by an earlier version kept the harness's own ids as object ids
    (``replay-x/call_1``, ``toolu_01#2``); they are sent under a valid alias, and the alias the
    model is shown resolves to the object."""
    for module in (machine, chat_usecase):  # the earlier version checked no more than this
        monkeypatch.setattr(module, "toolcall_id_problem", lambda value: None)
    service = make_service()
    service.start_session("s1", "")
    service.record_user_message("s1", "go")
    old = ["replay-x/call_1", "toolu_01#2"]
    service.record_assistant_message("s1", "", [ToolCallRequest(i, "bash", {}) for i in old])
    for i in old:
        service.record_tool_call("s1", i, tool="bash", args={}, output=f"out {i}")
    monkeypatch.undo()
    h = HarnessSession(service, "s1", cwd=CWD, roots=ROOTS)
    openai, _ = both_valid(h)
    aliases = [c["id"] for m in openai["messages"] for c in m.get("tool_calls", [])]
    assert aliases == [emitted_id(i) for i in old] and all(map(is_valid_toolcall_id, aliases))
    assert h.handle("deactivate", {"id": aliases[1]}).ok
    assert "toolu_01#2" not in service.state("s1").active
    # New calls of that session reuse nothing: the harness's id gets its second occurrence.
    h.ingest(
        [
            o_user("go"),
            o_assistant("", o_call(old[0], "bash"), o_call(old[1], "bash")),
            o_user("next"),
            o_assistant("", bash("toolu_01#2", "pwd")),
            o_tool("toolu_01#2", "/"),
        ]
    )
    assert h.ingestor.ids.answer("toolu_01#2") == toolcall_object_id("s1", "toolu_01#2", 2)


def test_the_id_map_is_one_place_to_ask() -> None:
    ids = CallIds("s1")
    first = ids.request(ToolCallRequest("call_0", "bash", {}))
    second = ids.request(ToolCallRequest("call_0", "bash", {}))
    assert (first.id, second.id) == (tc("call_0", 1), tc("call_0", 2))
    assert first.provider_id == second.provider_id == "call_0"
    assert ids.answer("call_0") == second.id  # a result answers the latest call
    assert ids.answer(first.id) == first.id  # or the call whose id it names
    assert ids.resolve("call_0") == second.id and ids.resolve(first.id) == first.id
    assert ids.resolve("#3") == "#3"  # handles and file ids are the service's to resolve
    assert ids.answer("nobody") is None
    copy = ids.copy()
    copy.request(ToolCallRequest("call_0", "bash", {}))
    assert ids.occurrences("call_0") == 2 and copy.occurrences("call_0") == 3


def test_the_chat_keeps_the_harness_id_of_each_call() -> None:
    h = open_harness()
    h.ingest([o_user("go"), o_assistant("", bash("call_0", "ls")), o_tool("call_0", "x")])
    messages = [m for t in h.service.state("s1").turns for m in t.messages]
    assistant = next(m for m in messages if isinstance(m, AssistantMessage))
    assert assistant.tool_calls[0].provider_id == "call_0"
    assert assistant.tool_calls[0].id == tc("call_0")
    assert ToolResult(tc("call_0")) in messages
