"""Embedding: a file the application reads or activates through the service is what the model
sees, under every policy, where that policy's layout shows it (the ssot layout's active
section; after the chat under the inline layouts, which otherwise show files through the tool
outputs that read them)."""

from __future__ import annotations

import pytest

from selfctx.adapters.harness import to_anthropic, to_openai, validate_anthropic, validate_openai
from selfctx.application.policies import POLICIES, policy_by_name
from selfctx.application.service import ContextService
from selfctx.application.settings import Settings
from selfctx.domain.chat import ToolCallRequest
from selfctx.domain.objects import FileView
from selfctx.domain.session.state import PolicyConfig
from tests.conftest import MakeService
from tests.support import FakeFileReader

CONTENT = "def answer():\n    return 42  # the one line that matters\n"


def _service(
    make_service: MakeService, files: FakeFileReader, policy: PolicyConfig
) -> ContextService:
    files.write("/w/a.py", CONTENT)
    service = make_service(settings=Settings(policy=policy))
    service.start_session("s", "You are an agent.")
    service.record_user_message("s", "Fix a.py.")
    return service


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_a_file_read_through_the_service_is_visible(
    make_service: MakeService, files: FakeFileReader, name: str
) -> None:
    service = _service(make_service, files, policy_by_name(name))
    result = service.index_file("s", "/w/a.py")
    context = service.assemble("s")
    assert CONTENT in context.to_text()
    assert [b.object_id for b in context.active] == [result.object_id]
    # the provider requests carry it, and they are valid
    validate_openai(to_openai(context))
    validate_anthropic(to_anthropic(context))
    assert any(CONTENT in str(m.get("content")) for m in to_openai(context)["messages"])


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_a_file_activated_through_the_service_is_visible_until_deactivated(
    make_service: MakeService, files: FakeFileReader, name: str
) -> None:
    service = _service(make_service, files, policy_by_name(name))
    file_id = service.object_id_for("/w/a.py")
    service.discover("s", ["/w/a.py"])
    assert CONTENT not in service.assemble("s").to_text()  # listed, not read
    answer = service.activate("s", file_id)
    assert answer.ok and "is active" in answer.message
    assert CONTENT in service.assemble("s").to_text()
    service.deactivate("s", file_id)
    assert CONTENT not in service.assemble("s").to_text()


@pytest.mark.parametrize("name", ["inline", "relevance"])
def test_a_file_a_tool_output_showed_is_not_shown_twice(
    make_service: MakeService, files: FakeFileReader, name: str
) -> None:
    service = _service(make_service, files, policy_by_name(name))
    file_id = service.index_file("s", "/w/a.py").object_id
    call = ToolCallRequest("c1", "bash", {"command": "cat a.py"})
    service.record_assistant_message("s", "Reading it.", [call])
    service.record_tool_call(
        "s",
        "c1",
        tool="bash",
        args={"command": "cat a.py"},
        output=CONTENT,
        file_refs=[file_id],
        file_views=[FileView(file_id, "read")],
    )
    context = service.assemble("s")
    assert context.to_text().count(CONTENT) == 1  # in the tool output, not after the chat too
    assert context.active == ()


def test_only_a_budget_takes_a_file_shown_after_the_chat(
    make_service: MakeService, files: FakeFileReader
) -> None:
    files.write("/w/big.py", "x = 1\n" * 2000)
    policy = policy_by_name("relevance", budget_tokens=2000, emergency_truncation=True)
    service = _service(make_service, files, policy)
    big = service.index_file("s", "/w/big.py").object_id
    service.index_file("s", "/w/a.py")
    context = service.assemble("s")
    assert big not in [b.object_id for b in context.active]  # the budget forced it out
    assert CONTENT in context.to_text()  # what fits stays


@pytest.mark.parametrize("name", ["inline", "relevance"])
def test_a_file_a_tool_call_wrote_is_not_shown_after_the_chat(
    make_service: MakeService, files: FakeFileReader, name: str
) -> None:
    service = _service(make_service, files, policy_by_name(name))
    command = "cat > a.py <<'EOF'\n" + CONTENT + "EOF"
    service.record_assistant_message("s", "Writing it.", [ToolCallRequest("c1", "bash", {})])
    file_id = service.index_file("s", "/w/a.py", CONTENT, wrote=True).object_id
    service.record_tool_call(
        "s",
        "c1",
        tool="bash",
        args={"command": command},
        output="",
        file_views=[FileView(file_id, "change")],
    )
    assert service.assemble("s").active == ()  # the agent wrote it: its command shows it
