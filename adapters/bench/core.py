"""``selfctx bench core``: the cost of one realistic turn in sessions of growing size.

A session is first filled to N content objects the way agents fill them: turns of a user message
and five tool calls, some files read in full and some only discovered. Then each measured turn is
one assistant message requesting a tool call, the tool's result, and AssembleContext; its wall time
and the bytes the store received are recorded. Bytes are averaged over enough turns to include at
least two snapshots, so the figure is the amortised cost, snapshots included.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from selfctx.adapters.bench.stats import summary_ms
from selfctx.application.ports.store import ObjectStore
from selfctx.application.service import ContextService
from selfctx.domain.chat import ToolCallRequest

__all__ = ["SIZES", "fill_session", "measure_turns", "run_core", "turns_for_two_snapshots"]

SIZES = (100, 1_000, 10_000)
SESSION = "bench"
ROOT = "/bench/project"

_OUTPUT = "\n".join(
    f"line {i}: some realistic tool output text, a path/to/file.py:{i}" for i in range(30)
)
_FILE = "\n".join(f"def function_{i}(x):\n    return x * {i}\n" for i in range(60))


def _tool_turn(service: ContextService, call_id: str, n: int) -> None:
    args = {"command": f"grep -rn pattern_{n} src/"}
    service.record_assistant_message(
        SESSION, f"Looking for pattern {n}.", [ToolCallRequest(call_id, "bash", args)]
    )
    service.record_tool_call(SESSION, call_id, tool="bash", args=args, output=f"{n}\n{_OUTPUT}")


KEEP_ACTIVE_FILES = 5
"""Like a tidy agent, the filler deactivates read files once five newer ones are active."""


def fill_session(service: ContextService, size: int) -> None:
    """Start the session and fill it with ``size`` content objects (80% tool calls, 10% files
    read in full, 10% discovered)."""
    read: list[str] = []
    service.start_session(SESSION, "You are a coding agent working in /bench/project.")
    files = size // 5
    calls = size - files
    made_calls = made_files = 0
    turn = 0
    while made_calls < calls or made_files < files:
        turn += 1
        service.record_user_message(SESSION, f"Task step {turn}: continue.")
        for _ in range(5):
            if made_calls < calls:
                _tool_turn(service, f"setup_{made_calls}", made_calls)
                made_calls += 1
        if made_files < files:
            path = f"{ROOT}/src/module_{made_files}.py"
            if made_files % 2 == 0:
                result = service.index_file(
                    SESSION, path, content=f"# module {made_files}\n{_FILE}"
                )
                read.append(result.object_id)
                if len(read) > KEEP_ACTIVE_FILES:
                    service.deactivate(SESSION, read.pop(0))
            else:
                service.discover(SESSION, [path])
            made_files += 1


def measure_turns(
    service: ContextService, store_bytes: Callable[[], int], turns: int
) -> tuple[list[float], float]:
    """Run ``turns`` measured turns; returns per-turn seconds and bytes per turn."""
    service.record_user_message(SESSION, "Measured turns begin.")
    durations = []
    start_bytes = store_bytes()
    for n in range(turns):
        began = time.perf_counter()
        _tool_turn(service, f"measured_{n}", n)
        service.assemble(SESSION)
        durations.append(time.perf_counter() - began)
    return durations, (store_bytes() - start_bytes) / turns


def turns_for_two_snapshots(store: ObjectStore) -> int:
    """How many turns to measure so that at least two snapshots fall among them."""
    # Snapshot bytes ~ index ids + chat; log bytes per turn ~ 1.3 KB. Aim for >= 2 snapshot cycles.
    session = store.get(f"session:{SESSION}") or {}
    chat = store.get(f"chat:{SESSION}") or {}
    snapshot = len(str(session)) + len(str(chat))
    return max(300, int(2.5 * snapshot / 1300))


def run_core(
    make_service: Callable[[], tuple[ContextService, Callable[[], int]]],
    sizes: Sequence[int] = SIZES,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Measure every size; returns the JSON shape of ``selfctx bench core --json``."""
    per_turn: dict[str, Any] = {}
    bytes_per_turn: dict[str, float] = {}
    for size in sizes:
        service, store_bytes = make_service()
        progress(f"filling a session with {size} objects")
        fill_session(service, size)
        turns = turns_for_two_snapshots(service.store)
        progress(f"measuring {turns} turns at {size} objects")
        durations, per = measure_turns(service, store_bytes, turns)
        per_turn[str(size)] = summary_ms(durations)
        bytes_per_turn[str(size)] = round(per, 1)
    return {"per_turn_ms": per_turn, "bytes_per_turn": bytes_per_turn}
