"""The distribution installs under one namespace, ``selfctx``, whatever else is installed.

The design card's folders (``domain/``, ``application/``, ``adapters/``, ``contracts/``) sit at the
top of the source tree; ``pyproject.toml`` maps them to ``selfctx.domain`` and so on. PyPI has
distributions whose top-level packages are called ``adapters`` (AdapterHub), ``domain`` and
``contracts`` (PyContracts): installed as top-level packages, ours would be shadowed by theirs or
merged with them (decision 0019).
"""

from __future__ import annotations

import os
import subprocess
import tomllib
import venv
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Dists

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("domain", "application", "adapters", "contracts")
CLASHING = ("adapters==1.3.0", "domain==0.1.4", "PyContracts==1.8.12")
"""Distributions whose top-level packages have our folders' names (pinned: the test needs their
files where ours would have gone, not their behaviour)."""


def _pyproject() -> dict[str, Any]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


DATA_FOLDERS = (
    "xtdb",
    "adapters/pi",
    "adapters/cli/sample",
    "adapters/bench/recordings",
    "adapters/ui/static",
)
"""Folders installed as package data: the XTDB node's project, the Pi extension, the demo's
sample project, the recorded client sessions of ``bench cache``, the inspector's assets."""
NOT_INSTALLED = {"node_modules", "target", "cache", "__pycache__"}


def _data_packages() -> set[str]:
    """Every folder of :data:`DATA_FOLDERS` that holds a file, as the package it installs as."""
    found = set()
    for folder in DATA_FOLDERS:
        for path in (ROOT / folder).rglob("*"):
            parts = path.relative_to(ROOT).parts
            if path.is_file() and not NOT_INSTALLED & set(parts):
                found.add(".".join(("selfctx", *path.parent.relative_to(ROOT).parts)))
    return found


def test_every_package_of_the_tree_is_listed_under_the_namespace() -> None:
    setuptools = _pyproject()["tool"]["setuptools"]
    assert setuptools["package-dir"] == {
        "selfctx": "adapters/api",  # the public API is the package's __init__ (decision 0060)
        **{f"selfctx.{d}": d for d in FOLDERS},
        "selfctx.xtdb": "xtdb",
    }
    in_tree = {
        "selfctx." + ".".join(init.parent.relative_to(ROOT).parts)
        for folder in FOLDERS
        for init in (ROOT / folder).rglob("__init__.py")
        if "sample" not in init.relative_to(ROOT).parts  # the demo's sample project: data
        and init.parent != ROOT / "adapters" / "api"  # installed as selfctx itself
    }
    assert sorted(setuptools["packages"]) == sorted({"selfctx", *in_tree, *_data_packages()})


def test_no_module_imports_a_top_level_name_of_ours() -> None:
    """Every import of the project's own code goes through the namespace."""
    offenders = []
    for folder in (*FOLDERS, "tests"):
        for path in (ROOT / folder).rglob("*.py"):
            if "sample" in path.relative_to(ROOT).parts:
                continue
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                words = line.split()
                if len(words) >= 2 and words[0] in ("import", "from"):
                    top = words[1].split(".")[0]
                    if top in FOLDERS:
                        offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []


def _run(
    *args: str | os.PathLike[str], cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
def test_the_wheel_works_next_to_distributions_that_clash_with_its_folders(
    tmp_path: Path, dists: Dists
) -> None:
    """Install the wheel in a fresh virtual environment after AdapterHub, ``domain`` and
    PyContracts (their files only: ``--no-deps``), then run the command line."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    theirs = _run(python, "-m", "pip", "install", "-q", "--no-deps", *CLASHING)
    assert theirs.returncode == 0, theirs.stderr
    ours = _run(python, "-m", "pip", "install", "-q", dists.wheel)
    assert ours.returncode == 0, ours.stderr

    site = Path(
        _run(
            python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"
        ).stdout.strip()
    )
    for name in ("adapters", "domain", "contracts"):  # the clash is real: their packages are there
        assert (site / name / "__init__.py").is_file(), name
    assert (site / "selfctx" / "adapters" / "cli" / "main.py").is_file()
    for asset in ("ui.js", "ui.css"):  # the inspector's script and styles are in the wheel
        assert (site / "selfctx" / "adapters" / "ui" / "static" / asset).is_file(), asset

    selfctx = env_dir / "bin" / "selfctx"
    helped = _run(selfctx, "--help", cwd=tmp_path)
    assert helped.returncode == 0, helped.stderr
    assert "replay" in helped.stdout
    sample = site / "selfctx" / "adapters" / "cli" / "sample_session.json"
    replayed = _run(selfctx, "replay", sample, cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stderr
    assert "total: naive" in replayed.stdout
