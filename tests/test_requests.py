"""Request records: at every model call of a replayed session the record's figures equal figures
computed from scratch (tokens by part, the digest), the cacheable prefix is what a provider's
cache would serve, and the context rebuilt from the store as of each record is the one sent."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.cli.replay_cmd import SAMPLE_SESSION
from selfctx.adapters.harness.replay import replay, replay_filesystem_id
from selfctx.adapters.harness.tokens import PromptCounter
from selfctx.adapters.harness.trajectories import load
from selfctx.adapters.tokenizer import EstimateTokenizer
from selfctx.application.policies import policy_by_name
from selfctx.application.ports.store import ObjectStore, Version
from selfctx.application.requests import (
    Mark,
    RequestFacts,
    RequestMeter,
    RequestRecords,
    cache_cost,
    context_digest,
    record_from_document,
    record_from_version,
    request_document,
    requests_id,
    rules_of,
)
from selfctx.application.tokens import context_texts, context_tokens
from selfctx.domain.prompt_cache import ANTHROPIC, OPENAI, Block, PromptCache, Request
from selfctx.domain.rendering import AssembledContext, RenderedMessage
from tests.conftest import StoreFactory

POLICIES = {
    "ssot": policy_by_name("ssot"),
    "inline": policy_by_name("inline", trigger_tokens=900, clear_at_least=200, keep_recent=1),
    "relevance": policy_by_name("relevance"),
}


def _parts(context: AssembledContext) -> list[list[str]]:
    """The texts of a context in prompt order, grouped by section and message."""
    groups = [[context.system_prompt], [context.metadata_text()] if context.metadata else []]
    for message in context.chat:
        groups.append(list(context_texts(AssembledContext("", (), (message,), ())))[1:])
    groups += [[block.text] for block in context.active]
    return groups


def _common_prefix_tokens(old: list[list[str]], new: list[list[str]], count: Any) -> int:
    """Tokens of the whole sections and messages equal to the previous request's, in order."""
    shared = 0
    for a, b in zip(old, new, strict=False):
        if a != b:
            break
        shared += sum(map(count, b))
    return shared


@pytest.mark.parametrize("name", list(POLICIES))
def test_every_request_is_recorded_and_rebuilt_exactly(
    name: str, store_factory: StoreFactory, ns: str
) -> None:
    (trajectory,) = load(SAMPLE_SESSION)
    tokenizer = EstimateTokenizer()
    store: ObjectStore = store_factory.make()
    service = build_service(
        store=store,
        default_filesystem_id=f"{ns}{replay_filesystem_id(trajectory)}",
        workspace="/",
        tokenizer=tokenizer,
    )
    session_id = f"{ns}requests-{name}"
    sent: list[tuple[AssembledContext, Any]] = []
    previous: list[list[str]] = []

    def observe(n: int, call: Any, session: Any, request: Any) -> None:
        nonlocal previous
        context = service.assemble(session.session_id)
        naive = PromptCounter(tokenizer)(request)
        record = service.record_request(
            session.session_id,
            context,
            RequestFacts(api="openai", model="m", client="replay", naive_tokens=naive),
        )
        texts = _parts(context)
        assert record.n == n
        assert record.seq == service.log_position(session.session_id)
        assert record.digest == context_digest(context)
        assert sum(record.parts) == record.managed_tokens
        assert record.managed_tokens == context_tokens(context, tokenizer.count)
        # whole sections and messages equal to the previous request's: what a provider's cache
        # serves (the ssot layout's metadata block grows at its end: it counts as changed)
        assert record.managed_shared <= _common_prefix_tokens(previous, texts, tokenizer.count)
        if name != "ssot":  # the inline layouts grow at their end between two collapses
            assert record.managed_shared == _common_prefix_tokens(previous, texts, tokenizer.count)
        previous = texts
        sent.append((context, record))

    try:
        report = replay(
            trajectory,
            service,
            PromptCounter(tokenizer),
            session_id=session_id,
            observe=observe,
            policy=POLICIES[name],
        )
        records = service.requests(report.session_id)
        assert [r.n for r in records] == list(range(1, len(sent) + 1))
        assert all(r.tx_id is not None for r in records)
        for (context, made), stored in zip(sent, records, strict=True):
            assert stored.digest == made.digest
            assert stored.parts == made.parts
            rebuilt = service.context_at(report.session_id, stored.seq, tx_id=stored.tx_id)
            assert rebuilt == context
            assert context_digest(rebuilt) == stored.digest
        last = records[-1]
        assert last.total_managed == sum(r.managed_tokens for r in records)
        assert last.total_naive == sum(r.facts.naive_tokens or 0 for r in records)
        assert last.cost_managed <= last.total_managed * OPENAI.write
        # the lazy sequence reads the same records, whichever is read first
        lazy = service.request_records(report.session_id)
        assert len(lazy) == len(records)
        assert lazy.seqs() == [r.seq for r in records]
        assert lazy.marked() == all(r.marks is not None for r in records)
        assert lazy[-1] == records[-1] and lazy[len(records) // 2] == records[len(records) // 2]
        assert list(lazy) == records and lazy[1:3] == records[1:3]
    finally:
        service.close()
        store.close()


def test_a_request_shares_the_prefix_it_repeats() -> None:
    count = len
    meter = RequestMeter()
    a = RenderedMessage("user", "hello")
    b = RenderedMessage("assistant", "world")
    first = AssembledContext("sys", (), (a,), ())
    tokens, shared, parts, digest = meter.measure(first, count, lambda _: False, True)
    assert (tokens, shared, parts) == (8, 0, (3, 0, 5, 0))
    assert digest == context_digest(first)
    second = AssembledContext("sys", (), (a, b), ())
    tokens, shared, parts, digest = meter.measure(second, count, lambda _: False, True)
    assert (tokens, shared) == (13, 8)
    assert digest == context_digest(second)
    # the first message rendered anew and changed (renderers then render everything after it
    # anew): only the system prompt is shared
    third = AssembledContext(
        "sys", (), (RenderedMessage("user", "hellO"), RenderedMessage("assistant", "world")), ()
    )
    tokens, shared, _, digest = meter.measure(third, count, lambda _: False, True)
    assert (tokens, shared) == (13, 3)
    assert digest == context_digest(third) != context_digest(second)
    tool = RenderedMessage("tool", "[#1]\nout", toolcall_id="tc_1")
    fourth = AssembledContext("sys", (), (*third.chat, tool), ())
    _, _, parts, _ = meter.measure(fourth, count, lambda i: i == "tc_1", True)
    assert parts == (3, 0, 10, 8)
    collapsed = RenderedMessage("tool", "[#1 collapsed]", toolcall_id="tc_1")
    fifth = AssembledContext("sys", (), (*third.chat, collapsed), ())
    _, shared, parts, _ = meter.measure(fifth, count, lambda _: False, True)
    assert (shared, parts) == (13, (3, 14, 10, 0))
    # everything rendered anew, the same text: a provider's cache serves it all the same
    again = AssembledContext("sys", (), tuple(attrs.evolve(m) for m in fifth.chat), ())
    tokens, shared, parts, digest = meter.measure(again, count, lambda _: False, True)
    assert (tokens, shared, parts) == (27, 27, (3, 14, 10, 0))
    assert digest == context_digest(fifth)


@pytest.mark.parametrize("rules", [ANTHROPIC, OPENAI], ids=["anthropic", "openai"])
def test_the_cost_of_a_growing_prompt_is_the_cache_models(rules: Any) -> None:
    """A prompt that grows at its end, sent again and again: the record's cost from sizes and
    shared prefixes equals the block-by-block model of selfctx.domain.prompt_cache."""
    cache = PromptCache(rules)
    blocks: list[Block] = []
    previous = 0
    for n in range(1, 30):
        blocks = [*blocks, Block(f"b{n}", 150 * n)]
        size = sum(b.tokens for b in blocks)
        marked = (*blocks[:-1], Block(blocks[-1].key, blocks[-1].tokens, breakpoint=True))
        expected = cache.send(Request(tuple(marked), at=10.0 * n)).cost
        assert cache_cost(size, previous, rules) == pytest.approx(expected), n
        previous = size
    # an entry older than its lifetime is gone; a prefix under the minimum is never cached
    assert cache_cost(5000, 4000, rules, alive=False) == 5000 * rules.write
    assert cache_cost(900, 800, rules) == 900
    assert rules_of("responses") is OPENAI and rules_of("anthropic") is ANTHROPIC
    assert rules_of(None) is OPENAI and rules_of("something else") is OPENAI


def test_records_read_back_whatever_a_document_holds() -> None:
    assert record_from_document({"xt/id": "x", "type": "file"}) is None
    odd = {"xt/id": requests_id("s"), "type": "request_log", "n": "7", "record": {"parts": 3}}
    record = record_from_document(odd)
    assert record is not None and record.n == 0 and record.parts == (0, 0, 0, 0)
    meter = RequestMeter()
    made = meter.next_record(
        at="2025-01-01T00:00:00Z",
        seq=3,
        facts=RequestFacts(
            model="m\nx" + "y" * 500, naive_tokens=10, naive_shared=4, note="shown once"
        ),
        managed=5,
        shared=0,
        parts=(1, 1, 2, 1),
        digest="d",
    )
    back = record_from_document(request_document("s", made))
    assert back is not None
    assert back.facts.model == ("m x" + "y" * 500)[:200]
    assert back.facts.note == "shown once"
    assert (back.total_naive, back.total_managed, back.seq) == (10, 5, 3)


def test_lazy_records_skip_what_is_not_a_record_and_read_odd_ones_alike() -> None:
    def version(doc: dict[str, Any], tx: int) -> Version:
        return Version(tx, f"t{tx}", doc)

    docs: list[dict[str, Any]] = [
        {"xt/id": "r", "type": "request_log", "n": 1, "record": {"seq": 4, "marks": []}},
        {"xt/id": "r", "type": "file"},
        {"xt/id": "r", "type": "request_log", "n": 2, "record": {"seq": "9", "marks": "x"}},
        {"xt/id": "r", "type": "request_log", "n": 3, "record": []},
    ]
    versions = [version(d, k) for k, d in enumerate(docs)]
    lazy = RequestRecords(versions)
    eager = [r for r in map(record_from_version, versions) if r is not None]
    assert len(lazy) == len(eager) == 2
    assert lazy.seqs() == [r.seq for r in eager] == [4, 0]
    assert lazy.marked() is False  # the second holds no list of marks
    assert list(lazy) == eager
    with pytest.raises(IndexError):
        lazy[2]
    lazy.append(attrs.evolve(eager[0], n=3, seq=12, marks=()))
    assert lazy.seqs() == [4, 0, 12] and lazy[-1].n == 3
    lazy[1] = attrs.evolve(eager[1], seq=7, marks=())
    assert lazy.seqs() == [4, 7, 12] and lazy.marked()
    assert not RequestRecords().marked() and RequestRecords(versions[:1]).marked()


def test_lazy_records_give_a_records_lines_without_decoding_it() -> None:
    """``lines(i)`` is ``records[i].lines`` (whole, damaged or absent), decoded or not."""
    shown = [["tc_1", "[tc_1] ls: 3 lines", 40, False], ["tc_2", "x", None, True]]
    stored: list[Any] = [
        {"complete": True, "shown": shown},
        {"complete": False, "shown": [["tc_1", 5, 1, False]]},  # damaged: none
        None,
        {"complete": False, "shown": []},
    ]
    docs = [
        {"xt/id": "r", "type": "request_log", "n": k + 1, "record": {"seq": k, "lines": lines}}
        for k, lines in enumerate(stored)
    ]
    versions = [Version(k, f"t{k}", d) for k, d in enumerate(docs)]
    eager = [record_from_version(v) for v in versions]
    lazy = RequestRecords(versions)
    assert [lazy.lines(k) for k in range(4)] == [r.lines for r in eager if r is not None]
    assert lazy.lines(0) is not None and len(lazy.lines(0).shown) == 2  # type: ignore[union-attr]
    assert lazy.lines(1) is None and lazy.lines(2) is None
    lazy[3] = attrs.evolve(lazy[3], lines=None)  # a decoded record answers for itself
    assert lazy.lines(3) is None
    with pytest.raises(IndexError):
        lazy.lines(4)


def test_lazy_records_give_a_records_marks_without_decoding_it(monkeypatch: Any) -> None:
    """``marks(i)`` is ``records[i].marks`` (kept, odd or absent), and decodes no record."""
    from selfctx.application import requests as module

    stored: list[Any] = [
        [{"event": "ObjectDeactivated", "seq": 3, "object_id": "tc_1", "by": "policy"}],
        [{"event": 5}, "x", {"event": "ChatCompacted", "seq": "7", "upto": 2}],
        None,
        [],
    ]
    docs = [
        {"xt/id": "r", "type": "request_log", "n": k + 1, "record": {"seq": k, "marks": marks}}
        for k, marks in enumerate(stored)
    ]
    versions = [Version(k, f"t{k}", d) for k, d in enumerate(docs)]
    eager = [record_from_version(v) for v in versions]
    decoded: list[Any] = []
    monkeypatch.setattr(module, "record_from_version", lambda v: decoded.append(v))
    lazy = RequestRecords(versions)
    assert [lazy.marks(k) for k in range(4)] == [r.marks for r in eager if r is not None]
    assert decoded == []
    assert lazy.marks(0) == (Mark(3, "ObjectDeactivated", {"object_id": "tc_1", "by": "policy"}),)
    assert lazy.marks(1) == (Mark(0, "ChatCompacted", {"upto": "2"}),) and lazy.marks(2) is None
    last = eager[3]
    assert last is not None
    lazy[3] = attrs.evolve(last, marks=None)  # a decoded record answers for itself
    assert lazy.marks(3) is None
    with pytest.raises(IndexError):
        lazy.marks(4)


def test_a_record_keeps_the_collapsed_lines_it_sent_anew() -> None:
    """The first record of a meter keeps every collapsed line of its prompt (complete); each
    later one the collapsed lines unlike those recorded; a record not written leaves its lines
    to the next; the ssot layout and a record beyond MAX_LINES keep none."""
    from selfctx.application.requests import Line, PromptLines

    count = len
    user = RenderedMessage("user", "go")
    a = RenderedMessage("tool", "[#1 collapsed: bash ok]", toolcall_id="a")
    b = RenderedMessage("tool", "[#2]\nfull", toolcall_id="b")
    meter = RequestMeter()
    meter.measure(AssembledContext("s", (), (user, a, b), ()), count, lambda i: i == "b", True)
    assert meter.lines == PromptLines(True, (Line("a", a.text, None, False),))
    meter.lines_recorded()
    meter.measure(AssembledContext("s", (), (user, a, b), ()), count, lambda i: i == "b", True)
    assert meter.lines == PromptLines(False, ())
    meter.lines_recorded()
    b2 = RenderedMessage("tool", "[#2 collapsed: bash ok]", toolcall_id="b")
    a2 = attrs.evolve(a)  # rendered anew, the same text: not kept again
    sizes = {"a": 7, "b": 4}.get
    later = AssembledContext("s", (), (user, a2, b2), ())
    meter.measure(later, count, lambda _: False, True, sizes)
    assert meter.lines == PromptLines(False, (Line("b", b2.text, 4, False),))
    # not written (a failed commit): the next record keeps them
    meter.measure(later, count, lambda _: False, True, sizes)
    assert meter.lines == PromptLines(False, (Line("b", b2.text, 4, False),))
    meter.lines_recorded()
    record = meter.next_record(
        at="2025-01-01T00:00:00Z",
        seq=1,
        facts=RequestFacts(),
        managed=1,
        shared=0,
        parts=(1, 0, 0, 0),
        digest="d",
        lines=meter.lines,
    )
    again = record_from_document(request_document("s", record))
    assert again is not None and again.lines == record.lines
    broken = request_document("s", record)
    assert broken["record"]["lines"]["shown"] == [["b", b2.text, 4, False]]
    broken["record"]["lines"]["shown"] = [["b"]]
    assert record_from_document(broken).lines is None  # type: ignore[union-attr]
    ssot = RequestMeter()
    ssot.measure(AssembledContext("s", (), (user, a), ()), count, lambda _: False, False)
    assert ssot.lines is None


def test_a_record_beyond_max_lines_keeps_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("selfctx.application.requests.MAX_LINES", 1)
    count = len
    tools = tuple(
        RenderedMessage("tool", f"[#{k} collapsed]", toolcall_id=f"t{k}") for k in range(3)
    )
    meter = RequestMeter()
    meter.measure(AssembledContext("s", (), tools[:1], ()), count, lambda _: False, True)
    assert meter.lines is not None and meter.lines.complete
    meter.lines_recorded()
    meter.measure(AssembledContext("s", (), tools, ()), count, lambda _: False, True)
    assert meter.lines is None
    meter.lines_recorded()
    meter.measure(AssembledContext("s", (), tools, ()), count, lambda _: False, True)
    assert meter.lines is None  # all three again, a complete set: still too many


def _digest_by_definition(context: AssembledContext) -> str:
    """context_digest as first defined: each value thawed by pyrsistent's own ``thaw`` from the
    persistent maps values were frozen into before decision 0132 (in a ``pmap``'s order)."""
    import hashlib
    import json

    from pyrsistent import freeze
    from pyrsistent import thaw as pyrsistent_thaw

    from selfctx.domain.chat import thaw_json

    def thaw(value: Any) -> Any:
        return pyrsistent_thaw(freeze(thaw_json(value)))

    def sha(text: str) -> bytes:
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()

    def dumps(body: Any) -> str:
        return json.dumps(body, ensure_ascii=True, sort_keys=True)

    chat = bytes(32)
    for m in context.chat:
        calls = [[c.id, c.name, thaw(c.arguments)] for c in m.tool_calls]
        reasoning, images = [thaw(r) for r in m.reasoning], [thaw(i) for i in m.images]
        body = [m.role, m.text, calls, m.toolcall_id, m.is_error, reasoning, images]
        chat = hashlib.sha256(chat + sha(dumps(body))).digest()
    whole = hashlib.sha256(sha(context.system_prompt) + sha("\n".join(context.metadata)) + chat)
    for b in context.active:
        whole.update(sha(dumps([b.object_id, b.content, [thaw(i) for i in b.images]])))
    return whole.hexdigest()


def test_the_digest_of_frozen_arguments_is_the_one_pyrsistents_thaw_gives() -> None:
    """The digest thaws tool arguments, reasoning and images with ``thaw_json`` (a third of
    pyrsistent's cost): the same digest, so records written before still match."""
    from selfctx.domain.chat import ToolCallRequest, freeze_json
    from selfctx.domain.rendering import ActiveBlock

    nested = {"cmd": "ls", "n": 3, "x": 1.5, "deep": {"a": [1, {"b": None}], "é": True}}
    call = ToolCallRequest(id="tc_1", name="bash", arguments=nested)
    assistant = RenderedMessage(
        "assistant",
        "ok",
        tool_calls=(call,),
        reasoning=(freeze_json({"type": "r", "parts": [1, (2, 3)]}),),
    )
    tool = RenderedMessage(
        "tool",
        "out",
        toolcall_id="tc_1",
        images=(freeze_json({"data": "x", "m": [1]}), {"plain": [1]}),
    )
    active = ActiveBlock("f1", "text", images=(freeze_json({"k": {"z": [2, 3]}}),))
    context = AssembledContext("sys", ("a", "b"), (assistant, tool), (active,))
    assert context_digest(context) == _digest_by_definition(context)
