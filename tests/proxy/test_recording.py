"""Recordings of client sessions: written as changes of the previous request, read back whole."""

from __future__ import annotations

from pathlib import Path

from selfctx.adapters.bench.cache import recordings
from selfctx.adapters.bench.recording import Recorded, read_recording, write_recording


def test_a_recording_reads_back_exactly(tmp_path: Path) -> None:
    requests = [
        Recorded(0.0, "anthropic", "/v1/messages", {"model": "m", "messages": [{"a": 1}]}),
        Recorded(
            1.5, "anthropic", "/v1/messages", {"model": "m", "messages": [{"a": 1}, {"b": 2}]}
        ),
        Recorded(2.0, "openai", "/v1/chat/completions", {"messages": [{"c": "\u2028é"}], "x": 1}),
        Recorded(2.5, "responses", "/v1/responses", {"input": [{"d": 4}], "instructions": "i"}),
        Recorded(3.0, "responses", "/v1/responses", {"input": "text", "stream": True}),
    ]
    path = tmp_path / "r.jsonl.xz"
    write_recording(path, {"client": "test"}, requests)
    back = read_recording(path)
    assert back.meta == {"client": "test"}
    assert list(back.requests) == requests


def test_the_shipped_recordings_are_small_and_long() -> None:
    shipped = recordings()
    names = {p.name.removesuffix(".jsonl.xz") for p in shipped}
    assert {"claude-code-28", "claude-code-60", "codex-28", "pi-28", "aider-28"} <= names
    for path in shipped:
        assert path.stat().st_size < 300_000
        recording = read_recording(path)
        assert len(recording.requests) >= 25
        assert recording.meta["client"] and recording.meta["version"]
