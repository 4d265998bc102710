"""The node's versions feed pushed to this process (decision 0148).

Every proxied request, and every assembly, asks the node which file versions other writers
wrote since the session last looked (decision 0066): a request to the node each time, although
nearly always nothing changed. Our node also pushes the feed, one line per transaction that wrote
file versions, on a connection each process holds open (``GET /_xtdb/selfctx/versions/stream``),
and answers a commit that wrote a file version only once every open stream has been written it.
So what a process has read from its stream, up to the moment it asks, lists every file version
whose writer has been told it is written, as a read of the feed would: when it names none of the
files a session holds that the session does not hold already, the read is skipped.

The stream is read by a thread of its own, and by the asking thread too: each takes what the
socket holds under one lock, so nothing the node wrote before a question is left unread by it.
A stream that fails, ends, or is silent for longer than the node's heartbeats allow is dropped:
until a new one is open (tried again after 0.5 s, doubling to 30 s) every question goes to the
node, as it did before.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import select
import socket
import threading
import time
from collections.abc import Callable, Mapping

from selfctx.adapters.xtdb import text
from selfctx.application.ports.store import FileVersions

__all__ = ["VersionsStream"]

_PATH = "/_xtdb/selfctx/versions/stream"
_SILENT = 30.0
"""Seconds without a line (the node writes one every 10 s) after which the stream is lost."""
_FIRST_RETRY = 0.5
_LAST_RETRY = 30.0
_MAX_LINE = 16 * 1024 * 1024
"""A line longer than this is a broken stream (a transaction of many thousand files fits)."""
_MISSING = object()


class VersionsStream:
    """One process's stream of the node's versions feed: the file versions written since it
    opened, the last ``capacity`` kept, and the questions of :meth:`answer` answered from them.

    ``authorization`` returns the ``Authorization`` header's value (the node's secret, decision
    0027), or None. :meth:`close` ends the thread and the connection.
    """

    def __init__(
        self,
        host: str,
        port: int,
        authorization: Callable[[], str | None],
        *,
        capacity: int = 10_000,
        timeout: float = 10.0,
    ) -> None:
        self.host = host
        self.port = port
        self._authorization = authorization
        self._capacity = capacity
        self._timeout = timeout
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        """The open stream's socket (None: no stream; questions go to the node)."""
        self._pending = b""
        """What was read of a line not yet ended."""
        self._start = -1
        """The last transaction the node's feed had seen when the stream opened."""
        self._position = -1
        """The last transaction the stream listed versions of (at least ``_start``)."""
        self._entries: collections.deque[tuple[int, str, str]] = collections.deque()
        self._complete_after = -1
        """The transaction of the last entry dropped to keep ``capacity``."""
        self._closed = threading.Event()
        self._pid = os.getpid()
        self.opened = 0
        """Streams opened so far (the tests and the benchmarks count them)."""
        self.answered = 0
        """Questions answered from the stream, the node not asked."""
        self._thread = threading.Thread(target=self._run, name="selfctx-versions", daemon=True)
        self._thread.start()

    @property
    def usable(self) -> bool:
        """Still this process's (a forked child must open its own) and not closed."""
        return self._pid == os.getpid() and not self._closed.is_set()

    def answer(
        self, after_tx_id: int | None, held: Mapping[str, str] | None
    ) -> FileVersions | None:
        """The file versions written after ``after_tx_id``, from the stream, complete: or None
        when the node must be asked (no stream open, a point before the stream's start or its
        kept entries, or a version of a held file other than the one held, whose document the
        node's answer carries, decision 0106)."""
        if after_tx_id is None:
            return None
        with self._lock:
            if self._sock is None:
                return None
            self._take(self._sock)  # what the node wrote before this question
            if (
                self._sock is None
                or after_tx_id < self._start
                or after_tx_id < self._complete_after
            ):
                return None
            found: list[tuple[int, str, str]] = []
            for entry in reversed(self._entries):
                if entry[0] <= after_tx_id:
                    break
                found.append(entry)
            position = max(after_tx_id, self._position)
        found.reverse()
        if held and found:
            latest = {object_id: object_hash for _, object_id, object_hash in found}
            for object_id, object_hash in latest.items():
                if held.get(object_id, object_hash) != object_hash:
                    return None
        self.answered += 1
        return FileVersions(position, True, tuple(found))

    def drop(self) -> None:
        """Give the stream up (the thread opens a new one after its pause)."""
        with self._lock:
            self._lose()

    def close(self) -> None:
        self._closed.set()
        self.drop()
        if self._thread is not threading.current_thread():
            self._thread.join(self._timeout)

    # -- the thread ------------------------------------------------------------------------------

    def _run(self) -> None:
        pause = _FIRST_RETRY
        while not self._closed.is_set():
            try:
                sock = self._open()
            except (OSError, ValueError):
                self._closed.wait(pause)
                pause = min(pause * 2, _LAST_RETRY)
                continue
            opened = time.monotonic()
            self._follow(sock)
            sock.close()
            # A stream lost soon after it opened is not opened again at once, nor ever faster
            # than every _FIRST_RETRY seconds.
            pause = _FIRST_RETRY if time.monotonic() - opened > _SILENT else pause * 2
            pause = min(pause, _LAST_RETRY)
            self._closed.wait(pause)

    def _follow(self, sock: socket.socket) -> None:
        """Read the stream until it is lost or closed."""
        while not self._closed.is_set():
            try:
                ready, _, _ = select.select([sock], [], [], _SILENT)
            except (OSError, ValueError):
                ready = []
            with self._lock:
                if self._sock is not sock:
                    return
                if not ready:  # silent for too long, or the socket failed
                    self._lose()
                    return
                self._take(sock)
                if self._sock is not sock:
                    return

    def _open(self) -> socket.socket:
        """Connect, ask for the stream, and read its first line; the stream is then open."""
        sock = socket.create_connection((self.host, self.port), self._timeout)
        try:
            head = [f"GET {_PATH} HTTP/1.0", f"Host: {self.host}:{self.port}"]
            auth = self._authorization()
            if auth is not None:
                head.append(f"Authorization: {auth}")
            request = "\r\n".join(head) + "\r\n\r\n"
            if request.count("\n") != len(head) + 1:
                raise ValueError("a header holds a line break")
            sock.sendall(request.encode("latin-1"))
            data = b""
            while b"\r\n\r\n" not in data or b"\n" not in data.split(b"\r\n\r\n", 1)[1]:
                more = sock.recv(65536)
                if not more or len(data) > _MAX_LINE:
                    raise ValueError("the stream ended before its first line")
                data += more
            headers, body = data.split(b"\r\n\r\n", 1)
            status = headers.split(b"\r\n", 1)[0].split()
            if len(status) < 2 or status[1] != b"200":
                raise ValueError(f"the node refused the stream: {headers[:100]!r}")
            first, rest = body.split(b"\n", 1)
            start = json.loads(first).get("position")
            start = start if isinstance(start, int) else -1
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        with self._lock:
            if self._closed.is_set():
                sock.close()
                raise OSError("closed")
            self._sock = sock
            self._start = self._position = start
            self._complete_after = -1
            self._entries.clear()
            self._pending = rest
            self.opened += 1
            self._lines()
        return sock

    # -- under the lock --------------------------------------------------------------------------

    def _take(self, sock: socket.socket) -> None:
        """Read all the socket holds now, without waiting, and keep what it lists."""
        while True:
            try:
                data = sock.recv(1 << 16)
            except BlockingIOError:
                break
            except OSError:
                self._lose()
                return
            if not data:  # the node ended the stream
                self._lose()
                return
            self._pending += data
            if len(data) < 1 << 16:
                break
        self._lines()

    def _lines(self) -> None:
        if b"\n" not in self._pending:
            if len(self._pending) > _MAX_LINE:
                self._lose()
            return
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            if not self._keep(line):
                self._lose()
                return

    def _keep(self, line: bytes) -> bool:
        """Keep one notice's versions; False for a line that is not one."""
        try:
            notice = json.loads(line) if line.strip() else {}
        except ValueError:
            return False
        if not isinstance(notice, dict):
            return False
        if not notice:
            return True  # a heartbeat
        if text.ESCAPE_UTF8 in line:
            notice = text.decode(notice)
        position, versions = notice.get("position"), notice.get("versions")
        if not (isinstance(position, int) and isinstance(versions, list)):
            return False
        for v in versions:
            if not (isinstance(v, list) and len(v) == 3 and isinstance(v[0], int)):
                return False
            self._entries.append((v[0], str(v[1]), str(v[2])))
            if len(self._entries) > self._capacity:
                self._complete_after = self._entries.popleft()[0]
        self._position = max(self._position, position)
        return True

    def _lose(self) -> None:
        """No stream from now on, until the thread opens another."""
        sock, self._sock = self._sock, None
        self._pending = b""
        self._entries.clear()
        if sock is not None:
            with contextlib.suppress(OSError):  # wakes the thread's select; it closes the socket
                sock.shutdown(socket.SHUT_RDWR)
