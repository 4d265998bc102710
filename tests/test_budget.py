"""Token-driven collapse (decision 0008): the inline policy's batch trigger and the hard budget.

The estimate tokenizer counts ceil(UTF-8 bytes / 4), so outputs of known sizes make exact
expectations possible: an output of 400 ASCII characters is 100 tokens.
"""

from __future__ import annotations

from typing import Any

import pytest

from selfctx.adapters.harness import to_anthropic, to_openai, validate_anthropic, validate_openai
from selfctx.application.settings import Settings
from selfctx.application.usecases.assemble import BudgetExceeded
from selfctx.domain.chat import ContextNote, ToolCallRequest
from selfctx.domain.session.state import PolicyConfig
from tests.conftest import MakeService


def _open(make_service: MakeService, policy: PolicyConfig) -> Any:
    service = make_service(settings=Settings(policy=policy))
    service.start_session("s", "You are an agent.")
    service.record_user_message("s", "Do the task.")
    return service


def _call(service: Any, call_id: str, size: int, text: str = "") -> None:
    service.record_assistant_message("s", text, [ToolCallRequest(call_id, "bash", {"c": call_id})])
    # Distinct outputs: identical ones would be rendered as references to each other.
    output = (call_id + " " + "x" * size)[:size]
    service.record_tool_call("s", call_id, tool="bash", args={"c": call_id}, output=output)


def _notes(service: Any) -> list[str]:
    return [
        m.text for t in service.state("s").turns for m in t.messages if isinstance(m, ContextNote)
    ]


def test_a_batch_collapses_the_oldest_outputs_and_spares_the_newest(
    make_service: MakeService,
) -> None:
    policy = PolicyConfig("inline", trigger_tokens=450, clear_at_least=150, keep_recent=2)
    service = _open(make_service, policy)
    for n in range(4):
        _call(service, f"c{n}", 400)
        service.assemble("s")
    # 4 outputs of 100 tokens and the chat exceed 450: the oldest go, the newest two stay.
    state = service.state("s")
    assert {"c2", "c3"} <= set(state.active)
    assert "c0" not in state.active
    assert len(_notes(service)) == 1
    assert _notes(service)[0].startswith("collapsed ")


def test_no_batch_unless_it_clears_enough(make_service: MakeService) -> None:
    # Above the trigger, but only one small output is collapsible: nothing happens (a cache break
    # that saves little is not worth it).
    policy = PolicyConfig("inline", trigger_tokens=60, clear_at_least=500, keep_recent=1)
    service = _open(make_service, policy)
    _call(service, "c0", 40)
    _call(service, "c1", 40)
    service.assemble("s")
    assert {"c0", "c1"} <= set(service.state("s").active)
    assert _notes(service) == []


def test_the_budget_collapses_least_recently_used_first_never_a_pin(
    make_service: MakeService,
) -> None:
    policy = PolicyConfig("ssot", budget_tokens=520)
    service = _open(make_service, policy)
    _call(service, "old", 800)  # 200 tokens
    service.pin("s", "old")
    _call(service, "a", 400)
    _call(service, "b", 400)
    _call(service, "c", 400)
    context = service.assemble("s")
    state = service.state("s")
    assert "old" in state.active  # pinned: never collapsed
    assert "a" not in state.active and "c" in state.active  # least recently used first
    assert service.prompt_tokens("s", context) <= 520
    assert any("because of the token budget" in note for note in _notes(service))


def test_the_chat_alone_over_the_budget_is_a_typed_error(make_service: MakeService) -> None:
    policy = PolicyConfig("ssot", budget_tokens=50)
    service = _open(make_service, policy)
    service.record_user_message("s", "y" * 1000)
    with pytest.raises(BudgetExceeded) as caught:
        service.assemble("s")
    assert caught.value.kind == "budget_exceeded"
    assert caught.value.budget == 50 and caught.value.needed > 50
    assert "50" in str(caught.value)


def test_emergency_truncation_keeps_whole_turns_and_says_so(make_service: MakeService) -> None:
    policy = PolicyConfig("ssot", budget_tokens=300, emergency_truncation=True)
    service = _open(make_service, policy)
    for n in range(6):
        service.record_user_message("s", f"turn {n} " + "y" * 200)
        _call(service, f"c{n}", 40, text="working")
    context = service.assemble("s")
    assert service.prompt_tokens("s", context) <= 300
    first = context.chat[0]
    assert first.role == "user" and first.text.startswith("[context] ")
    assert "left out to fit the budget of 300 tokens" in first.text
    assert context.chat[1].role == "user" and context.chat[1].text.startswith("turn ")
    validate_openai(to_openai(context))
    validate_anthropic(to_anthropic(context))
    # Nothing left the store: the whole chat is still there.
    assert sum(len(t.messages) for t in service.state("s").turns) > len(context.chat)


@pytest.mark.parametrize("name", ["ssot", "inline", "relevance"])
def test_a_request_is_never_over_the_input_limit(make_service: MakeService, name: str) -> None:
    # Shedding, then collapsing, then leaving the oldest messages out of the request: whatever
    # the session, the model is never sent more than its input limit.
    from selfctx.application.policies import policy_by_name

    policy = policy_by_name(name, max_input_tokens=1000)
    service = _open(make_service, policy)
    for n in range(30):
        service.record_user_message("s", f"turn {n} " + "y" * 400) if n % 10 == 0 else None
        _call(service, f"c{n}", 600, text="working " + "z" * 300)
        context = service.assemble("s")
        assert service.prompt_tokens("s", context) <= 1000, n
        validate_openai(to_openai(context))
        validate_anthropic(to_anthropic(context))
    # one output larger than the limit on its own: shortened in the request, whole in the store
    _call(service, "huge", 20_000)
    context = service.assemble("s")
    assert service.prompt_tokens("s", context) <= 1000
    assert "characters left out to fit the model's input limit" in context.to_text()
    assert len(service.object("s", "huge").content or "") == 20_000
    validate_openai(to_openai(context))


@pytest.mark.timeout(60)  # it looped for ever before: a regression fails here, not at the end
def test_truncation_ends_when_a_message_weighs_by_its_calls_arguments() -> None:
    # an assistant message with one short line of text and a call whose arguments are long:
    # shortening its text cannot make it smaller, so truncation leaves it and stops
    from selfctx.application.usecases.assemble import _truncate
    from selfctx.domain.rendering import AssembledContext, RenderedMessage

    call = ToolCallRequest("c1", "write", {"content": "x " * 5000})
    chat = (
        RenderedMessage("user", "go"),
        RenderedMessage("assistant", "ok", (call,)),
        RenderedMessage("tool", "done", toolcall_id="c1"),
    )
    context = AssembledContext(system_prompt="s", metadata=(), chat=chat, active=())
    out = _truncate(context, lambda text: len(text) // 4, 100)
    assert any(m.tool_calls == (call,) and m.text == "ok" for m in out.chat)
