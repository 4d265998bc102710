"""A ``selfctx serve --stdio`` subprocess driven the way a harness drives it, with the server's
CPU time and memory read from ``/proc``."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

__all__ = ["RpcFailure", "StdioClient", "cpu_ns", "rss_bytes"]

SERVE = (sys.executable, "-m", "selfctx.adapters.cli.main", "serve", "--stdio")


class RpcFailure(Exception):
    """The server answered with an error object."""

    def __init__(self, error: Mapping[str, Any]) -> None:
        super().__init__(error.get("message"))
        self.error = dict(error)
        self.kind = str(error.get("data", {}).get("kind", ""))


def cpu_ns(pid: int) -> int:
    """CPU time of every thread of process ``pid`` so far, in nanoseconds (``schedstat``: the
    scheduler's own account, at nanosecond resolution; ``/proc/<pid>/stat`` ticks are 10 ms)."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # the thread ended meanwhile
    return total


def rss_bytes(pid: int) -> int:
    """Resident memory of process ``pid`` (``VmRSS``)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class StdioClient:
    """One server process; :meth:`call` sends a request and waits for its answer."""

    def __init__(
        self,
        *,
        store: str,
        workspace: Path,
        extra: Sequence[str] = (),
        command: Sequence[str] | None = None,
        stderr: IO[bytes] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        argv = [*(command or SERVE), "--store", store, "--workspace", str(workspace), *extra]
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr if stderr is not None else subprocess.DEVNULL,
            cwd=workspace,
            env={**os.environ, **(env or {})},
        )
        self.next_id = 0
        self.sent_bytes = 0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def encode(self, method: str, params: Mapping[str, Any]) -> bytes:
        self.next_id += 1
        request = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        return json.dumps(request, separators=(",", ":")).encode("utf-8") + b"\n"

    def send(self, line: bytes) -> Any:
        """Send an encoded request (:meth:`encode`) and return its result."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line)
        self.proc.stdin.flush()
        self.sent_bytes += len(line)
        answer = self.proc.stdout.readline()
        if not answer:
            raise RuntimeError(f"the server (pid {self.pid}) ended its output")
        response = json.loads(answer)
        if "error" in response:
            raise RpcFailure(response["error"])
        return response["result"]

    def call(self, method: str, **params: Any) -> Any:
        return self.send(self.encode(method, params))

    def cpu_ns(self) -> int:
        return cpu_ns(self.pid)

    def rss(self) -> int:
        return rss_bytes(self.pid)

    def close(self) -> int:
        """End the input and wait for the server to exit."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=120)
        finally:
            if self.proc.stdout is not None:
                self.proc.stdout.close()

    def kill(self) -> None:
        """``kill -9``, as a crash would."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
