"""A session keeps every object's metadata but content only up to a budget; what it dropped is
read again from the store, and nothing it shows changes (decision 0065). On both stores."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from pyrsistent import pset

from selfctx.adapters.harness import HarnessSession
from selfctx.application.objects import ObjectCache
from selfctx.application.policies import policy_by_name
from selfctx.application.settings import Settings
from selfctx.domain.documents import to_document
from selfctx.domain.objects import ToolcallObject
from tests.conftest import MakeService


def _call(n: int, size: int) -> ToolcallObject:
    return ToolcallObject.build(
        f"tc-{n}", tool="bash", args={"n": n}, output=f"{n}:" + "x" * size, status="ok",
        chat_ref="chat:s",
    )  # fmt: skip


def test_the_cache_keeps_content_within_its_budget_and_reads_the_rest_again() -> None:
    stored: dict[str, Any] = {}
    batches: list[list[str]] = []

    def loader(ids: list[str]) -> dict[str, Any]:
        batches.append(ids)
        return {i: stored[i] for i in ids}

    cache = ObjectCache(loader, budget=1_000)
    objects = [_call(n, 300) for n in range(10)]
    for obj in objects:
        stored[obj.id] = to_document(obj)
        cache[obj.id] = obj
    assert cache.chars <= 1_000
    assert len(cache) == 10
    hollow = [o.id for o in objects if cache.hollow(o.id)]
    assert hollow == [o.id for o in objects[:7]]  # the least recently used
    held = cache.meta("tc-0")
    assert isinstance(held, ToolcallObject)
    assert held.content is None and held.content_length == 302
    assert held.object_hash == objects[0].object_hash and not batches
    assert cache["tc-0"] == objects[0]  # whole again, read from the store
    assert batches == [["tc-0"]] and cache.loads == 1
    view = cache.showing({"tc-1", "tc-2", "tc-9"})
    assert sorted(batches[-1]) == ["tc-1", "tc-2"]  # one batch for what is shown in full
    assert view["tc-1"] == objects[1] and view["tc-9"] == objects[9]
    assert view["tc-4"].content is None  # the rest as held: metadata
    assert cache.chars <= 1_000


def test_the_metadata_of_hollow_tool_calls_is_kept_for_the_ones_used_last() -> None:
    """Decision 0111: after an assembly (``trim``), beyond ``metadata_budget`` hollow tool
    calls the least recently used one's metadata is dropped too (only its id stays) and read
    back from the store, without its content, when asked for: equal to what was held."""
    stored: dict[str, Any] = {}
    batches: list[list[str]] = []

    def without_content(ids: list[str]) -> dict[str, Any]:
        batches.append(ids)
        return {i: {k: v for k, v in stored[i].items() if k != "content"} for i in ids}

    cache = ObjectCache(
        lambda ids: {i: stored[i] for i in ids}, 1_000, metadata_budget=3,
        metadata_loader=without_content,
    )  # fmt: skip
    objects = [_call(n, 300) for n in range(10)]
    for obj in objects:
        stored[obj.id] = to_document(obj)
        cache[obj.id] = obj
    hollow = [o.id for o in objects if cache.hollow(o.id)]
    assert hollow == [o.id for o in objects[:7]]
    assert not any(cache.cold(o.id) for o in objects)  # not while an assembly may walk them
    cache.trim()
    cold = [o.id for o in objects if cache.cold(o.id)]
    assert cold == [o.id for o in objects[:4]]  # the 3 hollow ones used last stay
    assert len(cache) == 10 and all(o.id in cache for o in objects) and not batches
    assert cache.meta("tc-1", read=False) is None  # not read: a pass that looks for files
    held = cache.meta("tc-1")  # read back: the metadata as it was, without content
    assert batches == [["tc-1"]] and cache.metadata_loads == 1 and cache.loads == 0
    assert held == attrs.evolve(objects[1], content=None)
    assert cache.meta("tc-1") is held and len(batches) == 1  # held now: no read
    cache.trim()
    assert not cache.cold("tc-1") and cache.cold("tc-4")  # tc-1 used last: tc-4 went cold
    view = cache.showing(set())
    assert view["tc-2"] == attrs.evolve(objects[2], content=None)  # a renderer reads it
    assert cache["tc-3"] == objects[3]  # whole: content and all
    assert not cache.cold("tc-3") and not cache.hollow("tc-3")
    cache.trim()
    assert sum(not cache.cold(i) and cache.hollow(i) for i in cache) == 3


def test_a_persistent_set_shown_again_shows_what_a_fresh_copy_would() -> None:
    """The members of the last persistent set shown are kept by identity (a set of the session's
    state is immutable); another set, or a mutable one, is read anew."""
    stored: dict[str, Any] = {}
    cache = ObjectCache(lambda ids: {i: stored[i] for i in ids}, budget=1_000)
    objects = [_call(n, 300) for n in range(10)]
    for obj in objects:
        stored[obj.id] = to_document(obj)
        cache[obj.id] = obj
    first, mutable = pset(["tc-0", "tc-1"]), {"tc-3"}
    for step, shown in enumerate((first, first, pset(["tc-2", "tc-9"]), first, mutable, mutable)):
        if step == 5:
            mutable.add("tc-4")  # the same object, other members: read anew
        view = cache.showing(shown)
        assert cache.held == frozenset(shown)
        for obj in objects:
            assert (view[obj.id].content is not None) >= (obj.id in shown)
        assert [i for i in shown if cache.hollow(i)] == []


def _conversation(h: HarnessSession, turns: int) -> list[dict[str, Any]]:
    requests = []
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for n in range(turns):
        function = {"name": "bash", "arguments": f'{{"command": "ls {n}"}}'}
        call = {"id": f"c{n}", "type": "function", "function": function}
        messages.append({"role": "assistant", "content": f"step {n}", "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{n}", "content": f"{n} " * 200})
        h.ingest(list(messages))
        requests.append(h.request())
    return requests


@pytest.mark.parametrize("metadata", [256, 0])
@pytest.mark.parametrize("policy", ["inline", "relevance", "ssot"])
def test_a_session_with_a_small_budget_shows_exactly_what_a_large_one_does(
    make_service: MakeService, policy: str, metadata: int
) -> None:
    """And with no metadata kept of hollow tool calls (decision 0111): every prompt the same."""
    small = make_service(  # on the test's store
        settings=Settings(content_budget=2_000, metadata_budget=metadata)
    )
    large = make_service(settings=Settings(content_budget=10**9), store=None)  # in memory
    a = HarnessSession(small, "s1", policy=policy_by_name(policy))
    b = HarnessSession(large, "s1", policy=policy_by_name(policy))
    assert _conversation(a, 25) == _conversation(b, 25)
    cache = small._open("s1").objects
    # the budget, the one object used last, and what the prompt shows whole (decision 0086)
    assert cache.chars <= 2_000 + 1_000 + cache.held_chars()
    if policy != "inline":  # the inline layout shows every output whole: all of it is held
        assert any(cache.hollow(i) for i in cache)
        assert any(cache.cold(i) for i in cache) == (metadata == 0)
    # An early output shown again and collapsed again: the prompt rendered from there on
    # reads the metadata of what went cold after it
    first = next(i for i in small.state("s1").index if small.state("s1").kinds[i] == "toolcall")
    for step in (small.activate, small.deactivate):
        step("s1", first)
        large.activate("s1", first) if step == small.activate else large.deactivate("s1", first)
        assert a.request() == b.request()
    if policy == "relevance":  # (the ssot layout keeps each turn's rendering)
        assert (cache.metadata_loads > 0) == (metadata == 0)
    # What was dropped comes back whole when asked for.
    for object_id in list(cache):
        assert small.object("s1", object_id) == large.object("s1", object_id)


def test_a_resumed_session_reads_its_tool_calls_without_content_and_shows_the_same(
    make_service: MakeService,
) -> None:
    first = make_service()
    a = HarnessSession(first, "s1", policy=policy_by_name("relevance"))
    before = _conversation(a, 25)[-1]
    first.close_session("s1")
    again = make_service()
    b = HarnessSession(again, "s1")
    cache = again._open("s1").objects
    calls = [i for i in cache if again.state("s1").kinds.get(i) == "toolcall"]
    assert calls and all(cache.hollow(i) for i in calls)  # read without their content
    assert b.request() == before
    shown = again.state("s1").active
    assert all(not cache.hollow(i) for i in shown)
    assert any(cache.hollow(i) for i in calls if i not in shown)
