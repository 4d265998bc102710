"""Compaction of the chat's older turns (decision 0043).

The pure rules first (transcript format, answer parsing, the two thresholds and the three cases),
then the extractive summarizer, then compaction through the service on both stores: nothing is
erased, the summary is a versioned object, every compacted message stays retrievable.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from selfctx.adapters.harness.tools import handle_context_tool
from selfctx.adapters.summarizer import ExtractiveSummarizer
from selfctx.adapters.tokenizer import EstimateTokenizer
from selfctx.application.ports.summarizer import Excerpt, Summarizer, SummarizerError
from selfctx.application.runner import SessionRunner
from selfctx.application.service import ContextService
from selfctx.application.settings import Settings
from selfctx.domain.chat import ToolCallRequest
from selfctx.domain.compaction import (
    SAFE_BOUNDARY,
    TopicBoundary,
    format_transcript,
    parse_boundary,
    plan_compaction,
    verbatim_start,
)
from selfctx.domain.mounts import MountTable
from selfctx.domain.session.state import PolicyConfig
from tests.conftest import MakeService
from tests.support import CountingClock, CountingIds, FakeFileReader, WrappedStore

# -- the pure rules ---------------------------------------------------------------------------


def test_a_transcript_is_numbered_role_and_content_cut_at_max_chars() -> None:
    text = format_transcript([(0, "user", "fix  the\npa"), (1, "assistant", "x" * 30)], 10)
    assert text == "[0] USER: fix the pa\n[1] ASSISTANT: xxxxxxxxxx…"


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (
            '{"boundary_index": 3, "boundary_reason": "new task", "confidence": 0.8,'
            ' "summary": "s"}',
            TopicBoundary(3, "new task", 0.8, "s"),
        ),
        ('{"boundary_index": null, "confidence": 0.9}', TopicBoundary(None, "", 0.0, "")),
        (
            'Here:\n```json\n{"boundary_index": 2, "confidence": 0.6}\n```\nDone.',
            TopicBoundary(2, "", 0.6, ""),
        ),
        (
            'I think {"boundary_index": 4, "confidence": 1.7, "boundary_reason": "x"} fits',
            TopicBoundary(4, "x", 1.0, ""),
        ),
        (
            'broken {"boundary_index": 2, "boundary_reason": "switch", "confidence": 0.7, ',
            TopicBoundary(2, "switch", 0.7, ""),
        ),
        ('{"boundary_index": 99, "confidence": 0.9}', TopicBoundary(None, "", 0.0, "")),
        ('{"boundary_index": true, "confidence": 0.9}', TopicBoundary(None, "", 0.0, "")),
        ("no idea, sorry", SAFE_BOUNDARY),
        ("", SAFE_BOUNDARY),
        (None, SAFE_BOUNDARY),
        ("[1, 2, 3]", SAFE_BOUNDARY),
    ],
)
def test_boundary_answers_parse_or_fall_back_to_the_safe_default(
    answer: Any, expected: TopicBoundary
) -> None:
    assert parse_boundary(answer, [0, 1, 2, 3, 4]) == expected


def test_the_verbatim_window_keeps_the_newest_turns_and_at_least_min_exchanges() -> None:
    # turn 0 (preamble) and turns 1..5
    sizes = [5, 100, 100, 100, 100, 100]
    assert verbatim_start(sizes, 250, 1) == 4  # turns 4 and 5 fit in 250
    assert verbatim_start(sizes, 250, 3) == 3  # but three exchanges are kept
    assert verbatim_start(sizes, 10, 1) == 5  # the last turn always stays
    assert verbatim_start(sizes, 10_000, 1) == 0  # everything fits


def test_the_three_cases() -> None:
    sizes = [0, 100, 100, 100, 100, 100]
    kwargs: dict[str, Any] = {"window": 250, "min_exchanges": 2}
    none = plan_compaction(sizes, 4, None, SAFE_BOUNDARY, **kwargs)
    assert none.case == "none"  # the window starts at turn 4: nothing more to compact
    summarize = plan_compaction(sizes, 0, None, SAFE_BOUNDARY, **kwargs)
    assert (summarize.case, summarize.upto) == ("summarize", 4)
    confident_late = TopicBoundary(7, "now the lexer", 0.9)
    truncate = plan_compaction(sizes, 0, 5, confident_late, **kwargs)
    assert (truncate.case, truncate.upto, truncate.reason) == ("truncate", 4, "now the lexer")
    # (a boundary at turn 5 would leave one exchange: the truncation stops at the floor, 4)
    confident_early = TopicBoundary(2, "x", 0.9)
    assert plan_compaction(sizes, 0, 2, confident_early, **kwargs).case == "summarize"
    unsure_late = TopicBoundary(7, "x", 0.3)
    assert plan_compaction(sizes, 0, 5, unsure_late, **kwargs).case == "summarize"
    window_boundary = plan_compaction(
        [0, 100, 100, 100, 100, 100, 100], 0, 5, TopicBoundary(1, "x", 0.5), **kwargs
    )
    assert (window_boundary.case, window_boundary.upto) == ("truncate", 5)


# -- the extractive summarizer ----------------------------------------------------------------


def _excerpts(*items: tuple[str, str]) -> list[Excerpt]:
    return [Excerpt(n, role, text) for n, (role, text) in enumerate(items)]


def test_the_extractive_boundary_is_an_announced_switch() -> None:
    summarizer = ExtractiveSummarizer()
    transcript = _excerpts(
        ("user", "Fix the parser."),
        ("assistant", "Done."),
        ("user", "Great. Now let's work on the lexer."),
        ("assistant", "Looking at lexer.py"),
    )
    boundary = summarizer.detect_boundary(transcript)
    assert (boundary.index, boundary.confidence) == (2, 0.6)
    assert "Now let's work on the lexer" in boundary.reason
    assert summarizer.detect_boundary(transcript[:2]) == SAFE_BOUNDARY


def test_the_extractive_summary_is_deterministic_and_within_budget() -> None:
    summarizer = ExtractiveSummarizer()
    transcript = _excerpts(
        ("user", "Fix evaluate('2 - 3 - 4'). It returns 3."),
        ("assistant", "Let me read the parser. Then I will run the tests."),
        ("tool", "bash (fail): FAILED test_minus\nAssertionError: 3 != -5"),
        *[("user", f"And then step {n} of a long session, with many words.") for n in range(40)],
    )
    summary = summarizer.summarize(transcript, "", 100)
    assert summary == summarizer.summarize(transcript, "", 100)
    assert len(summary) <= 400
    lines = summary.splitlines()
    assert lines[0] == "- user: Fix evaluate('2 - 3 - 4')."  # the task stays
    assert lines[-1] == "- user: And then step 39 of a long session, with many words."
    whole = summarizer.summarize(transcript[:3], "earlier: the build", 500)
    assert whole.splitlines() == [
        "earlier: the build",
        "- user: Fix evaluate('2 - 3 - 4').",
        "  assistant: Let me read the parser.",
        "  tool: bash (fail): FAILED test_minus — AssertionError: 3 != -5",
    ]


# -- through the service ----------------------------------------------------------------------

POLICY = PolicyConfig(
    "inline",
    compaction_trigger_tokens=400,
    verbatim_window_tokens=150,
    min_verbatim_exchanges=2,
    summary_budget_tokens=120,
)


def _turn(service: Any, sid: str, n: int, topic: str = "module") -> None:
    service.record_user_message(sid, f"Look at {topic} {n}: what does function_{n} do?")
    call = ToolCallRequest(f"c{n}", "bash", {"command": f"cat m{n}.py"})
    service.record_assistant_message(sid, f"Function_{n} parses input {n}.", [call])
    output = f"def function_{n}(x):\n    return parse(x)  # {n}\n" * 5
    service.record_tool_call(
        sid, f"c{n}", tool="bash", args={"command": f"cat m{n}.py"}, output=output
    )


def test_a_long_chat_is_compacted_and_nothing_is_lost(
    make_service: MakeService, store: WrappedStore
) -> None:
    service = make_service(settings=Settings(policy=POLICY))
    service.start_session("s", "sys")
    positions = []
    for n in range(1, 7):
        _turn(service, "s", n)
        positions.append(service.log_position("s"))
        service.assemble("s")
    state = service.state("s")
    assert state.compacted >= 2
    assert len(state.turns) == 7  # every turn is still in the session
    context = service.assemble("s")
    head = context.chat[0].text
    assert head.startswith(f"[context] turns up to {state.compacted - 1} are compacted")
    assert "- user: Look at module 1: what does function_1 do?" in head
    assert all("Look at module 1" not in m.text for m in context.chat[1:])
    assert service.budget("s").history_tokens <= 400 + 120  # the chat is back near its share

    # The summary is a versioned object: one version per compaction.
    versions = service.history("summary:s")
    assert versions and versions[-1].document["upto"] == state.compacted
    assert versions[-1].document["content"] == state.summary
    assert [v.document["case"] for v in versions] == ["summarize"] * len(versions)

    # Every compacted message stays retrievable: activate, search, the past context.
    shown = handle_context_tool(service, "s", "activate", {"id": "summary"})
    assert shown.ok and "[turn 1 user] Look at module 1: what does function_1 do?" in shown.message
    one = handle_context_tool(service, "s", "activate", {"id": "turn:1"})
    assert one.message.startswith("[turns 1 to 1, verbatim]")
    assert "#" in handle_context_tool(service, "s", "activate", {"id": "c1"}).message
    assert [h.turn for h in service.search("function_1 do", session_id="s")] == [1]
    past = service.context_at("s", positions[0])
    assert "Look at module 1: what does function_1 do?" in past.chat[0].text

    # The log (and a snapshot) rebuild the same state.
    runner = SessionRunner(store, CountingClock(), CountingIds())
    assert runner.load("s").state == state
    assert service.context_at("s", service.log_position("s")) == service.assemble("s")


def test_a_confident_topic_switch_truncates(make_service: MakeService) -> None:
    service = make_service(settings=Settings(policy=POLICY))
    service.start_session("s", "sys")
    for n in range(1, 4):
        _turn(service, "s", n)
    service.record_user_message("s", "Forget that. Now let's work on the lexer instead.")
    service.record_assistant_message("s", "Reading lexer.py.")
    _turn(service, "s", 5, topic="lexer")
    report = service.compact("s")
    assert report is not None and report.case == "truncate"
    assert report.upto == 4  # the switch, and the two exchanges from it on, stay
    assert report.summary.startswith("(an earlier topic, left out without a summary:")
    assert "Now let's work on the lexer" in report.summary


def test_a_compaction_that_would_not_pay_for_its_cache_break_is_not_made(
    make_service: MakeService,
) -> None:
    policy = PolicyConfig(
        "inline", compaction_trigger_tokens=400, verbatim_window_tokens=150, clear_at_least=5_000
    )
    service = make_service(settings=Settings(policy=policy))
    service.start_session("s", "sys")
    for n in range(1, 7):
        _turn(service, "s", n)
        service.assemble("s")
    assert service.state("s").compacted == 0
    assert service.budget("s").needs_compaction  # over its share, but not worth a break yet


class _Failing(Summarizer):
    """A summarizer whose model is down: every call fails."""

    name = "failing"

    def __init__(self) -> None:
        self.calls = 0

    def detect_boundary(self, transcript: Sequence[Excerpt]) -> TopicBoundary:
        self.calls += 1
        raise SummarizerError("the model is down")

    def summarize(self, transcript: Sequence[Excerpt], previous: str, budget_tokens: int) -> str:
        self.calls += 1
        raise SummarizerError("the model is down")


def test_a_failing_summarizer_falls_back_to_safe_defaults_and_the_extractive_summary(
    store: WrappedStore, files: FakeFileReader, host_id: str
) -> None:
    failing = _Failing()
    service = ContextService(
        store=store,
        clock=CountingClock(),
        ids=CountingIds(),
        files=files,
        mounts=MountTable(host_id),
        tokenizer=EstimateTokenizer(),
        settings=Settings(policy=POLICY),
        summarizer=failing,
        fallback_summarizer=ExtractiveSummarizer(),
    )
    service.start_session("s", "sys")
    for n in range(1, 5):
        _turn(service, "s", n)
    service.record_user_message("s", "Now let's work on the lexer.")  # a switch it cannot see
    report = service.compact("s")
    assert failing.calls == 2  # it was asked, and failed, twice
    assert report is not None and report.case == "summarize"  # no boundary: summarize
    assert report.summary.startswith("- user: Look at module 1")  # the extractive summary


def test_a_rollback_restores_the_compaction_of_its_checkpoint(make_service: MakeService) -> None:
    service = make_service(settings=Settings(policy=POLICY))
    service.start_session("s", "sys")
    for n in range(1, 3):
        _turn(service, "s", n)
    service.checkpoint("s", "before")
    before = service.assemble("s")
    for n in range(3, 7):
        _turn(service, "s", n)
        service.assemble("s")
    assert service.state("s").compacted
    service.rollback("s", "before")
    assert (service.state("s").compacted, service.state("s").summary) == (0, "")
    assert service.assemble("s") == before


def test_a_rollback_to_a_checkpoint_taken_after_a_compaction_keeps_that_compaction(
    make_service: MakeService,
) -> None:
    """(The session state machine found this: a rollback target without its compaction.)"""
    service = make_service(settings=Settings(policy=POLICY))
    service.start_session("s", "sys")
    for n in range(1, 5):
        _turn(service, "s", n)
    assert service.compact("s") is not None
    compaction = (service.state("s").compacted, service.state("s").summary)
    service.checkpoint("s", "compacted")
    context = service.assemble("s")
    for n in range(5, 8):
        _turn(service, "s", n)
    assert service.compact("s") is not None
    service.rollback("s", "compacted")
    assert (service.state("s").compacted, service.state("s").summary) == compaction
    assert service.assemble("s") == context
