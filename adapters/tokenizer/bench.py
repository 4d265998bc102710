"""Throughput of the tokenizers on real text, for ``selfctx tokenizer bench``.

Figures are printed, never asserted: tests check behaviour, benchmarks measure speed.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import attrs

from selfctx.application.ports.tokenizer import Tokenizer

from .encodings import spec_for
from .estimate import EstimateTokenizer
from .exact import TiktokenTokenizer, build_encoding, read_rank_file


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def load_texts(paths: Iterable[Path]) -> list[str]:
    """The texts found under ``paths``: every string in JSON and JSON-lines files (the messages
    and tool outputs of a trajectory, unescaped), the whole content of any other file."""
    texts: list[str] = []
    files = sorted(f for p in paths for f in ([p] if p.is_file() else p.rglob("*")) if f.is_file())
    for file in files:
        raw = file.read_text(encoding="utf-8", errors="replace")
        try:
            texts.extend(_strings(json.loads(raw)))
            continue
        except ValueError:
            pass
        try:
            for line in raw.splitlines():
                if line.strip():
                    texts.extend(_strings(json.loads(line)))
        except ValueError:
            texts.append(raw)
    return texts


@attrs.frozen
class Throughput:
    """One tokenizer's speed over a corpus: the median of ``runs`` timed passes."""

    tokenizer: str
    """The tokenizer's name, plus what was measured (cold or memoised)."""
    tokens: int
    """Tokens counted in one pass."""
    seconds: float
    """Median wall time of one pass."""
    megabytes: float
    """UTF-8 size of the corpus, in MB (10^6 bytes)."""
    runs: int
    """Number of timed passes."""

    @property
    def tokens_per_second(self) -> float:
        """Tokens counted per second."""
        return self.tokens / self.seconds if self.seconds else float("inf")

    @property
    def megabytes_per_second(self) -> float:
        """MB of UTF-8 text counted per second."""
        return self.megabytes / self.seconds if self.seconds else float("inf")


def measure(label: str, tokenizer: Tokenizer, texts: Sequence[str], runs: int) -> Throughput:
    """Time ``runs`` passes of ``tokenizer.count`` over ``texts``."""
    megabytes = sum(len(t.encode("utf-8", "surrogatepass")) for t in texts) / 1e6
    timings: list[float] = []
    tokens = 0
    for _ in range(runs):
        started = time.perf_counter()
        tokens = sum(tokenizer.count(t) for t in texts)
        timings.append(time.perf_counter() - started)
    return Throughput(label, tokens, statistics.median(timings), megabytes, runs)


@attrs.frozen
class Report:
    """Everything ``selfctx tokenizer bench`` prints."""

    texts: int
    """Number of strings in the corpus."""
    characters: int
    """Their total length in characters."""
    load_seconds: float
    """Median time to verify the rank file and build the encoding."""
    results: tuple[Throughput, ...]
    """Exact on one joined text, exact per string without and with the memo, the estimate."""
    estimate_ratio: float
    """Estimated tokens divided by exact tokens over the whole corpus."""


def run(paths: Iterable[Path], encoding: str, directory: Path, runs: int) -> Report:
    """Measure load time and throughput of the exact tokenizer (without and with its memo) and
    of the estimate over the texts under ``paths``."""
    spec = spec_for(encoding)
    texts = load_texts(paths)
    loads: list[float] = []
    built = None
    for _ in range(max(1, min(runs, 3))):
        started = time.perf_counter()
        built = build_encoding(read_rank_file(directory / spec.file_name, spec), spec)
        loads.append(time.perf_counter() - started)
    assert built is not None
    plain = TiktokenTokenizer(built, cache_entries=0)
    whole = measure(f"tiktoken:{encoding} (one joined text)", plain, ["\n".join(texts)], runs)
    cold = measure(f"tiktoken:{encoding} (per string, no memo)", plain, texts, runs)
    memo = TiktokenTokenizer(built)
    for text in texts:
        memo.count(text)
    warm = measure(f"tiktoken:{encoding} (per string, memo warm)", memo, texts, runs)
    estimate = measure(EstimateTokenizer.name, EstimateTokenizer(), texts, runs)
    return Report(
        texts=len(texts),
        characters=sum(map(len, texts)),
        load_seconds=statistics.median(loads),
        results=(whole, cold, warm, estimate),
        estimate_ratio=estimate.tokens / cold.tokens if cold.tokens else float("nan"),
    )
