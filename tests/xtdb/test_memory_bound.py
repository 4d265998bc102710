"""On XTDB a session's memory is bounded by its caches, not by the bytes it has seen (decisions
0065 and 0086): the content it holds stays within ``content_budget`` however long the session,
what it dropped comes back byte-identical from the store, and a session whose outputs are a
hundred times larger grows by about what a session of small outputs grows by."""

from __future__ import annotations

import gc
import json
import os
import random
import sys
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.harness import HarnessSession
from selfctx.adapters.harness.render import render
from selfctx.adapters.harness.stdio import StdioServer
from selfctx.adapters.xtdb import XtdbNode, open_store
from selfctx.application.policies import policy_by_name
from selfctx.application.service import ContextService
from selfctx.application.settings import Settings
from selfctx.domain.chat import AssistantMessage
from selfctx.domain.objects import ToolcallObject

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "error",
    "failed",
    "passed",
    "test",
    "module",
    "value",
    "result",
    "line",
]


@pytest.fixture
def service_on(xtdb_node: XtdbNode) -> Iterator[Any]:
    made: list[ContextService] = []

    def make(budget: int) -> ContextService:
        service = build_service(
            store=open_store(xtdb_node.url, timeout=10.0), settings=Settings(content_budget=budget)
        )
        made.append(service)
        return service

    yield make
    for service in made:
        service.close()


def _output(rng: random.Random, n: int, size: int) -> str:
    """``size`` characters of words, different in every output."""
    text = f"run {n}: " + " ".join(rng.choice(WORDS) for _ in range(size // 5))
    return text[:size]


def _turn(messages: list[dict[str, Any]], prefix: str, n: int, output: str) -> list[dict[str, Any]]:
    call_id = f"{prefix}-c{n}"
    function = {"name": "bash", "arguments": f'{{"command": "pytest -k case{n}"}}'}
    call = {"id": call_id, "type": "function", "function": function}
    messages.append({"role": "assistant", "content": f"step {n}", "tool_calls": [call]})
    messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
    return messages


def test_a_long_session_holds_content_within_its_budget_and_reads_the_rest_back_whole(
    service_on: Any,
) -> None:
    budget = 20_000
    service = service_on(budget)
    sid, prefix = f"mem-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex[:8]
    h = HarnessSession(service, sid, policy=policy_by_name("relevance"))
    rng = random.Random(3)
    sent: dict[str, str] = {}
    messages: list[dict[str, Any]] = [{"role": "user", "content": "fix the tests"}]
    cache = None
    for n in range(150):
        output = _output(rng, n, rng.randint(500, 4_000))
        sent[f"{prefix}-c{n}"] = output
        h.ingest(_turn(messages, prefix, n, output))
        h.request()
        cache = service._open(sid).objects
        largest = max(len(v) for v in sent.values())
        # the budget, at most the one used last, and what the prompt shows whole
        assert cache.chars <= budget + largest + cache.held_chars()
    assert cache is not None
    calls = [i for i in cache if service.state(sid).kinds.get(i) == "toolcall"]
    assert len(calls) == 150
    assert sum(cache.hollow(i) for i in calls) > 100  # most of it is in the store only
    read = {service.object(sid, i).content for i in calls}
    assert read == set(sent.values())  # every output byte-identical, read back from the store
    assert cache.chars <= budget + max(len(v) for v in sent.values()) + cache.held_chars()


def _caller(server: StdioServer) -> Any:
    """A function sending one JSON-RPC request line to ``server`` (as over a pipe) and giving
    back its result (an error fails the test)."""
    ids = iter(range(1, 1 << 62))

    def call(method: str, **params: Any) -> dict[str, Any]:
        message = {"jsonrpc": "2.0", "id": next(ids), "method": method, "params": params}
        answer = json.loads(server.handle_line(json.dumps(message)) or "{}")
        assert "result" in answer, str(answer)[:300]
        return dict(answer["result"])

    return call


def _opened(service: ContextService) -> tuple[StdioServer, Any, str, str, str]:
    """A stdio server on ``service`` with a session opened (the relevance policy) and its first
    user message ingested: the server, its caller, the session's id, a prefix for call ids and
    the list's digest."""
    sid, prefix = f"mem-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex[:8]
    server = StdioServer(service, cwd=os.getcwd(), roots=[os.getcwd()])
    call = _caller(server)
    call("session.open", session_id=sid, policy="relevance")
    first = [{"role": "user", "content": "fix the tests"}]
    digest = call("ingest", session_id=sid, messages=first)["digest"]
    return server, call, sid, prefix, digest


def _settled_heap() -> int:
    """The traced heap of the process once what its other threads hold for a moment is let
    go: the least of three readings, each after a full collection, 0.1 s apart. A reading is
    of every thread's allocations at that instant, and on a loaded machine a thread that has
    done its part (the store's sending thread keeps a transaction's body until it is scheduled
    again, after its answer was handed over) may hold it well after the session's call
    returned; what the session keeps is in every reading."""
    readings = []
    for _ in range(3):
        gc.collect()
        readings.append(tracemalloc.get_traced_memory()[0])
        time.sleep(0.1)
    return min(readings)


def _growth(
    service: ContextService, size: int, turns: tuple[int, int], *, whole: bool = False
) -> tuple[int, int]:
    """Bytes the process's Python heap grew by between two turns of a session whose outputs
    have ``size`` characters, and the bytes of the messages sent meanwhile; the harness sends
    its new messages (the append form) or, with ``whole``, its whole list every turn as a line
    to the stdio server (which reads its own values from the line, as over a pipe)."""
    sid, prefix = f"mem-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex[:8]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "fix the tests"}]
    if whole:
        server = StdioServer(service, cwd=os.getcwd(), roots=[os.getcwd()])
        call = _caller(server)
        call("session.open", session_id=sid, policy="relevance")
    else:
        h = HarnessSession(service, sid, policy=policy_by_name("relevance"))
        digest = h.ingest(messages).digest
    rng = random.Random(5)
    first, last = turns
    heap = seen = kept = 0
    for n in range(last):
        output = _output(rng, n, size)
        if whole:
            call("ingest", session_id=sid, messages=_turn(messages, prefix, n, output))
            call("assemble", session_id=sid)
        else:
            digest = h.append(_turn([], prefix, n, output), extends=digest).digest
            h.request()
        if n + 1 == first:
            heap, kept = _settled_heap(), len(messages)
        elif n + 1 > first:
            seen += len(output)
    # the caller's own list grew too (by the outputs' bytes): not the server's
    ours = sum(sys.getsizeof(m["content"]) for m in messages[kept:]) if whole else 0
    return _settled_heap() - heap - ours, seen


def test_memory_grows_with_the_number_of_messages_not_with_their_bytes(service_on: Any) -> None:
    service = service_on(50_000)
    tracemalloc.start()
    try:
        small, small_bytes = _growth(service, 200, (30, 110))
        large, large_bytes = _growth(service, 20_000, (30, 110))
    finally:
        tracemalloc.stop()
    assert large_bytes > 90 * small_bytes
    # 2 MB more of outputs: the heap grows by what a session of small outputs grows by, give or
    # take a small part of those bytes (were the outputs kept, it would grow by all of them)
    assert large - small < 0.1 * (large_bytes - small_bytes), (small, large, large_bytes)


def test_an_id_is_held_once_however_many_structures_hold_it(service_on: Any) -> None:
    """Decision 0092: the session's index, its maps, the chat and the objects (hollow ones and
    ones read back from the store) share one string per id and per tool name, where each held
    a copy read from its own JSON; a call's arguments are one map for the chat and the object."""
    service = service_on(5_000)  # small: most outputs are dropped and some read back
    sid, prefix = f"mem-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex[:8]
    h = HarnessSession(service, sid, policy=policy_by_name("relevance"))
    rng = random.Random(7)
    digest = h.ingest([{"role": "user", "content": "fix the tests"}]).digest
    for n in range(40):
        digest = h.append(_turn([], prefix, n, _output(rng, n, 1_500)), extends=digest).digest
        h.request()
    opened = service._open(sid)
    state, cache = opened.state, opened.objects
    calls = [i for i in state.index if state.kinds[i] == "toolcall"]
    assert len(calls) == 40 and sum(cache.hollow(i) for i in calls) > 20
    cache.load(calls[:5])  # read back from the store
    for object_id in state.index:
        assert cache.meta(object_id).id is object_id
    for key in state.toolcall_turn:
        assert key is state.index[state.positions[key]]
    messages = [m for turn in state.turns for m in turn.messages]
    results = [m.toolcall_id for m in messages if hasattr(m, "toolcall_id")]
    assert len(results) == 40 and all(r is state.index[state.positions[r]] for r in results)
    requests = [c for m in messages for c in getattr(m, "tool_calls", ())]
    assert len({id(c.name) for c in requests}) == 1  # "bash", once
    assert {id(cache.meta(i).tool) for i in calls} == {id(requests[0].name)}
    # the arguments: one frozen map for the chat's call and its object (an object read back
    # from the store has its own; the newest was not dropped)
    arguments = {c.id: c.arguments for c in requests}
    assert not cache.hollow(calls[-1])
    assert cache.meta(calls[-1]).args is arguments[calls[-1]]


def test_a_whole_list_resent_each_turn_grows_the_heap_by_its_count_not_its_bytes(
    service_on: Any,
) -> None:
    """Decision 0100: a harness that resends its whole list to the stdio server sends the
    session's bytes every turn; what the server keeps of them is bounded by its content cache,
    as for the append form: 2 MB more of outputs grow the heap by a small part of those bytes
    (a server that kept the last list's text would grow by all of them)."""
    service = service_on(50_000)
    tracemalloc.start()
    try:
        small, small_bytes = _growth(service, 200, (30, 110), whole=True)
        large, large_bytes = _growth(service, 20_000, (30, 110), whole=True)
    finally:
        tracemalloc.stop()
    assert large_bytes > 90 * small_bytes
    assert large - small < 0.1 * (large_bytes - small_bytes), (small, large, large_bytes)


def _bookkeeping(roots: list[Any], seen: set[int] | None = None, *, strings: bool = False) -> int:
    """Bytes of every object reachable from ``roots``, each counted once; strings only with
    ``strings`` (the prompt's texts, ids and fingerprints, which other tests bound). Not counted
    either: the objects in ``seen``, to which the ones counted are added."""
    seen = set() if seen is None else seen
    skip = type if strings else str | type
    total = 0
    stack = list(roots)
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, skip) or callable(obj):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        stack.extend(gc.get_referents(obj))
    return total


def _appended(
    call: Any, sid: str, prefix: str, digest: str, seed: int, turns: int, at: tuple[int, ...]
) -> Iterator[int]:
    """``turns`` turns of 300-character outputs sent to the stdio server in the append form,
    each assembled; after each turn in ``at``, a full collection, then that turn is yielded."""
    rng = random.Random(seed)
    for n in range(turns):
        new = _turn([], prefix, n, _output(rng, n, 300))
        digest = call("ingest", session_id=sid, messages=new, extends=digest)["digest"]
        call("assemble", session_id=sid)
        if n + 1 in at:
            gc.collect()
            yield n + 1


def test_what_a_session_keeps_of_each_message_beside_its_texts_is_small(service_on: Any) -> None:
    """Decision 0105: what the harness's session keeps per message to read the next list
    (the cursor's view and chain, the digests of the last list, the request cache's cuts and
    sizes) and the inline rendering's origins, strings apart, is a few machine integers and
    shared tuples per message: under 400 bytes a message (about 270 here; Python integers, a
    tuple of its own per structure and position, a list per recorded message and a ``bytes``
    per digest were about 660)."""
    service = service_on(20_000)
    server, call, sid, prefix, digest = _opened(service)

    def held() -> int:
        harness = server.sessions[sid].harness
        cursor = vars(harness.ingestor.cursor)
        requests = harness._requests
        return _bookkeeping(
            [
                *(v for k, v in cursor.items() if k != "ids"),  # the ids: the session's calls
                harness._digests,
                requests._items,
                requests._cuts,
                getattr(requests, "_cut_at", None),
                service._open(sid).inline_cache.origin,
            ]
        )

    counts = []
    for _ in _appended(call, sid, prefix, digest, 11, 120, (40, 120)):
        counts.append(held())
    per_message = (counts[1] - counts[0]) / (2 * 80)
    assert 0 < per_message < 400, per_message


def _held(cache: Any) -> int:
    """Bytes of every object reachable from an object cache, strings included (the metadata's
    hashes, paths and displays) but the ids (the session's index holds them), each counted
    once."""
    return _bookkeeping([cache], {id(i) for i in cache}, strings=True)


def test_the_objects_a_session_holds_grow_by_an_id_per_object_beyond_their_budgets(
    xtdb_node: XtdbNode,
) -> None:
    """Decision 0111: beyond its content budget and its metadata budget, a session's object
    cache keeps of each older tool call a place in two tables for its id (about 130 bytes; the
    metadata of each, its four hashes, display and arguments, was about 700): the cache's size at
    turn 120 is about its size at turn 60, and what went cold reads back equal."""
    service = build_service(
        store=open_store(xtdb_node.url, timeout=10.0),
        settings=Settings(content_budget=5_000, metadata_budget=16),
    )
    try:
        sid, prefix = f"mem-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex[:8]
        h = HarnessSession(service, sid, policy=policy_by_name("relevance"))
        rng = random.Random(13)
        digest = h.ingest([{"role": "user", "content": "fix the tests"}]).digest
        sizes = []
        for n in range(120):
            new = _turn([], prefix, n, _output(rng, n, rng.randint(300, 500)))
            digest = h.append(new, extends=digest).digest
            h.request()
            if n + 1 in (60, 120):
                gc.collect()
                sizes.append(_held(service._open(sid).objects))
        cache = service._open(sid).objects
        calls = [i for i in cache if service.state(sid).kinds.get(i) == "toolcall"]
        cold = [i for i in calls if cache.cold(i)]
        assert len(calls) == 120 and len(cold) > 80
        per_object = (sizes[1] - sizes[0]) / 60
        assert 0 < per_object < 250, (per_object, sizes)
        first = cache.meta(cold[0])  # read back from the store: the metadata as recorded
        assert isinstance(first, ToolcallObject) and first.content is None
        whole = service.object(sid, cold[0])
        assert attrs.evolve(whole, content=None) == first and whole.content
        print(f"object cache: {per_object:.0f} bytes per tool call, turns 60-120")
    finally:
        service.close()


def test_the_prompts_bookkeeping_beside_its_texts_is_bounded_by_the_rendering_budget(
    xtdb_node: XtdbNode,
) -> None:
    """Decision 0117: what the stdio server keeps to render the next request beside the
    prompt's texts (the request cache's renderings of messages by identity, the inline cache's
    tables of what each position shows) is the renderings of the chat's last
    ``rendering_budget`` messages and a few machine integers a message: the renderings held at
    turn 120 are about those held at turn 60 (main's grew by 260 bytes a message), and the rest,
    the chat's own objects apart, by about 100 bytes a message (a list of keys per rendered
    position made it 210)."""
    service = build_service(
        store=open_store(xtdb_node.url, timeout=10.0),
        settings=Settings(content_budget=20_000, rendering_budget=32),
    )
    try:
        server, call, sid, prefix, digest = _opened(service)
        renderings, rest, counts = [], [], []
        for _ in _appended(call, sid, prefix, digest, 17, 120, (60, 120)):
            requests = server.sessions[sid].harness._requests
            inline = service._open(sid).inline_cache
            chat: set[int] = set()
            _bookkeeping([service.state(sid)], chat)  # the chat's calls, shown as they are
            renderings.append(_bookkeeping([requests._rendered], set(chat)))
            tables = [getattr(inline, f.name) for f in attrs.fields(type(inline))]
            tables = [t for t in tables if t is not inline.messages]
            rest.append(_bookkeeping([requests._items, requests._cuts, *tables], chat))
            counts.append(len(inline.messages))
        assert counts[1] - counts[0] == 120  # two messages a turn, each rendered
        assert renderings[1] < 1.2 * renderings[0], renderings
        per_message = (rest[1] - rest[0]) / (counts[1] - counts[0])
        assert 0 < per_message < 140, (per_message, rest)
        print(f"renderings {renderings}, the rest {per_message:.0f} bytes a message")
    finally:
        service.close()


def _joined_in_runs_of_16(xtdb_node: XtdbNode, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A service on the node whose request caches join older items' texts in runs of 16 and
    keep no rendering (so that a short session already has joined runs)."""
    from selfctx.adapters.harness import request

    monkeypatch.setattr(request, "_JOINED_ITEMS", 16)
    return build_service(
        store=open_store(xtdb_node.url, timeout=10.0),
        settings=Settings(content_budget=20_000, rendering_budget=0),
    )


def test_the_chat_and_the_prompts_texts_hold_no_copy_per_message_beyond_their_characters(
    xtdb_node: XtdbNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Decision 0121: what the stdio server holds of the prompt's items beside their characters
    (the request cache's texts past the renderings it keeps, joined in runs: here of 16, from
    the 80th last item) is a comma and three machine integers an item (a string of its own was
    about 57 bytes more); the chat's calls share one string per argument name and the rendered
    messages the chat's tuple of calls (a copy of each per call and per message was 60-90
    bytes a message)."""
    service = _joined_in_runs_of_16(xtdb_node, monkeypatch)
    try:
        server, call, sid, prefix, digest = _opened(service)
        beside, counts = [], []
        for _ in _appended(call, sid, prefix, digest, 19, 120, (60, 120)):
            items = server.sessions[sid].harness._requests._items
            seen: set[int] = set()
            held = _bookkeeping([items], seen)  # strings apart: counted below
            texts = [*items.texts, *getattr(items, "joined", ())]
            held += sum(sys.getsizeof(t) for t in texts if id(t) not in seen)
            beside.append(held - sum(map(len, texts)))
            counts.append(len(items))
        per_item = (beside[1] - beside[0]) / (counts[1] - counts[0])
        assert counts[1] - counts[0] >= 100
        assert 0 < per_item < 40, (per_item, beside, counts)
        state = service.state(sid)
        messages = [m for turn in state.turns for m in turn.messages]
        calls = [c for m in messages for c in getattr(m, "tool_calls", ())]
        assert len(calls) == 120
        assert len({id(name) for c in calls for name in c.arguments}) == 1  # "command", once
        shown = [m for m in service._open(sid).inline_cache.messages if m.tool_calls]
        chat = {c.id: m for m in messages if isinstance(m, AssistantMessage) for c in m.tool_calls}
        assert len(shown) == 120  # the calls are not shortened: the chat's own tuples
        assert all(m.tool_calls is chat[m.tool_calls[0].id].tool_calls for m in shown)
        print(f"the prompt's items: {per_item:.0f} bytes an item beside their characters")
    finally:
        service.close()


def test_the_cursor_keeps_a_few_bytes_a_message_to_know_the_next_list(service_on: Any) -> None:
    """Decision 0122: what the harness's cursor keeps of each message beyond the chat's own
    objects and the session's call ids, strings included, is its fingerprint as 16 bytes, a
    digest every 64 messages, and what maps its calls; what it recorded is the view and what
    is beyond it (nothing while the list only grows), a tool result's call id the one string its
    call's tuple holds: about 190 bytes a message here. A string per fingerprint, a digest per
    message, a count per recorded message and a string per result's call id made it about 310."""
    service = service_on(20_000)
    server, call, sid, prefix, digest = _opened(service)
    held = []
    for _ in _appended(call, sid, prefix, digest, 19, 200, (40, 200)):
        cursor = server.sessions[sid].harness.ingestor.cursor
        chat: set[int] = set()
        _bookkeeping([service.state(sid).turns, cursor.ids], chat, strings=True)
        mine = [v for k, v in vars(cursor).items() if k != "ids"]
        held.append(_bookkeeping(mine, chat, strings=True))
    per_message = (held[1] - held[0]) / (2 * 160)
    assert 0 < per_message < 250, (per_message, held)
    print(f"cursor: {per_message:.0f} bytes a message, turns 40-200")


def test_the_prompts_older_texts_are_read_from_a_file_not_held(
    xtdb_node: XtdbNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Decision 0128: what the stdio server holds of the prompt's items, their characters
    included, grows by a few machine integers an item (the older items' texts, joined in runs,
    are in a private file and read from it for each request; held, they were their characters
    and a comma more, about 175 bytes an item here), and each request is still the whole
    rendering's bytes."""
    service = _joined_in_runs_of_16(xtdb_node, monkeypatch)
    try:
        server, call, sid, prefix, digest = _opened(service)
        held, counts = [], []
        for _ in _appended(call, sid, prefix, digest, 23, 120, (60, 120)):
            items = server.sessions[sid].harness._requests._items
            held.append(_bookkeeping([items], strings=True))
            counts.append(len(items))
        per_item = (held[1] - held[0]) / (counts[1] - counts[0])
        assert counts[1] - counts[0] >= 100
        assert 0 < per_item < 40, (per_item, held, counts)
        harness = server.sessions[sid].harness
        whole = json.dumps(
            render(service.assemble(sid), harness.format), ensure_ascii=True, separators=(",", ":")
        )
        assert harness.encoded_request().text == whole and len(whole) > 120 * 300
        print(f"the prompt's items: {per_item:.0f} bytes an item held, characters included")
    finally:
        service.close()


def test_the_chats_own_objects_are_a_few_small_records_a_message(service_on: Any) -> None:
    """Decision 0127: what the chat holds of each message beside its strings (texts, argument
    values, ids) is the message's record, its tuple of calls, each call's record and its
    arguments as a flat map of its shared keys and a tuple of values: about 160 bytes a message
    here. A persistent map per call's arguments (about 250 bytes with one key) and a weak
    reference slot per record made it about 245."""
    service = service_on(20_000)
    _server, call, sid, prefix, digest = _opened(service)
    held = []
    for _ in _appended(call, sid, prefix, digest, 29, 200, (40, 200)):
        turns = service.state(sid).turns
        messages = [m for turn in turns for m in turn.messages]
        held.append(_bookkeeping(messages))
    per_message = (held[1] - held[0]) / (2 * 160)
    assert 0 < per_message < 200, (per_message, held)
    state = service.state(sid)
    calls = [c for t in state.turns for m in t.messages for c in getattr(m, "tool_calls", ())]
    assert len(calls) == 200
    assert len({id(c.arguments._keys) for c in calls}) == 1  # ("command",), once
    assert all(dict(c.arguments) == {"command": f"pytest -k case{n}"} for n, c in enumerate(calls))
    print(f"the chat: {per_message:.0f} bytes a message beside its strings, turns 40-200")


def test_the_chats_written_text_is_kept_on_a_shelf_not_in_memory(service_on: Any) -> None:
    """Decision 0143: what a snapshot keeps of the chat's text written before (so that it
    hashes only what is new) is, in memory, a machine integer a turn beside the state's own
    turns; the text is in a private file. Here the session's 400 messages after its first user
    message are one turn, as an agent's long turn is, and then as many turns again of a call
    each. Counted with its characters: decision 0136's memo held the text, about 250 bytes a
    message of the bench's workload, more here, which fails this."""
    from selfctx.domain import infrastructure

    service = service_on(20_000)
    _server, call, sid, prefix, digest = _opened(service)

    def held() -> int:
        session = service._open(sid)
        memos = [v for k, v in vars(infrastructure).items() if k.startswith("_stored_")]
        roots: list[Any] = [m for m in memos if isinstance(m, dict)]  # 0136: process-wide
        roots += [getattr(session, "written", None)]
        chat: set[int] = set()
        _bookkeeping([session.state.turns], chat, strings=True)
        return _bookkeeping(roots, chat, strings=True)

    rng, sizes = random.Random(31), []
    for n in range(400):  # 200 calls in one turn, then 200 turns of a call each
        new = [{"role": "user", "content": f"go on {n}"}] if n >= 200 else []
        new = _turn(new, prefix, n, _output(rng, n, 300))
        digest = call("ingest", session_id=sid, messages=new, extends=digest)["digest"]
        call("assemble", session_id=sid)
        if n + 1 in (40, 200, 240, 400):
            gc.collect()
            sizes.append(held())
    per_message = (sizes[1] - sizes[0]) / (2 * 160)
    assert per_message < 8, (per_message, sizes)  # one long turn: nothing a message
    from selfctx.adapters.filesystem.shelf import FileShelf

    session = service._open(sid)
    assert isinstance(session.written.shelf, FileShelf)
    assert session.written.size > 2 * 200 * 100  # the text (its messages), on the shelf
    per_turn = (sizes[3] - sizes[2]) / 160
    assert per_turn < 24, (per_turn, sizes)
    print(f"the written chat: {per_message:.1f} bytes a message, {per_turn:.1f} a turn of three")


def test_the_cursor_and_the_inline_tables_hold_the_chats_own_objects_not_copies(
    service_on: Any,
) -> None:
    """Decision 0141: what the harness's cursor keeps of each message, its call ids included,
    and the inline cache's origins and shortened calls, beyond the chat's and the state's own
    objects, strings included, is a slot for each position's calls (the chat's own objects), a
    fingerprint's 16 bytes, 8 bytes of origins and a place in the session's tables of call ids:
    about 95 bytes a message here. A tuple of object ids and one of the harness's ids per
    assistant message in three lists a position, the recorded copies in two tables, a tuple
    per harness id, origins in 8-byte integers and an entry per collapsed call made it about
    250."""
    service = service_on(20_000)
    server, call, sid, prefix, digest = _opened(service)
    held = []
    for _ in _appended(call, sid, prefix, digest, 37, 200, (40, 200)):
        cursor = server.sessions[sid].harness.ingestor.cursor
        inline = service._open(sid).inline_cache
        chat: set[int] = set()
        _bookkeeping([service.state(sid)], chat, strings=True)
        held.append(
            _bookkeeping([vars(cursor), inline.origin, inline.compacted], chat, strings=True)
        )
    per_message = (held[1] - held[0]) / (2 * 160)
    assert 0 < per_message < 150, (per_message, held)
    print(f"cursor and inline tables: {per_message:.0f} bytes a message, turns 40-200")


def test_the_states_per_object_values_are_machine_integers_not_map_entries(
    service_on: Any,
) -> None:
    """Decision 0140: what the session state keeps per object beside the index and the chat
    (each object's position, kind, turn of a tool call, last use and membership of the metadata
    pool) is one map entry, its position's, and a few bytes of machine integers: under 250 bytes
    an object here (about 160). Five persistent maps, an entry each per object, made it about
    600."""
    service = service_on(20_000)
    _server, call, sid, prefix, digest = _opened(service)
    held, objects = [], []
    for _ in _appended(call, sid, prefix, digest, 37, 200, (40, 200)):
        state = service.state(sid)
        chat: set[int] = set()
        _bookkeeping([state.turns, state.index], chat, strings=True)
        maps = [state.positions, state.kinds, state.pool, state.toolcall_turn, state.last_used]
        held.append(_bookkeeping(maps, chat, strings=True))
        objects.append(len(state.index))
    per_object = (held[1] - held[0]) / (objects[1] - objects[0])
    assert objects[1] - objects[0] == 160
    assert 0 < per_object < 250, (per_object, held)
    state = service.state(sid)
    calls = [i for i in state.index if state.kinds[i] == "toolcall"]
    assert len(calls) == 200 and set(state.pool) == set(state.index)
    assert [state.toolcall_turn[i] for i in calls] == [1] * 200  # one long turn
    assert sorted(state.last_used.values()) == list(range(1, 201))
    print(f"the state's maps: {per_object:.0f} bytes an object, turns 40-200")


def test_the_chats_closed_turns_are_packed_a_few_bytes_a_message(service_on: Any) -> None:
    """Decisions 0142 and 0144: every turn of the chat before its last few holds its messages as
    one compressed text of their stored forms, read back on demand through a bounded cache of
    the turns read last: what the chat holds of a message, its strings included (ids apart: the
    session's index holds them), is a few tens of bytes. Each message as its records, its
    calls, their arguments and its texts (main before 0144) was about 250 bytes a message
    here."""
    from selfctx.domain import chat

    service = service_on(20_000)
    _server, call, sid, prefix, digest = _opened(service)
    rng = random.Random(37)
    held, counted = [], []
    for n in range(480):
        new = [{"role": "user", "content": f"step {n}: go on"}] if n % 10 == 9 else []
        new = _turn(new, prefix, n, _output(rng, n, 300))
        digest = call("ingest", session_id=sid, messages=new, extends=digest)["digest"]
        call("assemble", session_id=sid)
        if n + 1 in (240, 480):
            gc.collect()
            state = service.state(sid)
            ids: set[int] = {id(i) for i in state.index}
            roots = [state.turns, getattr(chat, "_unpacked", None)]
            held.append(_bookkeeping(roots, ids, strings=True))
            counted.append(sum(len(t.messages) for t in state.turns))
    per_message = (held[1] - held[0]) / (counted[1] - counted[0])
    assert 0 < per_message < 100, (per_message, held, counted)
    state = service.state(sid)
    assert len(state.turns) == 50  # turn 0, the first user message, 48 more
    messages = [m for turn in state.turns for m in turn.messages]  # read back, every one
    calls = [c for m in messages for c in getattr(m, "tool_calls", ())]
    assert [dict(c.arguments) for c in calls] == [
        {"command": f"pytest -k case{n}"} for n in range(480)
    ]
    assert [m.text for m in messages if type(m).__name__ == "UserMessage"][1:] == [
        f"step {n}: go on" for n in range(9, 480, 10)
    ]
    print(f"the chat: {per_message:.0f} bytes a message, strings included, calls 240-480")
