"""Seed 001's token-budget report and pre-request shedding (decision 0042), on both
stores. The estimate tokenizer counts ceil(UTF-8 bytes / 4): 400 ASCII characters are 100
tokens."""

from __future__ import annotations

from typing import Any

from selfctx.application.budget import DEFAULT_MAX_INPUT_TOKENS
from selfctx.application.settings import Settings
from selfctx.application.tokens import context_tokens
from selfctx.domain.chat import ContextNote, ToolCallRequest
from selfctx.domain.session.state import PolicyConfig
from tests.conftest import MakeService
from tests.support import FakeFileReader


def _open(make_service: MakeService, policy: PolicyConfig) -> Any:
    service = make_service(settings=Settings(policy=policy))
    service.start_session("s", "You are an agent.")
    service.record_user_message("s", "Do the task.")
    return service


def _notes(service: Any) -> list[str]:
    return [
        m.text for t in service.state("s").turns for m in t.messages if isinstance(m, ContextNote)
    ]


def test_the_report_counts_the_chat_and_the_prompt_against_their_limits(
    make_service: MakeService,
) -> None:
    service = _open(make_service, PolicyConfig("ssot"))
    service.record_assistant_message("s", "a" * 400)
    budget = service.budget("s")
    context = service.assemble("s")
    count = service.tokenizer.count
    assert (
        budget.history_tokens == sum(count(m.text) for m in context.chat) == 3 + 100
    )  # "Do the task." and 400 a
    assert budget.prompt_tokens == context_tokens(context, count)
    assert budget.max_input_tokens == DEFAULT_MAX_INPUT_TOKENS
    assert budget.max_history_tokens == DEFAULT_MAX_INPUT_TOKENS // 16  # seed 001's share
    assert budget.remaining == budget.max_input_tokens - budget.prompt_tokens
    assert (budget.needs_compaction, budget.compaction_enabled) == (False, False)


def test_the_chats_share_is_the_compaction_trigger_when_there_is_one(
    make_service: MakeService,
) -> None:
    policy = PolicyConfig("inline", max_input_tokens=10_000, compaction_trigger_tokens=150)
    service = _open(make_service, policy)
    budget = service.budget("s")
    assert (budget.max_input_tokens, budget.max_history_tokens) == (10_000, 150)
    assert not budget.needs_compaction
    service.record_assistant_message("s", "b" * 800)
    assert service.budget("s").needs_compaction  # 200 tokens of chat > 150
    service.start_session("hard", "", policy=PolicyConfig("ssot", budget_tokens=4_000))
    assert service.budget("hard").max_input_tokens == 4_000  # the budget, when no limit is named


def test_files_are_shed_largest_first_past_90_percent_of_the_input_limit(
    make_service: MakeService, files: FakeFileReader
) -> None:
    policy = PolicyConfig("ssot", max_input_tokens=2_000)
    service = _open(make_service, policy)
    for name, size in (("small", 400), ("big", 3_000), ("pinned", 4_800), ("mid", 2_000)):
        files.write(f"/w/{name}.txt", name[0] * size)
        service.index_file("s", f"/w/{name}.txt")
    pinned = service.object_id_for("/w/pinned.txt")
    service.pin("s", pinned)
    big, mid = service.object_id_for("/w/big.txt"), service.object_id_for("/w/mid.txt")

    context = service.assemble("s")
    total = service.prompt_tokens("s", context)
    assert total <= 0.9 * 2_000
    state = service.state("s")
    assert big not in state.active and mid not in state.active  # 750 then 500 tokens
    assert pinned in state.active and service.object_id_for("/w/small.txt") in state.active
    [note] = _notes(service)
    assert note.startswith("dropped 2 file(s) from the context, largest first")
    assert note.index(big) < note.index(mid)
    assert "of 2000" in note and "activate(id) brings any of them back" in note
    assert service.activate("s", big).ok  # one activate away (and shed again if still too big)


def test_under_the_inline_layout_the_outputs_that_show_files_are_shed(
    make_service: MakeService, files: FakeFileReader
) -> None:
    policy = PolicyConfig("inline", max_input_tokens=1_000)
    service = _open(make_service, policy)
    for n, size in enumerate((1_600, 2_400)):
        path = f"/w/f{n}.txt"
        files.write(path, str(n) * size)
        file_id = service.index_file("s", path).object_id
        call = ToolCallRequest(f"cat{n}", "bash", {"command": f"cat {path}"})
        service.record_assistant_message("s", "", [call])
        service.record_tool_call(
            "s", f"cat{n}", tool="bash", args={"command": f"cat {path}"},
            output=str(n) * size, file_refs=[file_id],
        )  # fmt: skip
    service.record_assistant_message("s", "", [ToolCallRequest("ls", "bash", {"c": "ls"})])
    service.record_tool_call("s", "ls", tool="bash", args={"c": "ls"}, output="x" * 1_200)
    service.assemble("s")
    state = service.state("s")
    assert "cat1" not in state.active  # the larger output showing a file
    assert "ls" in state.active  # an output that shows no file is not shed
    assert any(n.startswith("dropped 1 file(s)") for n in _notes(service))


def test_nothing_is_shed_without_an_input_limit(
    make_service: MakeService, files: FakeFileReader
) -> None:
    service = _open(make_service, PolicyConfig("ssot"))
    files.write("/w/huge.txt", "h" * 40_000)
    service.index_file("s", "/w/huge.txt")
    service.assemble("s")
    assert service.object_id_for("/w/huge.txt") in service.state("s").active
    assert _notes(service) == []
