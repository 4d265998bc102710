"""The distribution installs under one namespace, ``selfctx``, whatever else is installed.

The design card's folders (``domain/``, ``application/``, ``adapters/``, ``contracts/``) sit at the
top of the source tree; ``pyproject.toml`` maps them to ``selfctx.domain`` and so on. PyPI has
distributions whose top-level packages are called ``adapters`` (AdapterHub), ``domain`` and
``contracts`` (PyContracts): installed as top-level packages, ours would be shadowed by theirs or
merged with them (decision 0019).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("domain", "application", "adapters", "contracts")
CLASHING = ("adapters==1.3.0", "domain==0.1.4", "PyContracts==1.8.12")
"""Distributions whose top-level packages have our folders' names (pinned: the test needs their
files where ours would have gone, not their behaviour)."""


def _pyproject() -> dict[str, Any]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def test_every_package_of_the_tree_is_listed_under_the_namespace() -> None:
    setuptools = _pyproject()["tool"]["setuptools"]
    assert setuptools["package-dir"] == {f"selfctx.{d}": d for d in FOLDERS}
    in_tree = {
        "selfctx." + ".".join(init.parent.relative_to(ROOT).parts)
        for folder in FOLDERS
        for init in (ROOT / folder).rglob("__init__.py")
        if "sample" not in init.relative_to(ROOT).parts  # the demo's sample project: data
    }
    assert sorted(setuptools["packages"]) == sorted(in_tree)


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
    tmp_path: Path,
) -> None:
    """Build the wheel, install it in a fresh virtual environment after AdapterHub, ``domain``
    and PyContracts (their files only: ``--no-deps``), then run the command line."""
    source = tmp_path / "source"  # a copy: building in place would leave build/ in the tree
    source.mkdir()
    for name in ("pyproject.toml", "README.md", *FOLDERS):
        if (ROOT / name).is_dir():
            # node_modules: the Pi extension's dev dependencies (adapters/pi), not in the wheel
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "node_modules")
            shutil.copytree(ROOT / name, source / name, ignore=ignore)
        else:
            shutil.copy2(ROOT / name, source / name)
    dist = tmp_path / "dist"
    built = _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", dist, source)
    assert built.returncode == 0, built.stderr
    (wheel,) = dist.glob("*.whl")

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    theirs = _run(python, "-m", "pip", "install", "-q", "--no-deps", *CLASHING)
    assert theirs.returncode == 0, theirs.stderr
    ours = _run(python, "-m", "pip", "install", "-q", wheel)
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
