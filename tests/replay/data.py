"""The recorded sessions the replay tests run, as test parameters (imported by the tests here).

The project's own recorded sessions (:data:`OWN_FILES`, shipped in the package) are always there,
so every replay test runs on a fresh clone alone. The development set adds to them when it is
found, through ``$SELFCTX_TRAJECTORIES`` or ``../shared/data/trajectories`` next to the project
root (read in place, never copied into the project).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from selfctx.adapters.cli import sample_session
from selfctx.adapters.harness.trajectories import (
    default_directory,
    load,
    trajectory_files,
)

OWN_FILES: list[Path] = [sample_session.OUTPUT]
"""Sessions the project recorded itself (``python -m selfctx.adapters.cli.sample_session``)."""
DIRECTORY = default_directory()
DEV_FILES: list[Path] = trajectory_files(DIRECTORY) if DIRECTORY else []
"""The development set's files (empty without it)."""
FILES: list[Path] = OWN_FILES + DEV_FILES


def _file_id(path: Path) -> str:
    return path.name if path in OWN_FILES else f"{path.parent.name}/{path.name}"


def file_params() -> list[Any]:
    return [pytest.param(f, id=_file_id(f)) for f in FILES]


def trajectory_params(names: set[str] | None = None) -> list[Any]:
    """One parameter per trajectory (files holding several give several)."""
    params = []
    for file in FILES:
        for trajectory in load(file):
            if names is None or trajectory.name in names:
                params.append(pytest.param(trajectory, id=trajectory.name))
    return params
