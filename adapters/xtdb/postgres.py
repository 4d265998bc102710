"""A throwaway PostgreSQL server on 127.0.0.1 for the cluster test and ``selfctx bench scale
--cluster``, set up from the Debian package's binaries (``/usr/lib/postgresql/<version>/bin``)
in a temporary folder.

``initdb`` and ``postgres`` refuse to run as root, so when the tests run as root the server runs
as an unprivileged account (``postgres`` if the package created it, else ``nobody``): the folder
is created under the system temp dir (every parent traversable) and handed to that account.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from selfctx.adapters.config import setting
from selfctx.adapters.xtdb.node import PostgresTarget

__all__ = ["LocalPostgres", "find_bin_dir"]


def find_bin_dir() -> Path | None:
    """The folder holding ``initdb`` and ``postgres``, newest version first; None if absent."""
    override = setting("xtdb.pg_bin")
    candidates = [Path(override)] if override else []
    candidates += sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(initdb).parent)
    for candidate in candidates:
        if (candidate / "initdb").exists() and (candidate / "postgres").exists():
            return candidate
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalPostgres:
    """``with LocalPostgres(bin_dir) as pg: pg.target`` — a server with one database, ``xtdb``."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="selfctx-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.password = secrets.token_hex(12)
        self.process: subprocess.Popen[bytes] | None = None
        self._as: dict[str, Any] = {}
        if os.geteuid() == 0:
            account = _unprivileged_account()
            self._as = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
            os.chown(self.root, account.pw_uid, account.pw_gid)
        self.target = PostgresTarget("127.0.0.1", self.port, "xtdb", "xtdb", self.password)

    def _run(self, *args: str) -> None:
        done = subprocess.run(
            [str(self.bin_dir / args[0]), *args[1:]],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            **self._as,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {done.stdout}{done.stderr}")

    def start(self) -> None:
        """initdb, start the server, wait until it accepts connections, create the database."""
        pwfile = self.root / "pwfile"
        pwfile.write_text(self.password + "\n")
        if self._as:
            os.chown(pwfile, self._as["user"], self._as["group"])
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            "xtdb",
            f"--pwfile={pwfile}",
            "-E",
            "UTF8",
            "--locale=C",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
        )
        log = open(self.root / "postgres.log", "ab")  # noqa: SIM115 - owned by the server
        self.process = subprocess.Popen(
            [
                str(self.bin_dir / "postgres"),
                "-D",
                str(self.data),
                "-p",
                str(self.port),
                "-h",
                "127.0.0.1",
                "-k",
                str(self.root),
                "-c",
                "fsync=off",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            **self._as,
        )
        log.close()
        deadline = time.monotonic() + 60
        while True:
            ready = subprocess.run(
                [str(self.bin_dir / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)],
                capture_output=True,
                check=False,
            )
            if ready.returncode == 0:
                break
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    "PostgreSQL did not start: " + (self.root / "postgres.log").read_text()[-2000:]
                )
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=0.1)
        self._run("createdb", "-h", str(self.root), "-p", str(self.port), "-U", "xtdb", "xtdb")

    def psql(self, sql: str) -> str:
        """Run one SQL statement over the local socket; its unaligned output."""
        done = subprocess.run(
            [
                str(self.bin_dir / "psql"),
                "-h",
                str(self.root),
                "-p",
                str(self.port),
                "-U",
                "xtdb",
                "-d",
                "xtdb",
                "-At",
                "-c",
                sql,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            **self._as,
        )
        return str(done.stdout).strip()

    def stop(self) -> None:
        """Fast shutdown (SIGINT), then remove every file."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalPostgres:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _unprivileged_account() -> pwd.struct_passwd:
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError("running as root, and no 'postgres' or 'nobody' account to run PostgreSQL")
