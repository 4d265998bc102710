"""The harness boundary under the ``inline`` policy (decision 0008): append-only requests."""

from __future__ import annotations

from selfctx.adapters.harness import HarnessSession, to_anthropic, validate_anthropic
from selfctx.domain.session.state import PolicyConfig
from tests.harness.conftest import (
    CWD,
    ROOTS,
    bash,
    make_service,
    mini,
    o_assistant,
    o_tool,
    o_user,
    open_harness,
    tc,
)

SMALL = PolicyConfig("inline", trigger_tokens=60, clear_at_least=1, keep_recent=1)
"""Collapses as soon as anything can: short tests exercise batches."""


def _harness(policy: PolicyConfig = SMALL) -> HarnessSession:
    return HarnessSession(make_service("inline"), "s1", cwd=CWD, roots=ROOTS, policy=policy)


def test_a_failed_call_is_an_anthropic_error_result_in_the_inline_layout() -> None:
    h = open_harness(make_service("inline"), fmt="openai")
    h.ingest([o_user("go"), o_assistant("", bash("c1", "false")), o_tool("c1", mini("", code=1))])
    request = to_anthropic(h.service.assemble("s1"))
    validate_anthropic(request)
    results = [b for m in request["messages"] for b in m["content"] if b["type"] == "tool_result"]
    assert [(b["tool_use_id"], b.get("is_error")) for b in results] == [(tc("c1"), True)]


def test_a_collapsed_listing_still_names_the_files_it_found() -> None:
    h = _harness()
    listing = "/testbed/a.py\n/testbed/b.py\n"
    output = mini(listing + "x" * 400)
    h.ingest(
        [
            o_user("look"),
            o_assistant("", bash("c1", "find /testbed -name '*.py'")),
            o_tool("c1", output),
            o_assistant("", bash("c2", "echo done")),
            o_tool("c2", mini("done\n")),
        ]
    )
    chat = h.service.assemble("s1").chat
    first = next(m for m in chat if m.toolcall_id == tc("c1"))
    assert first.text == (
        f"[#1 collapsed: bash ok, {len(output)} chars; files #2 /testbed/a.py, #3 /testbed/b.py]"
    )


def test_activate_appends_the_content_and_changes_nothing_shown_earlier() -> None:
    h = _harness()
    h.ingest(
        [
            o_user("look"),
            o_assistant("", bash("c1", "echo long")),
            o_tool("c1", mini("A" * 300 + "\n")),
            o_assistant("", bash("c2", "echo next")),
            o_tool("c2", mini("B\n")),
        ]
    )
    before = h.service.assemble("s1").chat
    assert before[2].text.startswith("[#1 collapsed")
    answer = h.handle("activate", {"id": "#1"})
    assert answer.ok
    assert answer.message == "[#1 output of bash (ok)]\n" + mini("A" * 300 + "\n")
    assert h.service.assemble("s1").chat[: len(before)] == before  # nothing earlier changed
