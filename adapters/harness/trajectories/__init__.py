"""Recorded agent sessions (mini-swe-agent, SWE-agent >= 1.0, OpenHands, the project's own
format) converted to one OpenAI message stream with its model calls: the replay's input.

``load(path)`` reads a file and returns its trajectories (an OpenHands ``.jsonl`` holds one per
line); ``trajectory_files(directory)`` lists the files a directory holds; ``default_directory()``
finds the development set (``$SELFCTX_TRAJECTORIES``, else ``../shared/data/trajectories`` next to
the project root) without ever copying it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from selfctx.adapters.harness.trajectories.formats import (
    OWN_FORMAT,
    from_message_list,
    from_mini_swe_agent,
    from_openai_messages,
    from_swe_agent,
    from_swe_agent_0,
)
from selfctx.adapters.harness.trajectories.model import ModelCall, Trajectory, TrajectoryError
from selfctx.adapters.harness.trajectories.openhands import from_openhands

__all__ = [
    "DIRECTORY_ENV",
    "OWN_FORMAT",
    "ModelCall",
    "Trajectory",
    "TrajectoryError",
    "convert",
    "default_directory",
    "load",
    "trajectory_files",
]

DIRECTORY_ENV = "SELFCTX_TRAJECTORIES"
_SUFFIXES = (".traj.json", ".traj", ".jsonl", ".json")


def _stem(path: Path) -> str:
    name = path.name
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def convert(data: Any, name: str, source: str = "<data>") -> Trajectory:
    """Convert one trajectory object, recognising its format from its keys."""
    return _convert(data, name, source).with_unique_call_ids()


def _convert(data: Any, name: str, source: str) -> Trajectory:
    if isinstance(data, list):  # a bare message list (mini-swe-agent's own test trajectories)
        return from_message_list(data, name, source)
    if not isinstance(data, Mapping):
        raise TrajectoryError(source, "a trajectory must be a JSON object or a message list")
    if data.get("format") == OWN_FORMAT:
        return from_openai_messages(data, name, source)
    if str(data.get("trajectory_format", "")).startswith("mini-swe-agent") or (
        isinstance(data.get("messages"), list) and "info" in data
    ):
        return from_mini_swe_agent(data, name, source)
    if isinstance(data.get("history"), list) and data["history"]:
        first = data["history"][0]
        if isinstance(first, Mapping) and "role" in first:
            if any(isinstance(m, Mapping) and "tool_calls" in m for m in data["history"]):
                return from_swe_agent(data, name, source)
            return from_swe_agent_0(data, name, source)
        return from_openhands(data, name, source)
    raise TrajectoryError(
        source, "not a mini-swe-agent, SWE-agent, OpenHands or openai-messages trajectory"
    )


def load(path: str | os.PathLike[str]) -> list[Trajectory]:
    """Every trajectory in ``path``, in file order."""
    file = Path(path)
    source = str(file)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TrajectoryError(source, f"cannot be read: {exc}") from exc
    stem = _stem(file)
    try:
        if file.name.endswith(".jsonl"):
            lines = [line for line in text.splitlines() if line.strip()]
            if len(lines) == 1:
                return [convert(json.loads(lines[0]), stem, source)]
            return [
                convert(json.loads(line), f"{stem}#{n}", source) for n, line in enumerate(lines, 1)
            ]
        return [convert(json.loads(text), stem, source)]
    except json.JSONDecodeError as exc:
        raise TrajectoryError(source, f"invalid JSON: {exc}") from exc


def trajectory_files(directory: str | os.PathLike[str]) -> list[Path]:
    """Trajectory files under ``directory`` (recursively, sorted; README and dot files skipped)."""
    root = Path(directory)
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and p.name.endswith(_SUFFIXES) and not p.name.startswith(".")
    )


def default_directory() -> Path | None:
    """The development set: ``$SELFCTX_TRAJECTORIES`` if set, else ``../shared/data/
    trajectories`` relative to the project root; None when it does not exist."""
    from selfctx.adapters.config import setting

    configured = setting("bench.trajectories")
    if configured:
        path = Path(configured)
    else:
        path = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "trajectories"
    return path if path.is_dir() else None
