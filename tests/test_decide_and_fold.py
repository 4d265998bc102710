"""``decide_and_fold`` gives the state its events lead to, so the runner need not fold them again.

Every decision of a session that exercises the collapse window (the ssot policy) and one that does
not (``inline``) is checked against folding its events from scratch.
"""

from __future__ import annotations

from typing import Any

import pytest

import selfctx.application.runner as runner_module
from selfctx.domain.session.machine import decide_and_fold, fold
from selfctx.domain.session.state import PolicyConfig
from tests.conftest import MakeService
from tests.support import FakeFileReader


@pytest.mark.parametrize("policy", ["ssot", "inline", "relevance"])
def test_the_folded_state_is_what_folding_the_events_gives(
    policy: str,
    make_service: MakeService,
    files: FakeFileReader,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    checked: list[int] = []

    def checking(state: Any, command: Any) -> Any:
        events, after = decide_and_fold(state, command)
        assert after == fold(events, state)
        checked.append(len(events))
        return events, after

    monkeypatch.setattr(runner_module, "decide_and_fold", checking)
    service = make_service()
    service.start_session("s", "prompt", policy=PolicyConfig(name=policy))
    for n in range(4):
        files.write(f"/p/f{n}.py", f"print({n})\n")
    service.index_files("s", [f"/p/f{n}.py" for n in range(4)])
    for turn in range(6):
        service.record_user_message("s", f"turn {turn}")
        for call in range(3):
            service.record_tool_call(
                "s", f"tc-{turn}-{call}", tool="bash", args={"n": call}, output="x" * 50
            )
        service.deactivate("s", f"tc-{turn}-0")
    service.pin("s", "tc-5-1")
    assert len(checked) > 25
    # The window collapsed old tool outputs under the ssot policy (and only there).
    collapsed = "tc-0-1" not in service.state("s").active
    assert collapsed == (policy == "ssot")
