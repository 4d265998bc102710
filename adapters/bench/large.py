"""``selfctx bench large``: the cost of large messages (docs/benchmarks.md).

A harness hands over lists of eight tool outputs of a few megabytes each, under the default
(``inline``) policy, whose token trigger counts the prompt. For each size the bench times the
ingestion of the list and the first and second assembly of the request, and reports the
characters the tokenizer encoded: each character once is the linear cost; a second assembly
encodes nothing. Outputs are distinct lines (no two pieces alike), so memoised counts of repeated
text do not flatter the figures.
"""

from __future__ import annotations

import hashlib
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.harness.session import HarnessSession
from selfctx.adapters.memory import MemoryStore
from selfctx.adapters.tokenizer import default_tokenizer
from selfctx.application.policies import policy_by_name

__all__ = ["SIZES_MB", "run_large"]

SIZES_MB = (1, 2, 4, 7)
"""Sizes of each of the eight outputs, in megabytes (7: the largest a user reported)."""


def output_text(n: int, size: int, salt: str = "") -> str:
    """``size`` characters of distinct lines (a digest per line), like a long log; ``salt``
    makes them differ from every other run's (the tokenizer's memo outlives a run)."""
    lines, total, i = [], 0, 0
    while total < size:
        digest = hashlib.sha256(f"{salt}:{n}:{i}".encode()).hexdigest()[:16]
        line = f"{n}:{i} step {digest} value = compute(x, y)  # status ok\n"
        lines.append(line)
        total += len(line)
        i += 1
    return "".join(lines)[:size]


def messages(count: int, size: int, salt: str = "") -> list[dict[str, Any]]:
    """A harness's list: a system prompt, then ``count`` calls with outputs of ``size`` chars."""
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."}]
    for n in range(count):
        function = {"name": "bash", "arguments": '{"command": "python run.py"}'}
        call = {"id": f"call_{n}", "type": "function", "function": function}
        out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        out.append(
            {"role": "tool", "tool_call_id": f"call_{n}", "content": output_text(n, size, salt)}
        )
    return out


def _one(count: int, size: int, salt: str) -> dict[str, float]:
    tokenizer = default_tokenizer()
    service = build_service(
        store=MemoryStore(), default_filesystem_id="bench-container", tokenizer=tokenizer
    )
    session = HarnessSession(service, "large", policy=policy_by_name("inline"))
    listed = messages(count, size, salt)
    encoded = getattr(tokenizer, "encoded_chars", 0)
    start = time.perf_counter()
    session.ingest(listed)
    ingested = time.perf_counter()
    session.request()
    first = time.perf_counter()
    after_first = getattr(tokenizer, "encoded_chars", 0)
    session.request()
    second = time.perf_counter()
    return {
        "ingest_s": ingested - start,
        "assemble_s": first - ingested,
        "assemble_again_s": second - first,
        "encoded_chars": after_first - encoded,
        "encoded_again_chars": getattr(tokenizer, "encoded_chars", 0) - after_first,
    }


def run_large(
    sizes_mb: Sequence[float] = SIZES_MB,
    count: int = 8,
    runs: int = 3,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Medians over ``runs`` for each size; ``chars`` is the list's total of output text."""
    rows = []
    for size_mb in sizes_mb:
        size = int(size_mb * 1_000_000)
        samples = []
        for run in range(runs):
            if progress is not None:
                progress(f"{count} x {size_mb} MB, run {run + 1}/{runs}")
            samples.append(_one(count, size, f"{size}/{run}/{time.time_ns()}"))
        row: dict[str, Any] = {"size_mb": size_mb, "count": count, "chars": count * size}
        for key in samples[0]:
            row[key] = round(statistics.median(s[key] for s in samples), 3)
        row["assemble_us_per_char"] = round(row["assemble_s"] / row["chars"] * 1e6, 4)
        row["ingest_us_per_char"] = round(row["ingest_s"] / row["chars"] * 1e6, 4)
        rows.append(row)
    return {"tokenizer": default_tokenizer().name, "runs": runs, "rows": rows}
