"""``RequestCache``: each request rendered from where the chat changed is exactly the request
``render`` makes of the whole context, and only the changed part is rendered again."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from selfctx.adapters.harness import request as request_module
from selfctx.adapters.harness.render import render, to_anthropic
from selfctx.adapters.harness.request import RequestCache, text_chars
from selfctx.domain.chat import ToolCallRequest
from selfctx.domain.rendering import ActiveBlock, AssembledContext, RenderedMessage

FORMATS = ("openai", "anthropic", "responses")
IMAGE = {"type": "image", "url": "data:image/png;base64,AAAA"}


def _expected(context: AssembledContext, fmt: str) -> tuple[dict[str, Any], str, int]:
    body = render(context, fmt)
    text = json.dumps(body, ensure_ascii=True, separators=(",", ":"))
    conversation = body["input" if fmt == "responses" else "messages"]
    return body, text, text_chars(body.get("system", [])) + text_chars(conversation)


@st.composite
def messages(draw: Any, n: int) -> RenderedMessage:
    kind = draw(st.sampled_from(["user", "assistant", "assistant", "tool", "tool"]))
    text = draw(
        st.sampled_from(["", " ", "text", "more text\n", 'naïve "quoted" \\ \t\ud83d\ude00 \udc80'])
    )
    if kind == "user":
        images = (IMAGE,) if draw(st.booleans()) and draw(st.booleans()) else ()
        return RenderedMessage("user", text, images=images)
    if kind == "assistant":
        count = draw(st.integers(0, 2))
        calls = tuple(
            ToolCallRequest(f"c{draw(st.integers(0, 6))}", "bash", {"command": f"ls {n}"})
            for _ in range(count)
        )
        if len({c.id for c in calls}) != len(calls):
            calls = calls[:1]
        reasoning = (
            ({"type": "thinking", "thinking": "hm", "signature": "s"},)
            if draw(st.booleans()) and draw(st.booleans())
            else ()
        )
        return RenderedMessage("assistant", text, calls, reasoning=reasoning)
    images = (IMAGE,) if draw(st.booleans()) and draw(st.booleans()) else ()
    call = f"c{draw(st.integers(0, 6))}"
    return RenderedMessage("tool", text or "out", toolcall_id=call, images=images)


@st.composite
def histories(draw: Any) -> list[tuple[tuple[RenderedMessage, ...], bool, bool]]:
    """Successive chats (with whether there is metadata and active content), each made from
    the one before: grown, with a message replaced by a new object, or cut short."""
    chat: list[RenderedMessage] = []
    out = []
    for step in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from(["grow", "grow", "grow", "replace", "cut", "same"]))
        if op == "grow":
            chat += [draw(messages(step * 10 + i)) for i in range(draw(st.integers(1, 5)))]
        elif op == "replace" and chat:
            at = draw(st.integers(0, len(chat) - 1))
            chat[at] = draw(messages(step * 10 + 9))
        elif op == "cut" and chat:
            del chat[draw(st.integers(0, len(chat) - 1)) :]
        out.append((tuple(chat), draw(st.booleans()), draw(st.booleans())))
    # a rendered chat answers each call once: ingestion refuses a second result for a call and
    # gives a reused call id an object id of its own (decision 0030)
    for sent, _, _ in out:
        answered = [m.toolcall_id for m in sent if m.role == "tool"]
        assume(len(set(answered)) == len(answered))
    return out


def _context(
    prompt: str, chat: tuple[RenderedMessage, ...], *, metadata: bool, active: bool
) -> AssembledContext:
    return AssembledContext(
        system_prompt=prompt,
        metadata=("#1 file a.py",) if metadata else (),
        chat=chat,
        active=(ActiveBlock("f1", "content", ()),) if active else (),
    )


@pytest.mark.parametrize("joined", [False, True])
@pytest.mark.parametrize("values", [True, False])
@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=100, deadline=None)
@given(history=histories(), prompt=st.sampled_from(["", "You fix bugs."]))
def test_every_request_is_the_whole_rendering(
    fmt: str,
    values: bool,
    joined: bool,
    history: list[tuple[tuple[RenderedMessage, ...], bool, bool]],
    prompt: str,
) -> None:
    """With its items' values kept, or only their texts (the body then read back from them);
    and with ``joined``, the items' texts but the last two to three joined in runs of two
    (decision 0121: a long session's runs are of 256 items), cut into and joined again."""
    with pytest.MonkeyPatch.context() as patch:
        if joined:
            patch.setattr(request_module, "_JOINED_ITEMS", 2)
            patch.setattr(request_module, "_STALE_RENDERINGS", 0)
            cache = RequestCache(fmt, values=values, rendering_budget=0)
        else:
            cache = RequestCache(fmt, values=values)
        _every_request(cache, history, prompt)


def _every_request(
    cache: RequestCache,
    history: list[tuple[tuple[RenderedMessage, ...], bool, bool]],
    prompt: str,
) -> None:
    fmt = cache.fmt
    values = cache.values
    for n, (chat, metadata, active) in enumerate(history):
        context = _context(prompt, chat, metadata=metadata, active=active)
        got = cache.render(context)
        body, text, chars = _expected(context, fmt)
        assert got.text == text
        assert got.chars == chars
        assert got.messages == len(body["input" if fmt == "responses" else "messages"])
        if n % 2 == 0:  # the body asked for at some requests only
            if values:
                assert got.body == body
            else:  # read back from the text, the body is what the bytes sent say (a surrogate
                # pair held as two code points reads back as one character)
                assert json.loads(json.dumps(got.body)) == json.loads(text)


def _proxys_body(context: AssembledContext, fmt: str) -> dict[str, Any]:
    """The body the proxy sends of ``context``, rendered whole: context tools under a prefix,
    no cache marks."""
    if fmt == "anthropic":
        return to_anthropic(context, cache_control=False, tool_prefix="context_")
    return render(context, fmt, tool_prefix="context_")


def _calls(steps: int, output: str) -> Iterator[tuple[int, AssembledContext]]:
    """A chat growing by one bash call and its output (``output`` formatted with ``n``) a step:
    each step's number and context."""
    chat: list[RenderedMessage] = [RenderedMessage("user", "go")]
    for n in range(steps):
        call = ToolCallRequest(f"c{n}", "bash", {"command": f"ls {n}"})
        chat += [
            RenderedMessage("assistant", f"step {n}", (call,)),
            RenderedMessage("tool", output.format(n=n), toolcall_id=f"c{n}"),
        ]
        yield n, AssembledContext("You fix bugs.", (), tuple(chat), ())


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_cache_of_texts_keeps_no_values_until_asked_to(fmt: str) -> None:
    """Decision 0092: a harness that reads only the request's text (the stdio server) has each
    item of the chat kept once, as its text; ``keep_values`` switches to values as well."""
    cache = RequestCache(fmt, values=False)
    for n, context in _calls(60, "output {n}"):
        if n == 30:
            cache.keep_values()
        got = cache.render(context)
        body, text, _ = _expected(context, fmt)
        assert got.text == text
        items = cache._items
        assert len(items.texts) >= n  # the chat's items, closed ones at least
        held = [v for v in items.values if v is not None]
        rendered = [hit[1] for hit in cache._rendered.values()]
        if n < 30:
            assert held == []
            if fmt != "anthropic":  # Anthropic's blocks are kept to merge what follows
                assert all(r.value is None for r in rendered if not isinstance(r, list))
        else:
            assert len(held) == len(items.values)
        assert got.body == body


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_cache_without_text_keeps_no_items_text(fmt: str) -> None:
    """Decision 0102: the proxy's cache (values and orjson pieces, no text) keeps no item's
    ASCII text, neither in its items nor in its renderings; its bodies and pieces are as
    before, each piece the item's compact JSON."""
    cache = RequestCache(fmt, tool_prefix="context_", cache_control=False, text=False, pieces=True)
    for n, context in _calls(40, "output {n} \u00e9"):
        got = cache.render(context)
        body = _proxys_body(context, fmt)
        assert got.body == body
        assert got.text == ""
        items = cache._items
        assert len(items.texts) >= n
        assert set(items.texts) <= {""}
        for _message, made in cache._rendered.values():
            for item in made if isinstance(made, list) else [made]:
                assert not isinstance(item, request_module._Item) or item.text == ""
        listed = got.body["input" if fmt == "responses" else "messages"]
        pieces = cache.pieces
        assert pieces is not None and len(pieces) >= n
        held = listed[pieces.offset : pieces.offset + len(pieces)]  # after the head
        for at, value in enumerate(held):
            assert pieces.values[at] is value
            assert pieces.span(at, at + 1) == orjson.dumps(value)
        assert pieces.span(0, len(pieces)) == orjson.dumps(held)[1:-1]


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=100, deadline=None)
@given(history=histories(), prompt=st.sampled_from(["", "You fix bugs."]))
def test_the_proxys_requests_are_the_whole_rendering(
    fmt: str, history: list[tuple[tuple[RenderedMessage, ...], bool, bool]], prompt: str
) -> None:
    """As the proxy makes them: context tools under a prefix, no cache marks (the proxy places
    its own), no text."""
    cache = RequestCache(fmt, tool_prefix="context_", cache_control=False, text=False)
    for chat, metadata, active in history:
        context = _context(prompt, chat, metadata=metadata, active=active)
        got = cache.render(context)
        body = _proxys_body(context, fmt)
        assert got.body == body
        assert got.text == ""
        conversation = body["input" if fmt == "responses" else "messages"]
        assert got.chars == text_chars(body.get("system", [])) + text_chars(conversation)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_grown_chat_renders_only_its_new_messages(
    fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[RenderedMessage] = []
    for name in ("_openai_message", "_blocks", "_responses_items"):
        inner = getattr(request_module, name)

        def counted(message: RenderedMessage, inner: Any = inner) -> Any:
            made.append(message)
            return inner(message)

        monkeypatch.setattr(request_module, name, counted)
    cache = RequestCache(fmt)
    chat: list[RenderedMessage] = [RenderedMessage("user", "go")]
    for n in range(200):
        call = ToolCallRequest(f"c{n}", "bash", {"command": f"ls {n}"})
        chat += [
            RenderedMessage("assistant", f"step {n}", (call,)),
            RenderedMessage("tool", f"output {n}", toolcall_id=f"c{n}"),
        ]
        made.clear()
        context = AssembledContext("You fix bugs.", (), tuple(chat), ())
        got = cache.render(context)
        assert got.body == render(context, fmt)
        # The new assistant message and its result; Anthropic also the user message that the
        # result joins (kept open, since what follows may still join it).
        assert len(made) <= (3 if n == 0 else 2), (n, made)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_chat_of_calls_is_walked_from_its_last_answered_call(
    fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chat of calls and their results, with no text between them, is closed after each
    result: a grown one is walked from there, not from its last text message."""
    walked: list[RenderedMessage] = []
    inner = RequestCache._make

    def counted(self: RequestCache, message: RenderedMessage, make: Any) -> Any:
        walked.append(message)
        return inner(self, message, make)

    monkeypatch.setattr(RequestCache, "_make", counted)
    cache = RequestCache(fmt)
    chat: list[RenderedMessage] = [RenderedMessage("user", "go")]
    for n in range(100):
        call = ToolCallRequest(f"c{n}", "bash", {"command": f"ls {n}"})
        chat += [
            RenderedMessage("assistant", f"step {n}", (call,)),
            RenderedMessage("tool", f"output {n}", toolcall_id=f"c{n}"),
        ]
        walked.clear()
        context = AssembledContext("You fix bugs.", (), tuple(chat), ())
        assert cache.render(context).body == render(context, fmt)
        assert len(walked) <= 3, (n, len(walked))


@pytest.mark.parametrize("fmt", FORMATS)
def test_renderings_of_collapsed_outputs_are_not_kept(fmt: str) -> None:
    # each turn the output before the newest collapses to a line: the whole output's rendering
    # goes from the cache within a fixed number of turns, so what the cache keeps follows the
    # chat as it is now, not every text it ever showed
    cache = RequestCache(fmt)
    chat: list[RenderedMessage] = [RenderedMessage("user", "go")]
    big = "x" * 5_000
    for n in range(200):
        call = ToolCallRequest(f"c{n}", "bash", {"command": f"ls {n}"})
        if n:
            chat[-1] = RenderedMessage("tool", f"[c{n - 1}: collapsed]", toolcall_id=f"c{n - 1}")
        chat += [
            RenderedMessage("assistant", f"step {n}", (call,)),
            RenderedMessage("tool", f"{big} {n}", toolcall_id=f"c{n}"),
        ]
        context = AssembledContext("You fix bugs.", (), tuple(chat), ())
        got = cache.render(context)
        if n % 50 == 49:
            assert got.body == render(context, fmt)
    kept = [hit for hit in cache._rendered.values() if hit[0] not in chat]
    assert len(kept) <= 64 + 1, len(kept)
    assert sum(big in repr(hit[1]) for hit in cache._rendered.values()) <= 64 + 2


@pytest.mark.parametrize("values", [True, False])
@pytest.mark.parametrize("fmt", FORMATS)
def test_older_items_texts_are_held_joined_and_cut_apart_again(
    fmt: str, values: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Decision 0121: beyond the last ``rendering_budget`` and 64 others, the items' texts are
    held in runs of 256 joined by commas (here runs of 8, from the 9th last item); the request
    is the whole rendering's bytes, also after a change far back cuts into a run."""
    monkeypatch.setattr(request_module, "_JOINED_ITEMS", 8)
    cache = RequestCache(fmt, values=values, rendering_budget=4)
    runs = []
    for _, context in _calls(120, "output {n}"):
        assert cache.render(context).text == _expected(context, fmt)[1]
        runs.append(cache._items.joined_items // 8)
    assert runs[-1] >= 10 and runs == sorted(runs)  # runs joined as the chat grew
    items = cache._items
    assert len(items.texts) < 4 + 64 + 2 * 8 and len(items) >= 120
    chat = list(context.chat)
    for at in (101, 37, 5):  # an output far back changes: the request from there on again
        chat[at] = RenderedMessage("tool", f"[collapsed {at}]", toolcall_id=chat[at].toolcall_id)
        changed = AssembledContext("You fix bugs.", (), tuple(chat), ())
        got = cache.render(changed)
        body, text, _ = _expected(changed, fmt)
        assert got.text == text
        assert got.body == body if values else json.loads(json.dumps(got.body)) == body
    assert cache._items.joined_items // 8 < runs[-1]  # cut apart, then joined again


def _file_of(cache: RequestCache) -> Any:
    spill = cache._items.spill
    assert spill is not None and spill._file is not None
    return spill._file


@pytest.mark.parametrize("fmt", FORMATS)
def test_older_items_texts_are_in_a_private_file_and_read_back_whole(
    fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Decision 0128: the joined runs of older items' texts are written to a file without a
    name, readable by its owner only, and read from it for each request: the process holds none
    of their characters, and every request, also after a change far back cuts into a run, is
    the whole rendering's bytes."""
    monkeypatch.setattr(request_module, "_JOINED_ITEMS", 8)
    cache = RequestCache(fmt, values=False, rendering_budget=4)
    for _, context in _calls(160, "output {n} " + "y" * 200):
        assert cache.render(context).text == _expected(context, fmt)[1]
    items = cache._items
    assert len(items) >= 320 and not items.joined  # every joined run is in the file
    assert len(items.texts) < 4 + 64 + 2 * 8  # the newer texts alone are strings here
    assert items.spill is not None and items.spill.size > 100 * 200  # 100 outputs and more
    stat = os.fstat(_file_of(cache).fileno())
    assert stat.st_nlink == 0 and stat.st_mode & 0o777 == 0o600
    assert stat.st_size == cache._items.spill.size > 200 * 8 * 10  # type: ignore[union-attr]
    chat = list(context.chat)
    for at in (301, 37, 5):  # an output far back changes: cut from the file, read again
        chat[at] = RenderedMessage("tool", f"[collapsed {at}]", toolcall_id=chat[at].toolcall_id)
        changed = AssembledContext("You fix bugs.", (), tuple(chat), ())
        assert cache.render(changed).text == _expected(changed, fmt)[1]
    assert os.fstat(_file_of(cache).fileno()).st_size == cache._items.spill.size  # type: ignore[union-attr]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_spill_file_lost_or_refused_renders_the_chat_again(
    fmt: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """Decision 0128: a file that cannot be read back (closed under the cache here) is a
    rendering of the whole chat again, its texts held in memory from then on; a temporary
    directory that refuses the file holds them in memory from the start: the same requests."""
    monkeypatch.setattr(request_module, "_JOINED_ITEMS", 8)
    cache = RequestCache(fmt, values=False, rendering_budget=4)
    for n, context in _calls(140, "output {n}"):
        if n == 100:
            _file_of(cache).close()
        assert cache.render(context).text == _expected(context, fmt)[1]
    assert cache._items.spill is None and cache._items.joined  # in memory since
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    refused = RequestCache(fmt, values=False, rendering_budget=4)
    for _, context in _calls(140, "output {n}"):
        assert refused.render(context).text == _expected(context, fmt)[1]
    assert refused._items.spill is None and refused._items.joined
