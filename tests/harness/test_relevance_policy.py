"""The ``relevance`` policy end to end through a harness session (decision 0021): the files the
agent works on stay visible, an output nothing refers to collapses once the agent has answered
it, a view shown again later collapses first and says so, and everything collapsed comes back
byte-identical."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.harness import HarnessSession
from selfctx.adapters.memory import MemoryStore
from selfctx.application.policies import policy_by_name
from selfctx.application.settings import Settings
from selfctx.application.tokens import ContextCounter
from selfctx.application.usecases.assemble import _paying
from selfctx.domain.objects import FileObject, ToolcallObject
from selfctx.domain.relevance import answer_names
from selfctx.domain.rendering import AssembledContext, RenderedMessage
from tests.harness.conftest import (
    CONTAINER,
    CWD,
    ROOTS,
    bash,
    mini,
    o_assistant,
    o_call,
    o_tool,
    o_user,
    tc,
)

A_PY = "".join(
    f"def function_number_{n}(argument):\n    return argument * {n}\n" for n in range(40)
)
NOISE = "".join(f"Collecting package-{n} (from requirements)\n" for n in range(80))


def session(**overrides: Any) -> HarnessSession:
    settings = Settings(policy=policy_by_name("relevance", **overrides))
    service = build_service(store=MemoryStore(), default_filesystem_id=CONTAINER, settings=settings)
    return HarnessSession(service, "s1", "openai", cwd=CWD, roots=ROOTS)


def shown(h: HarnessSession) -> dict[str, str]:
    """Tool messages of the managed request, by the harness's call id (decision 0030)."""
    return {
        h.ids.provider_id(m["tool_call_id"]): m["content"]
        for m in h.request()["messages"]
        if m["role"] == "tool"
    }


def notes(h: HarnessSession) -> list[str]:
    return [
        m["content"]
        for m in h.request()["messages"]
        if m["role"] == "user" and str(m["content"]).startswith("[context]")
    ]


def read_then_install() -> list[dict[str, Any]]:
    """The task, the module read (the working set) and an install's noise (not used again)."""
    return [
        o_user("fix the bug"),
        o_assistant("Reading the module.", bash("c1", "cat a.py")),
        o_tool("c1", mini(A_PY)),
        o_assistant("Installing what a.py needs.", bash("c2", "pip install -r reqs.txt")),
        o_tool("c2", mini(NOISE)),
    ]


def test_the_working_set_stays_and_an_unused_output_goes_once_answered() -> None:
    h = session()
    messages = read_then_install()
    h.ingest(messages)
    # nothing answered the pip output yet: the model has not seen it, it stays
    assert NOISE in shown(h)["c2"]
    messages += [
        o_assistant("Now back to a.py.", bash("c3", "python -c 'import a'")),
        o_tool("c3", mini("")),
    ]
    h.ingest(messages)
    tools = shown(h)
    assert A_PY in tools["c1"]  # a.py is named in the agent's recent messages
    assert tools["c2"].startswith("[#") and "collapsed: bash ok" in tools["c2"]
    assert notes(h) == []  # collapsed near the end of the prompt, without a note
    # everything collapsed comes back byte-identical
    answer = h.handle("activate", {"id": "c2"})
    assert answer.ok and answer.message.split("\n", 1)[1] == mini(NOISE)


def test_a_view_shown_again_collapses_first_and_says_so() -> None:
    # A trigger so low that every call is over it: batches happen whenever they clear anything.
    h = session(trigger_tokens=1, clear_at_least=1, keep_tokens=10**6)
    messages: list[dict[str, Any]] = [
        o_user("fix"),
        o_assistant("The top of a.py.", bash("c1", "sed -n 1,20p a.py")),
        o_tool("c1", mini(A_PY[:600])),
        o_assistant("Fixing a.py.", bash("c2", "sed -i 's/argument/arg/' a.py")),
        o_tool("c2", mini("")),
        o_assistant("More of a.py.", bash("c3", "sed -n 1,40p a.py")),
        o_tool("c3", mini(A_PY[:1200])),
        o_assistant("And a.py once more.", bash("c4", "wc -l a.py")),
        o_tool("c4", mini("80 a.py\n")),
    ]
    h.ingest(messages)
    tools = shown(h)
    state = h.service.state("s1")
    handle = {i: f"#{state.positions[tc(i)] + 1}" for i in ("c1", "c3")}
    assert tools["c1"].startswith(f"[{handle['c1']} collapsed: bash ok")
    assert f"superseded: {handle['c3']} shows its lines in a newer version" in tools["c1"]
    assert A_PY[:1200] in tools["c3"]  # the newer view of the file the agent works on
    assert state.superseded == {tc("c1"): tc("c3")}
    # near the end of the prompt: collapsed at once, not in a batch with a note
    assert not any(handle["c1"] in note for note in notes(h))
    answer = h.handle("activate", {"id": handle["c1"]})
    assert answer.message.split("\n", 1)[1] == mini(A_PY[:600])


def test_an_older_view_shown_again_goes_in_the_next_batch_with_a_note() -> None:
    # every batch that clears anything, whether or not it pays for its cache break
    h = session(trigger_tokens=1, clear_at_least=1, keep_tokens=10**6, payback_percent=None)
    messages: list[dict[str, Any]] = [
        o_user("fix"),
        o_assistant("The top of a.py.", bash("c1", "sed -n 1,20p a.py")),
        o_tool("c1", mini(A_PY[:600])),
    ]
    for n in range(2, 8):  # a.py stays named; c1 is answered six times
        messages += [
            o_assistant("a.py", bash(f"c{n}", "grep -c x a.py")),
            o_tool(f"c{n}", mini("3\n")),
        ]
    messages += [o_assistant("All of a.py.", bash("c8", "cat a.py")), o_tool("c8", mini(A_PY))]
    h.ingest(messages)
    tools = shown(h)  # the request is where collapses happen
    state = h.service.state("s1")
    handle = {i: f"#{state.positions[tc(i)] + 1}" for i in ("c1", "c8")}
    assert "shows its lines again]" in tools["c1"] and state.superseded[tc("c1")] == tc("c8")
    assert any(f"{handle['c1']} by {handle['c8']}" in note for note in notes(h))


def _superseded_early(sent_before: bool, **overrides: Any) -> tuple[HarnessSession, dict[str, str]]:
    """The view c1 is shown again by c8, early in a short session, with long answers between
    them; ``sent_before``: the calls up to c7 were a request of their own."""
    h = session(trigger_tokens=1, clear_at_least=1, keep_tokens=10**6, **overrides)
    messages: list[dict[str, Any]] = [
        o_user("fix"),
        o_assistant("The top of a.py.", bash("c1", "sed -n 1,20p a.py")),
        o_tool("c1", mini(A_PY[:600])),
    ]
    for n in range(2, 8):
        messages += [
            o_assistant("a.py: " + "the parser reads one number. " * 30, bash(f"c{n}", "ls")),
            o_tool(f"c{n}", mini("3\n")),
        ]
    if sent_before:
        h.ingest(messages)
        shown(h)
    messages += [o_assistant("All of a.py.", bash("c8", "cat a.py")), o_tool("c8", mini(A_PY))]
    h.ingest(messages)
    return h, shown(h)


def test_a_batch_waits_until_its_cache_break_pays_for_itself() -> None:
    # Collapsing c1 would make the provider write again the long answers after it, which the
    # last request sent, and c1 saves too little over the calls to come.
    h, tools = _superseded_early(True)  # a batch must pay back within as many requests as so far
    assert A_PY[:600] in tools["c1"]  # still shown in full
    assert h.service.state("s1").superseded == {}
    _, tools = _superseded_early(True, payback_percent=10_000)  # expected to run 100 times longer
    assert "shows its lines again]" in tools["c1"]
    _, tools = _superseded_early(True, payback_percent=None)  # every batch that clears enough
    assert "shows its lines again]" in tools["c1"]


def test_what_no_request_sent_is_in_no_cache() -> None:
    # The same messages arriving in one request: no provider holds any of them, a collapse
    # breaks nothing, and the batch goes.
    _, tools = _superseded_early(False)
    assert "shows its lines again]" in tools["c1"]


def test_a_batch_takes_what_follows_the_earliest_point_that_pays() -> None:
    # ``sizes``: tokens each collapse clears; ``tails``: tokens from each output to the end of
    # the prompt (what the provider writes again if it changes there).
    sizes = {"early": 100, "late": 3_000, "file": 50}
    tails = {"early": 10_000, "late": 3_500}
    chosen = ["early", "late", "file"]
    # 50 requests to come: reading 3,100 tokens fewer 50 times pays for writing 6,900 again
    assert _paying(chosen, sizes, tails, 50) == ["early", "late", "file"]
    # 10: breaking at `early` does not pay; at `late` it writes 500 again for 3,000 less a call
    assert _paying(chosen, sizes, tails, 10) == ["late", "file"]
    # 0.1: nothing in the chat pays; what is not in the chat breaks nothing and always goes
    assert _paying(chosen, sizes, tails, 0.1) == ["file"]


def test_the_tail_of_each_tool_message_counts_to_the_end_of_the_prompt() -> None:
    counter = ContextCounter(lambda text: len(text))
    context = AssembledContext(
        system_prompt="sys",
        metadata=(),
        chat=(
            RenderedMessage("user", "go"),
            RenderedMessage("tool", "aaaa", toolcall_id="t1"),
            RenderedMessage("assistant", "bb"),
            RenderedMessage("tool", "c", toolcall_id="t2"),
        ),
        active=(),
    )
    assert counter(context) == 3 + 2 + 4 + 2 + 1
    assert counter.tails(context) == {}  # nothing was sent: no cache holds any of it
    counter.sent()
    assert counter.tails(context) == {"t1": 4 + 2 + 1, "t2": 1}
    longer = attrs.evolve(
        context, chat=(*context.chat, RenderedMessage("tool", "dddddd", toolcall_id="t3"))
    )
    counter(longer)
    # t3 is new: written either way, not counted in what a break writes again, and not in tails
    assert counter.tails(longer) == {"t1": 4 + 2 + 1, "t2": 1}


def test_an_output_the_agent_names_by_what_it_introduced_stays_with_named_messages() -> None:
    # a search over many files prints lines of no file it names; the agent answers by naming
    # identifiers only that output had shown
    found = "    data_abstract = models.CharField(max_length=10)\n    fk_abstract_rel = 3\n"

    def run(**overrides: Any) -> dict[str, str]:
        h = session(**overrides)
        h.ingest(
            [
                o_user("fix"),
                o_assistant("Searching.", bash("c1", "find . -exec grep -A 5 symmetrical {} ;")),
                o_tool("c1", mini(found)),
                o_assistant("So `data_abstract` is there; more.", bash("c2", "ls")),
                o_tool("c2", mini("a.py\n")),
                o_assistant("Now the tests.", bash("c3", "ls tests")),
                o_tool("c3", mini("t.py\n")),
            ]
        )
        return shown(h)

    assert found in run(named_messages=20)["c1"]
    assert "collapsed" in run()["c1"]  # off by default: it shows no file of the working set


def test_the_same_lines_again_without_a_change_say_again() -> None:
    h = session(trigger_tokens=1, clear_at_least=1, keep_tokens=10**6)
    h.ingest(
        [
            o_user("look"),
            o_assistant("", bash("c1", "head -n 10 a.py")),
            o_tool("c1", mini(A_PY[:300])),
            o_assistant("", bash("c2", "cat a.py")),
            o_tool("c2", mini(A_PY)),
            o_assistant("a.py it is", bash("c3", "true")),
            o_tool("c3", mini("")),
        ]
    )
    assert "shows its lines again]" in shown(h)["c1"]


def test_keep_tokens_keeps_the_files_named_most() -> None:
    b_py = A_PY.replace("function", "method")
    h = session(trigger_tokens=1, clear_at_least=1, keep_tokens=len(A_PY) // 3)
    messages: list[dict[str, Any]] = [
        o_user("fix"),
        o_assistant("", bash("c1", "cat a.py")),
        o_tool("c1", mini(A_PY)),
        o_assistant("", bash("c2", "cat b.py")),
        o_tool("c2", mini(b_py)),
    ]
    for n in range(3, 6):  # the agent keeps coming back to b.py
        messages += [o_assistant("b.py again", bash(f"c{n}", "true")), o_tool(f"c{n}", mini(""))]
    h.ingest(messages)
    tools = shown(h)
    assert b_py in tools["c2"]
    assert "collapsed" in tools["c1"]  # named once, long ago: over the budget


def test_a_rebuilt_past_context_is_the_one_the_model_saw() -> None:
    h = session(trigger_tokens=1, clear_at_least=1, keep_tokens=10**6)
    sid, seen = "s1", []
    messages: list[dict[str, Any]] = [o_user("go")]
    for n, command in enumerate(["sed -n 1,5p a.py", "sed -i s/a/b/ a.py", "cat a.py", "ls"]):
        messages += [o_assistant("on a.py", bash(f"c{n}", command)), o_tool(f"c{n}", mini(A_PY))]
        h.ingest(messages)
        context = h.service.assemble(sid)
        seen.append((h.service.log_position(sid), context.to_text()))
    for position, text in seen:
        assert h.service.context_at(sid, position).to_text() == text


def test_a_partial_view_of_a_host_file_indexes_the_whole_file(tmp_path: Path) -> None:
    for policy in ("ssot", "relevance"):
        root = tmp_path / policy
        root.mkdir()
        (root / "a.py").write_text(A_PY)
        service = build_service(
            store=MemoryStore(),
            workspace=str(root),
            settings=Settings(policy=policy_by_name(policy)),
        )
        h = HarnessSession(service, "live", "openai", cwd=str(root), roots=[str(root)])
        head = "".join(A_PY.splitlines(keepends=True)[:4])
        h.ingest(
            [
                o_user("look"),
                o_assistant("", bash("c1", "head -n 4 a.py")),
                o_tool("c1", mini(head)),
            ]
        )
        a_id = service.object_id_for(str(root / "a.py"))
        obj = service.object("live", a_id)
        # the object is the whole file, read from its source; the view names 4 lines of it
        assert isinstance(obj, FileObject) and obj.content == A_PY
        state = service.state("live")
        assert a_id in state.pool and a_id not in state.active
        call = service.object("live", tc("c1", session_id="live"))
        assert isinstance(call, ToolcallObject) and call.id in state.active
        assert [v.to_json() for v in call.file_views or ()] == [
            {"file": a_id, "kind": "lines", "ranges": [[1, 4]]}
        ]


def test_a_view_of_a_file_changed_since_goes_once_answered() -> None:
    h = session()
    messages: list[dict[str, Any]] = [
        o_user("fix a.py"),
        o_assistant("Reading a.py.", bash("c1", "sed -n 1,40p a.py")),
        o_tool("c1", mini(A_PY[:1200])),
        o_assistant("Fixing a.py.", bash("c2", "sed -i s/argument/value/ a.py")),
        o_tool("c2", mini("")),
    ]
    h.ingest(messages)
    # a.py changed after the view: what it showed may no longer be so (decision 0021)
    assert shown(h)["c1"].endswith("; stale: #3 changed its file since]")
    control = session()
    control.ingest([*messages[:3], o_assistant("a.py looks fine.", bash("c2", "ls")), messages[4]])
    assert A_PY[:1200] in shown(control)["c1"]  # the same view, no change: kept


def test_the_heaviest_files_view_stays_whatever_its_size() -> None:
    # a budget smaller than the one view of the one file the agent works on keeps it all the same
    h = session(trigger_tokens=1, clear_at_least=1, keep_tokens=10)
    messages: list[dict[str, Any]] = [
        o_user("fix a.py"),
        o_assistant("Reading a.py.", bash("c1", "cat a.py")),
        o_tool("c1", mini(A_PY)),
    ]
    for n in range(2, 5):
        messages += [o_assistant("a.py again", bash(f"c{n}", "true")), o_tool(f"c{n}", mini(""))]
    h.ingest(messages)
    assert A_PY in shown(h)["c1"]


def _foreseen(h: HarnessSession) -> set[str]:
    going = h.service.foreseen(h.session_id)
    assert going is not None  # the relevance policy makes a plan
    return {h.ids.provider_id(i) for i in going}


def test_the_forecast_names_what_the_next_request_collapses() -> None:
    h = session(trigger_tokens=1, clear_at_least=1, keep_tokens=10)
    messages: list[dict[str, Any]] = [
        o_user("fix a.py"),
        o_assistant("Reading a.py.", bash("c1", "cat a.py")),
        o_tool("c1", mini(A_PY)),
    ]
    h.ingest(messages)
    assert A_PY in shown(h)["c1"]
    assert _foreseen(h) == set()  # the one view of the file the agent works on stays
    messages += [
        o_assistant("Installing what a.py needs.", bash("c2", "pip install -r reqs.txt")),
        o_tool("c2", mini(NOISE)),
    ]
    h.ingest(messages)
    assert NOISE in shown(h)["c2"]  # the model has not seen it yet
    assert _foreseen(h) == {"c2"}  # it shows nothing of a.py: it goes once answered
    messages += [o_assistant("Back to a.py.", bash("c3", "python -c 'import a'")), o_tool("c3", "")]
    h.ingest(messages)
    assert NOISE not in shown(h)["c2"] and A_PY in shown(h)["c1"]  # as foreseen


def test_a_displaced_view_goes_in_the_request_its_successor_arrives() -> None:
    # a newer view of the file takes the working set's room: the older one goes at once, so the
    # newer one is written to the provider's cache once, after the break (decision 0069)
    h = session(trigger_tokens=1, clear_at_least=1, keep_tokens=10)
    messages: list[dict[str, Any]] = [
        o_user("fix a.py"),
        o_assistant("Reading a.py.", bash("c1", "cat a.py")),
        o_tool("c1", mini(A_PY)),
        o_assistant("The first lines of a.py.", bash("c2", "sed -n 1,10p a.py")),
        o_tool("c2", mini(A_PY[:300])),
    ]
    h.ingest(messages)
    tools = shown(h)
    assert A_PY not in tools["c1"] and A_PY[:300] in tools["c2"]
    # a view smaller than what a batch must clear waits: the forecast may be wrong
    h = session(trigger_tokens=1, clear_at_least=10**6, keep_tokens=10)
    h.ingest(messages)
    assert A_PY in shown(h)["c1"]
    assert _foreseen(h) == set()


def test_no_forecast_without_a_plan() -> None:
    settings = Settings(policy=policy_by_name("inline"))
    service = build_service(store=MemoryStore(), default_filesystem_id=CONTAINER, settings=settings)
    h = HarnessSession(service, "s1", "openai", cwd=CWD, roots=ROOTS)
    h.ingest([o_user("go"), o_assistant("Reading.", bash("c1", "cat a.py")), o_tool("c1", "x")])
    h.request()
    assert service.foreseen("s1") is None


class _Counting(Mapping[str, Any]):
    """The objects as a turn reads them (``ObjectCache.showing``), counting lookups."""

    lookups = 0

    def __init__(self, inner: Mapping[str, Any]) -> None:
        self.inner = inner

    def __getitem__(self, key: str) -> Any:
        _Counting.lookups += 1
        return self.inner[key]

    def __contains__(self, key: object) -> bool:
        return key in self.inner

    def __iter__(self) -> Iterator[str]:
        return iter(self.inner)

    def __len__(self) -> int:
        return len(self.inner)


def _lookups_for_one_more_call(calls: int) -> int:
    h = session()
    messages: list[dict[str, Any]] = [o_user("fix a.py")]
    for n in range(calls):  # views of a.py among outputs that collapse once answered
        command = f"sed -n {n + 1},{n + 3}p a.py" if n % 5 == 0 else f"pip install p{n}"
        messages += [
            o_assistant("on a.py", bash(f"c{n}", command)),
            o_tool(f"c{n}", mini(A_PY[n * 10 : n * 10 + 1500])),
        ]
    h.ingest(messages)
    h.service.assemble("s1")
    open_session = h.service._open("s1")  # the test counts what a turn reads
    cache = open_session.objects
    showing = cache.showing
    cache.showing = lambda shown: _Counting(showing(shown))  # type: ignore[method-assign]
    _Counting.lookups = 0
    messages += [o_assistant("a.py", bash("last", "sed -n 2,4p a.py")), o_tool("last", mini("x"))]
    h.ingest(messages)
    h.service.assemble("s1")
    return _Counting.lookups


def test_a_turn_looks_at_what_is_new_not_at_the_whole_session() -> None:
    # what the policy learnt about earlier outputs is kept between turns (RelevanceMemo): the
    # objects a turn reads follow what the prompt shows and what is new, not the session's length
    # (without the memo: 141 and 423 lookups, three times as many for four times the calls)
    short, long = _lookups_for_one_more_call(30), _lookups_for_one_more_call(120)
    assert long < 2 * short, (short, long)


def _activate(h: HarnessSession, messages: list[dict[str, Any]], call_id: str, ref: str) -> None:
    """The model calls ``activate`` (a context tool); the harness answers it (decision 0008)."""
    messages.append(o_assistant("I need that again.", o_call(call_id, "activate", id=ref)))
    h.ingest(messages)
    messages.append(o_tool(call_id, h.handle("activate", {"id": ref}).message))
    h.ingest(messages)


def test_what_the_model_activated_stays_until_it_deactivates_it() -> None:
    h = session(trigger_tokens=1, clear_at_least=1)
    messages: list[dict[str, Any]] = [
        o_user("fix the bug"),
        o_assistant("Installing.", bash("c1", "pip install -r reqs.txt")),
        o_tool("c1", mini(NOISE)),
        o_assistant("Next.", bash("c2", "true")),
        o_tool("c2", mini("")),
        o_assistant("Next.", bash("c3", "true")),
        o_tool("c3", mini("")),
    ]
    h.ingest(messages)
    assert "collapsed" in shown(h)["c1"]
    handle = shown(h)["c1"].split()[0].lstrip("[")
    _activate(h, messages, "a1", handle)
    for n in range(4, 10):  # answers, batches and seen collapses go by: it stays
        messages += [o_assistant("Working.", bash(f"c{n}", "true")), o_tool(f"c{n}", mini(""))]
        h.ingest(messages)
        assert NOISE in shown(h)["a1"], n
    messages.append(o_assistant("Done with it.", o_call("d1", "deactivate", id=handle)))
    h.ingest(messages)
    messages.append(o_tool("d1", h.handle("deactivate", {"id": handle}).message))
    h.ingest(messages)
    assert NOISE not in shown(h)["a1"]  # the answer that showed it collapses with it
    assert "collapsed" in shown(h)["a1"]


def test_an_activation_through_the_shell_stays_too() -> None:
    # mini-swe-agent runs context tools as shell commands (`activate #3`)
    h = session(trigger_tokens=1, clear_at_least=1)
    messages: list[dict[str, Any]] = [
        o_user("fix the bug"),
        o_assistant("Installing.", bash("c1", "pip install -r reqs.txt")),
        o_tool("c1", mini(NOISE)),
        o_assistant("Next.", bash("c2", "true")),
        o_tool("c2", mini("")),
    ]
    h.ingest(messages)
    handle = shown(h)["c1"].split()[0].lstrip("[")
    messages.append(o_assistant("Again.", bash("a1", f"activate {handle}")))
    h.ingest(messages)
    answer = h.handle("activate", {"id": handle}).message
    messages.append(o_tool("a1", mini(answer)))
    for n in range(3, 8):
        messages += [o_assistant("Working.", bash(f"c{n}", "true")), o_tool(f"c{n}", mini(""))]
        h.ingest(messages)
        assert NOISE in shown(h)["a1"], n


def test_an_output_activated_through_the_service_stays() -> None:
    h = session(trigger_tokens=1, clear_at_least=1)
    messages: list[dict[str, Any]] = [
        o_user("fix the bug"),
        o_assistant("Installing.", bash("c1", "pip install -r reqs.txt")),
        o_tool("c1", mini(NOISE)),
        o_assistant("Next.", bash("c2", "true")),
        o_tool("c2", mini("")),
    ]
    h.ingest(messages)
    assert "collapsed" in shown(h)["c1"]
    h.service.activate("s1", tc("c1"))
    for n in range(3, 8):
        messages += [o_assistant("Working.", bash(f"c{n}", "true")), o_tool(f"c{n}", mini(""))]
        h.ingest(messages)
        assert NOISE in shown(h)["c1"], n


def test_a_file_the_model_activated_shows_once_in_the_answer(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(A_PY)
    service = build_service(
        store=MemoryStore(),
        workspace=str(tmp_path),
        settings=Settings(policy=policy_by_name("relevance")),
    )
    h = HarnessSession(service, "live", "openai", cwd=str(tmp_path), roots=[str(tmp_path)])
    messages: list[dict[str, Any]] = [
        o_user("look"),
        o_assistant("", bash("c1", "ls")),
        o_tool("c1", mini("a.py\n")),
    ]
    h.ingest(messages)
    handle = (
        f"#{service.state('live').positions[service.object_id_for(str(tmp_path / 'a.py'))] + 1}"
    )
    _activate(h, messages, "a1", handle)
    text = json.dumps(h.request()["messages"])
    assert text.count(json.dumps(A_PY)[1:-1]) == 1  # in the answer, not after the chat too


def test_each_recent_message_is_read_once_and_the_working_set_is_the_same() -> None:
    # the names a recent assistant message gives (its text, arguments, the frames of its outputs)
    # are worked out once, while it is recent: a turn reads its new message only, and finds the
    # working set a fresh look at the whole window finds
    from selfctx.domain import relevance as rel

    h = session()
    messages: list[dict[str, Any]] = [o_user("fix a.py")]
    for n in range(30):
        command = f"sed -n {n + 1},{n + 3}p a.py" if n % 3 == 0 else f"pip install p{n}"
        messages += [
            o_assistant(f"step {n} on a.py", bash(f"c{n}", command)),
            o_tool(f"c{n}", mini(A_PY[n * 10 : n * 10 + 1500])),
        ]
    h.ingest(messages)
    h.service.assemble("s1")
    read: list[str] = []
    original = rel._message_texts

    def counting(message: Any, objects: Any) -> list[str]:
        read.append(message.text)
        return original(message, objects)

    rel._message_texts = counting
    try:
        messages += [
            o_assistant("a.py", bash("last", "sed -n 2,4p a.py")),
            o_tool("last", mini("x")),
        ]
        h.ingest(messages)
        h.service.assemble("s1")
    finally:
        rel._message_texts = original
    assert read == ["a.py"]  # the new message, once (the window holds many more)
    open_session = h.service._open("s1")
    state, memo = open_session.state, open_session.relevance_memo
    assert len(memo.tokens) == state.policy.recent_messages
    objects = open_session.working_objects()
    display = h.service.mounts.display_path
    fresh = rel.relevance(state, objects, display, state.policy.recent_messages)
    again = rel.relevance(state, objects, display, state.policy.recent_messages, memo)
    assert fresh.working_set and fresh.working_set == again.working_set
    assert fresh.tiers == again.tiers


def test_a_collapsed_output_keeps_the_lines_the_agent_named_from_it() -> None:
    # decision 0075: a search prints lines of no file the agent names; its answer names an
    # identifier that only this output showed. Collapsed once answered, the reference keeps
    # the line naming it with the lines around it, and says how to get the rest back.
    found = "".join(f"    field_{n} = models.CharField(max_length={n})\n" for n in range(40))

    def run(**overrides: Any) -> tuple[HarnessSession, str]:
        h = session(**overrides)
        h.ingest(
            [
                o_user("fix"),
                o_assistant("Searching.", bash("c1", "grep -rh CharField tests")),
                o_tool("c1", mini(found)),
                o_assistant("So `field_20` is the one; the settings next.", bash("c2", "ls")),
                o_tool("c2", mini("a.py\n")),
            ]
        )
        return h, shown(h)["c1"]

    h, text = run(excerpt_lines=20, excerpt_context=2)
    state = h.service.state("s1")
    # the answer's names, read from the turn's start or from the message that made the call
    turn = state.toolcall_turn[tc("c1")]
    assert answer_names(state, tc("c1")) == {"field_20"}
    assert answer_names(state, tc("c1"), (turn, 1)) == {"field_20"}
    assert answer_names(state, tc("c2")) == set()  # not answered yet
    label = f"#{state.positions[tc('c1')] + 1}"
    reference, *rest = text.split("\n")
    assert reference.startswith(f"[{label} collapsed: bash ok")
    assert reference.endswith(f"; part kept below, activate {label} for all]")
    lines = mini(found).split("\n")  # the output as recorded: ``field_20`` on its line 22
    assert lines[22] == "    field_20 = models.CharField(max_length=20)"
    assert rest == ["[... 20 lines]", *lines[20:25], f"[... {len(lines) - 25} lines]"]
    # the whole output comes back byte-identical; active again, it has no excerpt
    answer = h.handle("activate", {"id": label})
    assert answer.ok and answer.message.split("\n", 1)[1] == mini(found)
    h.service.activate("s1", tc("c1"))
    assert tc("c1") not in h.service.state("s1").excerpts
    assert found in shown(h)["c1"]
    # without the setting, or without a name from the output in the answer: the reference alone
    assert "\n" not in run(excerpt_lines=None)[1]
    h = session(excerpt_lines=20)
    h.ingest(
        [
            o_user("fix"),
            o_assistant("Searching.", bash("c1", "grep -rh CharField tests")),
            o_tool("c1", mini(found)),
            o_assistant("Nothing there; the settings next.", bash("c2", "ls")),
            o_tool("c2", mini("a.py\n")),
        ]
    )
    assert "collapsed" in shown(h)["c1"] and "\n" not in shown(h)["c1"]


def test_an_excerpt_keeps_no_name_the_agent_had_before_the_output() -> None:
    # the name the agent searched for is on every line: it says nothing about which lines matter
    found = "".join(f"    uses_marker = {n}\n" for n in range(40))
    h = session(excerpt_lines=20)
    h.ingest(
        [
            o_user("fix"),
            o_assistant("Searching.", bash("c1", "grep -rh uses_marker tests")),
            o_tool("c1", mini(found)),
            o_assistant("`uses_marker` is everywhere; the settings next.", bash("c2", "ls")),
            o_tool("c2", mini("a.py\n")),
        ]
    )
    assert "collapsed" in shown(h)["c1"] and "\n" not in shown(h)["c1"]


def test_a_long_sessions_collapse_records_are_its_latest_within_a_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Decision 0152: why each output was collapsed (the losses report's diagnosis, never
    stored) is kept for the latest ``COLLAPSE_RECORDS`` collapses, not for every output of the
    session: a session collapsing more keeps that many, the latest, and the older ones come
    back whole as ever. Main kept a record per collapsed output, for good."""
    from selfctx.application.usecases import collapse_order

    monkeypatch.setattr(collapse_order, "COLLAPSE_RECORDS", 6, raising=False)
    h = session()
    messages: list[dict[str, Any]] = [o_user("fix the bug")]
    for n in range(1, 21):  # each pip output answered by the next call: collapsed, unused
        messages += [
            o_assistant(f"Installing part {n}.", bash(f"c{n}", f"pip install part{n}")),
            o_tool(f"c{n}", mini(NOISE + f"part {n}\n")),
        ]
        h.ingest(messages)
        h.request()
    records = h.service._open("s1").collapses
    collapsed = [f"c{n}" for n in range(1, 21) if tc(f"c{n}") not in h.service.state("s1").active]
    assert len(collapsed) >= 15
    assert len(records) == 6
    assert list(records) == [tc(i) for i in collapsed[-6:]]  # the latest, oldest first
    assert h.service.why_collapsed("s1", tc(collapsed[-1])) is not None
    assert h.service.why_collapsed("s1", tc(collapsed[0])) is None  # let go
    answer = h.handle("activate", {"id": collapsed[0]})
    assert answer.ok and answer.message.split("\n", 1)[1] == mini(NOISE + "part 1\n")
