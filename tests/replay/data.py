"""The trajectories of the development set, as test parameters (imported by the tests here).

Found through ``$SELFCTX_TRAJECTORIES`` or ``../shared/data/trajectories`` next to the project
root (never copied into the project). When neither exists, every test that needs them is skipped
and says why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from selfctx.adapters.harness.trajectories import (
    DIRECTORY_ENV,
    Trajectory,
    default_directory,
    load,
    trajectory_files,
)

DIRECTORY = default_directory()
MISSING = (
    f"no trajectories: set ${DIRECTORY_ENV} or put the development set at "
    "../shared/data/trajectories next to the project root"
)
FILES: list[Path] = trajectory_files(DIRECTORY) if DIRECTORY else []


def file_params() -> list[Any]:
    if not FILES:
        return [pytest.param(None, marks=pytest.mark.skip(reason=MISSING), id="no-trajectories")]
    return [pytest.param(f, id=f"{f.parent.name}/{f.name}") for f in FILES]


def trajectory_params(names: set[str] | None = None) -> list[Any]:
    """One parameter per trajectory (files holding several give several)."""
    if not FILES:
        return [pytest.param(None, marks=pytest.mark.skip(reason=MISSING), id="no-trajectories")]
    params = []
    for file in FILES:
        for trajectory in load(file):
            if names is None or trajectory.name in names:
                params.append(pytest.param(trajectory, id=trajectory.name))
    return params


@pytest.fixture(scope="session")
def trajectories_dir() -> Path:
    if DIRECTORY is None:
        pytest.skip(MISSING)
    return DIRECTORY


def by_name(name: str) -> Trajectory:
    for file in FILES:
        for trajectory in load(file):
            if trajectory.name == name:
                return trajectory
    pytest.skip(MISSING)
