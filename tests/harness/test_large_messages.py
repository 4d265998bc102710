"""Large messages cost work linear in their size (docs/tokenizer.md).

The measure is the work itself, not time: the characters handed to tiktoken's encoder, and the
longest text handed to it at once (its byte-pair merge costs more than linear time on a long run
without a break). ``selfctx bench large`` prints the timings (docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from selfctx.adapters.bench.large import messages, output_text
from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.harness import HarnessSession
from selfctx.adapters.memory import MemoryStore
from selfctx.adapters.tokenizer import TiktokenTokenizer, TokenizerInstallFailed, install
from selfctx.adapters.tokenizer.exact import MAX_PIECE_CHARS
from selfctx.application.policies import policy_by_name


class CountingEncoding:
    """A tiktoken encoding that keeps the length of every text it is asked to encode."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.lengths: list[int] = []

    def encode_ordinary(self, text: str) -> list[int]:
        self.lengths.append(len(text))
        result: list[int] = self.inner.encode_ordinary(text)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.fixture
def encoding() -> Iterator[CountingEncoding]:
    try:
        install()  # a no-op when the project's set-up installed the rank files
    except TokenizerInstallFailed as exc:
        pytest.skip(f"rank files not installed and not fetchable here: {exc}")
    yield CountingEncoding(TiktokenTokenizer.installed("o200k_base").encoding)


def session(encoding: CountingEncoding) -> HarnessSession:
    # A tokenizer of its own (an empty memo) over the counting encoding.
    tokenizer = TiktokenTokenizer(encoding)  # type: ignore[arg-type]
    service = build_service(store=MemoryStore(), default_filesystem_id="c", tokenizer=tokenizer)
    return HarnessSession(service, "big", policy=policy_by_name("inline"))


def test_each_character_of_large_outputs_is_encoded_once(encoding: CountingEncoding) -> None:
    h = session(encoding)
    listed = messages(8, 200_000, "once")
    chars = sum(len(m["content"]) for m in listed if m["role"] == "tool")
    h.ingest(listed)
    h.request()
    encoded = sum(encoding.lengths)
    # Every output counted once (not once as its tool message and once as its content), plus
    # the small texts around them.
    assert chars <= encoded <= chars * 1.02, (encoded, chars)
    assert max(encoding.lengths) <= MAX_PIECE_CHARS
    h.request()
    assert sum(encoding.lengths) == encoded  # nothing is encoded twice
    print(f"\n8 x 200,000 chars: {encoded:,} characters encoded in {len(encoding.lengths)} calls")


@pytest.mark.parametrize("run", ["x", "=-", "QUJD"])
def test_a_long_run_without_a_break_is_encoded_in_bounded_pieces(
    encoding: CountingEncoding, run: str
) -> None:
    text = run * (1_000_000 // len(run))
    tokenizer = TiktokenTokenizer(encoding)  # type: ignore[arg-type]
    count = tokenizer.count(text)
    assert max(encoding.lengths) <= MAX_PIECE_CHARS
    whole = len(encoding.inner.encode_ordinary(text))
    assert abs(count - whole) <= len(text) // MAX_PIECE_CHARS  # a token at most per cut


def test_pieces_of_ordinary_text_count_exactly(encoding: CountingEncoding) -> None:
    root = Path(__file__).resolve().parents[2]
    sources = "\n".join(p.read_text() for p in sorted((root / "adapters").rglob("*.py")))
    logs = output_text(1, 300_000, "exact")
    tokenizer = TiktokenTokenizer(encoding)  # type: ignore[arg-type]
    for text in (sources, logs, sources + logs):
        assert tokenizer.count(text) == len(encoding.inner.encode_ordinary(text))
