"""Fetching XTDB's jars: once, from Maven Central only, with failures that say what is missing."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from selfctx.adapters.xtdb import XtdbSetupError, fetch_jars, paths

pytestmark = pytest.mark.xtdb


def test_a_second_fetch_does_nothing(xtdb_jars: Path) -> None:
    again = fetch_jars()
    assert not again.fetched
    assert again.seconds < 1.0
    assert again.lib == xtdb_jars
    names = {p.name for p in xtdb_jars.glob("*.jar")}
    assert {"xtdb-core-1.24.5.jar", "xtdb-jdbc-1.24.5.jar", "postgresql-42.7.4.jar"} <= names
    assert any(n.startswith("xtdb-rocksdb-") for n in names)
    assert any(n.startswith("logback-classic-1.2.") for n in names)
    assert any(paths.classes_dir().rglob("*__init.class")), "namespaces compiled ahead of time"


def test_only_maven_central_is_configured() -> None:
    settings = (paths.project_dir() / "settings-central.xml").read_text()
    assert "<mirrorOf>*</mirrorOf>" in settings
    assert "https://repo.maven.apache.org/maven2" in settings
    # No <repositories> of our own: every artifact comes through the mirror above.
    assert "<repositories>" not in (paths.project_dir() / "pom.xml").read_text()


@pytest.fixture
def empty_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SELFCTX_XTDB_HOME", str(tmp_path / "home"))
    return tmp_path


def _path_with(tmp_path: Path, *tools: str) -> str:
    """A PATH holding only the named tools (symlinked), to simulate a machine without others."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in tools:
        found = shutil.which(tool)
        assert found, f"{tool} is needed to run this test"
        (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def test_without_java_the_error_says_so(empty_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", _path_with(empty_home))
    with pytest.raises(XtdbSetupError, match="Java not found"):
        fetch_jars()


def test_without_maven_the_error_says_so(empty_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", _path_with(empty_home, "java"))
    with pytest.raises(XtdbSetupError, match=r"Maven \(mvn\) not found"):
        fetch_jars()


def test_an_unreachable_registry_is_named(empty_home: Path) -> None:
    settings = empty_home / "settings.xml"
    central = (paths.project_dir() / "settings-central.xml").read_text()
    # Port 9 (discard) on loopback: nothing listens, the connection is refused at once.
    settings.write_text(
        central.replace("https://repo.maven.apache.org/maven2", "http://127.0.0.1:9/m2")
    )
    with pytest.raises(XtdbSetupError) as info:
        fetch_jars(settings=settings)
    assert "registry is unreachable" in str(info.value)
    assert "http://127.0.0.1:9/m2" in str(info.value)
    assert not (empty_home / "home" / "lib").exists(), "no half-fetched lib/ is left behind"
    assert os.environ["SELFCTX_XTDB_HOME"].endswith("home")
