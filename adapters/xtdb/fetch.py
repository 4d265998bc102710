"""Fetch XTDB's jars from Maven Central, once.

``xtdb/pom.xml`` pins every artifact; Maven resolves it with ``xtdb/settings-central.xml``, which
mirrors every repository to Maven Central (so a Clojars entry in some POM can never be used), into
a private local repository under the cache folder, and copies the runtime jars into ``lib/``.
Then ``xtdb/aot.clj`` compiles XTDB's Clojure namespaces once into ``classes/`` (the jars ship
sources only, and compiling them at every node start would cost 15-30 s).
A stamp file records the hash of the POM and settings the jars came from: a second call with the
same files returns at once without starting Maven or Java. Concurrent callers serialise on a
lock file.
"""

from __future__ import annotations

import fcntl
import hashlib
import re
import shutil
import subprocess
import time
from pathlib import Path

import attrs

from selfctx.adapters.xtdb import paths
from selfctx.adapters.xtdb.errors import XtdbSetupError

CENTRAL_URL = "https://repo.maven.apache.org/maven2"
# Pinned so that the goal resolves the same way everywhere (no prefix/version lookup).
_COPY_GOAL = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies"
_STAMP = ".fetched"
_MAVEN_TIMEOUT_S = 1800.0


@attrs.frozen
class FetchResult:
    """What :func:`fetch_jars` did."""

    lib: Path
    """The folder holding every jar a node needs."""
    fetched: bool
    """True if Maven ran; False if the jars were already there (the idempotent case)."""
    jars: int
    """How many jars ``lib`` holds."""
    classes: Path
    """XTDB's namespaces compiled ahead of time (put on the class path after ``lib``)."""
    seconds: float
    """Wall-clock time the call took."""


def _stamp_for(pom: Path, settings: Path) -> str:
    digest = hashlib.sha256()
    for f in (pom, settings):
        digest.update(f.read_bytes())
    return digest.hexdigest()


def jars_ready(*, settings: Path | None = None) -> bool:
    """True if ``lib/`` holds the jars of the current ``xtdb/pom.xml`` (no Maven needed)."""
    project = paths.project_dir()
    stamp_file = paths.lib_dir() / _STAMP
    settings = settings or project / "settings-central.xml"
    return stamp_file.is_file() and stamp_file.read_text() == _stamp_for(
        project / "pom.xml", settings
    )


def require_java() -> str:
    """The ``java`` executable, or an error saying that Java is missing."""
    java = shutil.which("java")
    if java is None:
        raise XtdbSetupError(
            "Java not found on PATH: XTDB needs a Java runtime (17 recommended), e.g. "
            "`apt-get install openjdk-17-jre-headless`"
        )
    return java


def _require_maven() -> str:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise XtdbSetupError(
            f"Maven (mvn) not found on PATH: it is needed once, to fetch XTDB's jars from Maven "
            f"Central into {paths.lib_dir()}; install it (e.g. `apt-get install maven`) or copy "
            "a lib/ folder fetched elsewhere there and set SELFCTX_XTDB_HOME"
        )
    return mvn


def _explain_maven_failure(output: str, settings: Path) -> str:
    """Turn Maven's log into one sentence naming what is missing."""
    missing = sorted(set(re.findall(r"Could not find artifact (\S+)", output)))
    if missing:
        return (
            "these artifacts are not on Maven Central: "
            + ", ".join(missing)
            + f" (settings {settings})"
        )
    transfer = re.search(
        r"Could not transfer artifact (\S+) from/to (\S+) \(([^)]*)\): (.*)", output
    )
    if transfer or re.search(r"UnknownHost|Connection refused|timed out|unreachable", output):
        where = transfer.group(3) if transfer else CENTRAL_URL
        why = transfer.group(4).split(" -> [Help")[0].strip() if transfer else "network error"
        return f"the registry is unreachable: {where}: {why}"
    errors = [line for line in output.splitlines() if line.startswith("[ERROR]")]
    return "Maven failed: " + (" ".join(errors[:3]) or output[-2000:])


def fetch_jars(*, settings: Path | None = None, timeout: float = _MAVEN_TIMEOUT_S) -> FetchResult:
    """Make sure ``lib/`` holds every jar of ``xtdb/pom.xml``; run Maven only if it does not.

    ``settings`` replaces ``xtdb/settings-central.xml`` (tests use it to point at an unreachable
    registry). Raises :class:`XtdbSetupError` naming what is missing: Java, Maven, the registry,
    or an artifact.
    """
    started = time.monotonic()
    project = paths.project_dir()
    pom = project / "pom.xml"
    settings = settings or project / "settings-central.xml"
    home = paths.xtdb_home()
    lib = paths.lib_dir()
    stamp = _stamp_for(pom, settings)

    def result(fetched: bool) -> FetchResult:
        jars = sum(1 for _ in lib.glob("*.jar"))
        return FetchResult(lib, fetched, jars, paths.classes_dir(), time.monotonic() - started)

    if jars_ready(settings=settings):
        return result(False)
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".fetch.lock", "w") as lock:
        # Another process may be fetching right now; wait for it, then re-check.
        fcntl.flock(lock, fcntl.LOCK_EX)
        if jars_ready(settings=settings):
            return result(False)
        java = require_java()
        mvn = _require_maven()
        staging = home / "lib.partial"
        shutil.rmtree(staging, ignore_errors=True)
        cmd = [
            mvn,
            "-B",
            "-s",
            str(settings),
            "-f",
            str(pom),
            f"-Dmaven.repo.local={home / 'm2'}",
            _COPY_GOAL,
            f"-DoutputDirectory={staging}",
            "-DincludeScope=runtime",
        ]
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=timeout, check=False, cwd=home
            )
        except subprocess.TimeoutExpired as exc:
            raise XtdbSetupError(
                f"Maven did not finish fetching XTDB's jars within {timeout:.0f} s; "
                f"is {CENTRAL_URL} reachable?"
            ) from exc
        if proc.returncode != 0 or not any(staging.glob("*.jar")):
            raise XtdbSetupError(
                "could not fetch XTDB's jars with Maven: "
                + _explain_maven_failure(proc.stdout + proc.stderr, settings)
            )
        _compile_ahead(java, staging, home / "classes.partial", project, timeout)
        # Swap the complete folders in, so a node never starts on a half-copied lib/.
        for final, partial in ((lib, staging), (paths.classes_dir(), home / "classes.partial")):
            old = final.with_name(final.name + ".old")
            shutil.rmtree(old, ignore_errors=True)
            if final.exists():
                final.rename(old)
            partial.rename(final)
            shutil.rmtree(old, ignore_errors=True)
        (lib / _STAMP).write_text(stamp)
    return result(True)


def _compile_ahead(java: str, lib: Path, classes: Path, project: Path, timeout: float) -> None:
    shutil.rmtree(classes, ignore_errors=True)
    classes.mkdir(parents=True)
    cmd = [
        java,
        "-Xmx768m",
        f"-Dclojure.compile.path={classes}",
        f"-Dlogback.configurationFile={project / 'logback.xml'}",
        "-cp",
        f"{lib / '*'}:{classes}",
        "clojure.main",
        str(project / "aot.clj"),
        str(lib),
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise XtdbSetupError(f"compiling XTDB's namespaces took over {timeout:.0f} s") from exc
    if proc.returncode != 0 or not any(classes.iterdir()):
        output = (proc.stderr or proc.stdout)[-2000:]
        raise XtdbSetupError(f"compiling XTDB's namespaces with {java} failed: {output}")
