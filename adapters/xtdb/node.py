"""Start and stop XTDB nodes: one JVM per node, HTTP on 127.0.0.1 only.

A node is ``java ... clojure.main -m xtdb.main -f <config>`` with the fetched jars and the
project's HTTP server (``xtdb/src``) on the class path. The config is rendered from a template in
``xtdb/config`` into the node's run directory, next to its log (``node.log``, where the JVM's
stdout and stderr go directly, so nothing is lost if this Python process exits) and its pid file
(``node.json``). :class:`XtdbNode` is the object tests and the CLI use; it is a context manager.

Only its owner can use a node or read its data (decision 0027): each start draws a new secret
that every request must carry (:mod:`selfctx.adapters.xtdb.secret`); the run and data directories
are the owner's alone (0700) and the JVM runs with umask 077, so everything RocksDB, the log and
the launcher write there is too.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import string
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import attrs
import httpx

from selfctx.adapters.config import ConfigError, load_config, setting
from selfctx.adapters.xtdb import fetch, paths, secret
from selfctx.adapters.xtdb.errors import NodeStartError, XtdbSetupError

ConfigName = Literal["memory", "rocksdb", "postgres"]
PID_FILE = "node.json"
LOG_FILE = "node.log"
CONFIG_FILE = "node.edn"
_JAVA_OPTS_ENV = "SELFCTX_XTDB_JAVA_OPTS"
# A young generation of 256 MB holds a few commits of several MB each (the request body, its
# parsed documents, their encodings) until they are written, so they die young instead of being
# copied and promoted, and two collector threads halve the pauses on 2 cores: indexing the
# standard library went from 447-448 to 622-660 files/s on a fresh node and from 899-909 to
# 936-987 on its fourth pass (alternating runs, docs/benchmarks.md). A node uses about 0.5 GB
# more memory than with the serial collector on a 64 MB heap, which was the default before.
# Override with SELFCTX_XTDB_JAVA_OPTS.
_DEFAULT_JAVA_OPTS = (
    "-Xms512m",
    "-Xmx1g",
    "-Xmn256m",
    "-XX:MaxDirectMemorySize=512m",
    "-XX:+UseParallelGC",
)


@attrs.frozen
class PostgresTarget:
    """Where a cluster node finds the PostgreSQL database holding its tx-log and documents."""

    host: str
    """Host name or address of the PostgreSQL server."""
    port: int
    """Its TCP port."""
    dbname: str
    """The database (created beforehand; XTDB creates its one table itself)."""
    user: str
    """The role XTDB connects as."""
    password: str
    """That role's password (written only into the node's 0600 config file)."""
    tx_log: Literal["selfctx", "xtdb"] = "selfctx"
    """``selfctx``: XTDB's JDBC tx-log woken by submits (``selfctx.jdbc``, decision 0067);
    ``xtdb``: XTDB's own, which polls every 100 ms when idle (to compare)."""
    poll_ms: int = 100
    """With ``selfctx``: the longest wait between two polls of the log."""
    notify: bool = True
    """With ``selfctx``: every submit wakes every node (PostgreSQL NOTIFY/LISTEN)."""


@attrs.frozen
class RunInfo:
    """The pid file of a running node: how to reach it and how to stop it."""

    pid: int
    """The JVM's process id."""
    url: str
    """Base URL of its HTTP API, e.g. ``http://127.0.0.1:3000``."""
    config: str
    """Which template it runs: memory, rocksdb or postgres."""
    run_dir: str
    """Folder of its config, log and pid file."""
    data_dir: str
    """Folder of its data (empty for an in-memory node)."""
    started_at: float
    """Unix time it answered its first status request."""
    key_file: str = ""
    """The file holding the secret its requests must carry (0600)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (XTDB cannot bind port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _edn_string(value: str) -> str:
    # A JSON string literal is a valid EDN string literal.
    return json.dumps(value)


DOC_CACHE_ENV = "SELFCTX_XTDB_DOC_CACHE_MB"


def _setting_at_least(key: str, least: int, unit: str) -> int:
    """The whole-number setting ``key`` (config file or environment), refused below ``least``."""
    expected = f"expected a whole number of {unit}, >= {least}"
    try:
        value, _, where = load_config().lookup(key)
    except ConfigError as exc:
        raise XtdbSetupError(f"{exc.where}: {expected}") from exc
    if value < least:
        raise XtdbSetupError(f"{where or key}={value!r}: {expected}")
    return int(value)


def doc_cache_bytes() -> int:
    """Bytes of documents a node keeps in memory after reading them (``selfctx.cache``, decision
    0017): the ``xtdb.doc_cache_mb`` setting (SELFCTX_XTDB_DOC_CACHE_MB), by default 64 MB, a
    sixteenth of the default heap of 1 GB."""
    return _setting_at_least("xtdb.doc_cache_mb", 1, "megabytes") * 1024 * 1024


RocksdbLayout = Literal["records", "two-stores"]
RECORDS_DIR = "records"
"""The one RocksDB of a RocksDB node's tx-log and documents (decision 0166)."""
TWO_STORES_DIRS = ("tx-log", "documents")
"""A data directory written before decision 0166: the tx-log and the documents in a RocksDB each."""


def rocksdb_layout(data_dir: Path) -> RocksdbLayout:
    """How a RocksDB node's data directory keeps its tx-log and documents (decision 0166).

    ``two-stores``: a directory written before 0166 (``tx-log`` and ``documents``), which keeps
    running as it was written, two fsyncs a commit; ``records``: one RocksDB for both, one fsync a
    commit, what a new directory gets. A directory holding both layouts is refused (the node would
    otherwise read one and ignore the other): nothing is moved or deleted here.
    """
    old = [name for name in TWO_STORES_DIRS if (data_dir / name).exists()]
    if not old:
        return "records"
    if (data_dir / RECORDS_DIR).exists():
        raise XtdbSetupError(
            f"{data_dir} holds both {RECORDS_DIR}/ (one RocksDB for the tx-log and the documents) "
            f"and {', '.join(name + '/' for name in old)} (the layout before it): a node reads "
            "one or the other; move away the one that is not this node's record"
        )
    return "two-stores"


def render_config(
    config: ConfigName,
    *,
    port: int,
    data_dir: Path | None,
    postgres: PostgresTarget | None,
    secret_file: Path,
) -> str:
    """The node's EDN config: ``xtdb/config/<config>.edn`` with its placeholders filled in (a
    RocksDB node's data directory of the layout before decision 0166 takes
    ``rocksdb-two-stores.edn``: :func:`rocksdb_layout`)."""
    template_name: str = config
    if config == "rocksdb" and data_dir is not None and rocksdb_layout(data_dir) == "two-stores":
        template_name = "rocksdb-two-stores"
    template = string.Template(
        (paths.project_dir() / "config" / f"{template_name}.edn").read_text()
    )
    values: dict[str, str] = {
        "port": str(port),
        "doc_cache_bytes": str(doc_cache_bytes()),
        "secret_file": _edn_string(str(secret_file)),
    }
    if config in ("rocksdb", "postgres"):
        if data_dir is None:
            raise XtdbSetupError(f"a {config} node needs a data directory")
        values["index_dir"] = _edn_string(str(data_dir / "indexes"))
        values["tx_log_dir"] = _edn_string(str(data_dir / "tx-log"))
        values["doc_store_dir"] = _edn_string(str(data_dir / "documents"))
        values["records_dir"] = _edn_string(str(data_dir / RECORDS_DIR))
    if config == "postgres":
        if postgres is None:
            raise XtdbSetupError("a postgres node needs a PostgresTarget")
        values |= {
            "pg_host": _edn_string(postgres.host),
            "pg_port": str(postgres.port),
            "pg_dbname": _edn_string(postgres.dbname),
            "pg_user": _edn_string(postgres.user),
            "pg_password": _edn_string(postgres.password),
        }
        if postgres.tx_log == "xtdb":
            values |= {"tx_log_module": "xtdb.jdbc/->tx-log", "tx_log_args": ""}
        else:
            notify = "true" if postgres.notify else "false"
            values |= {
                "tx_log_module": "selfctx.jdbc/->tx-log",
                "tx_log_args": f":poll-ms {int(postgres.poll_ms)} :notify? {notify}",
            }
    return template.substitute(values)


def log_tail(log_file: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a node's log (where a failed start says why)."""
    try:
        with open(log_file, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


WARM_UP_ENV = "SELFCTX_XTDB_WARM_UP_MS"


def warm_up_ms() -> int:
    """Milliseconds a node spends at most compiling its request path before it answers (0: none).

    See ``selfctx.warm-up`` and decision 0167; the tests' nodes set 0 (``SELFCTX_XTDB_WARM_UP_MS``).
    """
    return _setting_at_least("xtdb.warm_up_ms", 0, "milliseconds")


def java_command(config_file: Path, tmp_dir: Path) -> list[str]:
    """The JVM's argument list (no shell is involved)."""
    project = paths.project_dir()
    opts = (setting("xtdb.java_opts") or "").split() or list(_DEFAULT_JAVA_OPTS)
    classpath = os.pathsep.join(
        [str(paths.lib_dir() / "*"), str(paths.classes_dir()), str(project / "src")]
    )
    return [
        fetch.require_java(),
        *opts,
        # Without it XTDB warns and falls back to a slower LRU cache on JDK 9+.
        "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
        f"-Dlogback.configurationFile={project / 'logback.xml'}",
        "-Dclojure.main.report=stderr",
        "-Duser.timezone=UTC",
        # XTDB extracts RocksDB's native library to one fixed path under the temp folder, which
        # every JVM on the machine shares: two nodes starting at once rewrite the file under each
        # other and one dies of SIGBUS. A temp folder per node keeps them apart.
        f"-Djava.io.tmpdir={tmp_dir}",
        # The JDK's HTTP server writes headers and body separately; with Nagle's algorithm on,
        # the body waits for the client's delayed ACK and every request takes 40 ms longer.
        "-Dsun.net.httpserver.nodelay=true",
        # The request path compiled on a scratch node before the node answers (decision 0167).
        f"-Dselfctx.warm-up-ms={warm_up_ms()}",
        "-cp",
        classpath,
        "clojure.main",
        "-m",
        "xtdb.main",
        "-f",
        str(config_file),
    ]


def wait_until_ready(
    url: str,
    *,
    deadline: float,
    exited: Any,
    log_file: Path,
    key: str,
    sync: bool = True,
) -> dict[str, Any]:
    """Poll ``/_xtdb/status`` until it answers, failing fast if the process exits.

    ``exited()`` returns the exit code once the process is gone. With ``sync`` the node is also
    made to index everything already in its tx-log (a restarted node replays it), so that reads
    right after start see every acknowledged commit. ``key`` is the node's secret.
    """
    headers = {"Accept": "application/json", "Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, headers=headers) as http:
        while True:
            code = exited(0.0)
            if code is not None:
                raise NodeStartError(
                    f"the JVM exited with code {code}",
                    log_file=str(log_file),
                    log_tail=log_tail(log_file),
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise NodeStartError(
                    f"no answer from {url}/_xtdb/status in time",
                    log_file=str(log_file),
                    log_tail=log_tail(log_file),
                )
            try:
                status = http.get("/_xtdb/status", timeout=min(2.0, remaining))
            except httpx.TransportError:
                # Not listening yet: wait on the process itself, which also notices an exit.
                exited(0.1)
                continue
            if status.status_code != 200:
                exited(0.1)
                continue
            if sync:
                timeout_ms = max(1, int((deadline - time.monotonic()) * 1000))
                http.get(
                    "/_xtdb/sync", params={"timeout": timeout_ms}, timeout=timeout_ms / 1000 + 5
                ).raise_for_status()
            body: dict[str, Any] = status.json()
            return body


class XtdbNode:
    """One XTDB node process; ``with XtdbNode(config="memory") as node: node.url``.

    ``config`` picks the template: ``memory`` (nothing persists), ``rocksdb`` (everything under
    ``data_dir``) or ``postgres`` (tx-log and documents in ``postgres``, index under ``data_dir``).
    ``run_dir`` holds the rendered config, the log and the pid file; it defaults to ``data_dir``,
    or to a fresh temporary folder for an in-memory node. ``port`` defaults to a free one and is
    kept across :meth:`stop` / :meth:`start`, so clients can reconnect to a restarted node.
    """

    def __init__(
        self,
        config: ConfigName = "memory",
        data_dir: Path | str | None = None,
        *,
        port: int | None = None,
        run_dir: Path | str | None = None,
        postgres: PostgresTarget | None = None,
        startup_timeout: float = 180.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.config: ConfigName = config
        self.data_dir = Path(data_dir).resolve() if data_dir is not None else None
        self.port = port
        run = run_dir if run_dir is not None else self.data_dir
        self.run_dir = (
            Path(run).resolve() if run is not None else Path(tempfile.mkdtemp(prefix="xtdb-"))
        )
        self.postgres = postgres
        self.startup_timeout = startup_timeout
        self.env = dict(env or {})
        self.process: subprocess.Popen[bytes] | None = None
        self.started_in: float | None = None
        """Seconds the last :meth:`start` took until the node answered (and had synced)."""
        self.secret: str | None = None
        """The secret of the running node (a new one at every start)."""
        self.key_file: Path | None = None
        """Where its clients find the secret (:func:`selfctx.adapters.xtdb.secret.key_file`)."""

    @property
    def url(self) -> str:
        """Base URL of the node's HTTP API (valid once started)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def headers(self) -> dict[str, str]:
        """What a raw HTTP request to the running node carries: its secret, and asks for JSON."""
        if self.secret is None:
            raise XtdbSetupError("the node has not been started: it has no secret yet")
        return {"Accept": "application/json", "Authorization": f"Bearer {self.secret}"}

    @property
    def log_file(self) -> Path:
        """Where the JVM's output goes."""
        return self.run_dir / LOG_FILE

    @property
    def pid(self) -> int | None:
        """The JVM's pid while it runs."""
        return self.process.pid if self.process and self.process.poll() is None else None

    def start(self, *, detach: bool = False) -> str:
        """Fetch jars if needed, start the JVM, wait until it answers and has synced; its URL.

        ``detach`` puts the JVM in its own session so it outlives this process and the
        terminal (``selfctx xtdb start``). Raises :class:`NodeStartError` with the log's tail.
        """
        if self.pid is not None:
            return self.url
        fetch.fetch_jars()
        secret.private_dir(self.run_dir)
        if self.data_dir is not None:
            secret.private_dir(self.data_dir)
        self.port = self.port or free_port()
        self.secret = secret.new_secret()
        self.key_file = secret.key_file(self.url)
        secret.write_key(self.key_file, self.secret)
        config_file = self.run_dir / CONFIG_FILE
        # The file may carry a database password, hence owner-only.
        fd = os.open(config_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(
                render_config(
                    self.config,
                    port=self.port,
                    data_dir=self.data_dir,
                    postgres=self.postgres,
                    secret_file=self.key_file,
                )
            )
        tmp_dir = secret.private_dir(self.run_dir / "tmp")
        started = time.monotonic()
        log_fd = os.open(self.log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.fchmod(log_fd, 0o600)  # a log of an earlier version may be readable by all
        with os.fdopen(log_fd, "ab") as log:
            layout = ""
            if self.config == "rocksdb" and self.data_dir is not None:
                layout = f" (layout {rocksdb_layout(self.data_dir)})"
            log.write(f"\n=== starting {self.config} node{layout} on {self.url} ===\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                java_command(config_file, tmp_dir),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.run_dir,
                env={**os.environ, "MALLOC_ARENA_MAX": "2", **self.env},
                start_new_session=detach,
                # Everything the JVM creates (RocksDB makes its files 0644) is the owner's only.
                umask=0o077,
            )
        try:
            wait_until_ready(
                self.url,
                deadline=started + self.startup_timeout,
                exited=self._exited,
                log_file=self.log_file,
                key=self.secret,
            )
        except BaseException:
            self.kill()
            raise
        self.started_in = time.monotonic() - started
        info = RunInfo(
            self.process.pid,
            self.url,
            self.config,
            str(self.run_dir),
            str(self.data_dir or ""),
            time.time(),
            str(self.key_file),
        )
        fd = os.open(self.run_dir / PID_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(attrs.asdict(info)))
        return self.url

    def _forget_key(self) -> None:
        if self.key_file is not None and self.secret is not None:
            secret.remove_key(self.key_file, self.secret)

    def _exited(self, wait: float) -> int | None:
        assert self.process is not None
        try:
            return self.process.wait(timeout=wait) if wait else self.process.poll()
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (XTDB closes its stores), then SIGKILL if it has not exited in ``timeout``."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            # A suspended JVM handles SIGTERM only once it runs again.
            self.process.send_signal(signal.SIGCONT)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        (self.run_dir / PID_FILE).unlink(missing_ok=True)
        self._forget_key()

    def kill(self) -> None:
        """SIGKILL, as a crash would: no shutdown hook runs (crash tests use this)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        (self.run_dir / PID_FILE).unlink(missing_ok=True)
        self._forget_key()

    def suspend(self) -> None:
        """SIGSTOP: the node keeps its sockets but answers nothing, like a hung machine."""
        if self.pid is not None:
            os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after :meth:`suspend`."""
        if self.pid is not None:
            os.kill(self.pid, signal.SIGCONT)

    def __enter__(self) -> XtdbNode:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
