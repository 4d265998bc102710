"""Worker processes of ``selfctx proxy --workers N``: each a ``selfctx proxy`` of its own on a
free port of 127.0.0.1, requiring a secret of the run (so that no other local process can skip the
front, its token and its checks), ending when the process that started it ends (it watches its
standard input, which only that process holds)."""

from __future__ import annotations

import atexit
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

__all__ = ["exit_with_stdin", "start_workers"]

STOP_SECONDS = 10.0
"""How long the front waits, in all, for its workers to end before it kills them."""

_LISTENING = re.compile(r"listening on (http://\S+)")


def start_workers(count: int, argv: Sequence[str], timeout: float = 120.0) -> tuple[str, list[str]]:
    """Start ``count`` workers with ``argv`` (``selfctx proxy`` options); the run's secret and
    each worker's base URL. Raises RuntimeError if one does not start."""
    secret = secrets.token_urlsafe(32)
    env = {**os.environ, "SELFCTX_PROXY_TOKEN": secret}
    command = [sys.executable, "-m", "selfctx.adapters.cli.main", "proxy"]
    command += ["--host", "127.0.0.1", "--port", "0", "--workers", "1", "--exit-with-stdin"]
    processes = []
    for _ in range(count):
        processes.append(
            subprocess.Popen(
                [*command, *argv],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
                text=True,
            )
        )

    def stop() -> None:
        # Workers end gracefully within their own 5 s (serving.py); one that has not ended
        # when the whole shutdown's bound has passed is killed, so the front always ends.
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_SECONDS
        for process in processes:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    atexit.register(stop)
    urls = []
    for process in processes:
        assert process.stdout is not None
        line = _first_line(process, timeout)
        match = _LISTENING.search(line)
        if match is None:
            stop()
            raise RuntimeError(f"a worker of the proxy did not start: {line.strip()!r}")
        urls.append(match.group(1))
    return secret, urls


def _first_line(process: subprocess.Popen[str], timeout: float) -> str:
    found: list[str] = []
    reader = threading.Thread(
        target=lambda: found.append(process.stdout.readline() if process.stdout else ""),
        daemon=True,
    )
    reader.start()
    reader.join(timeout)
    return found[0] if found else ""


def exit_with_stdin() -> None:
    """End this process (as SIGTERM does) once its standard input closes: the process that
    started it, which holds the other end, has ended."""

    def watch() -> None:
        while sys.stdin.buffer.read(4096):
            pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, daemon=True).start()
