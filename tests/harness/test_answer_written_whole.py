"""An answer is written whole to an output stream that takes fewer bytes than it is given: the
process's stdout is a raw stream when ``PYTHONUNBUFFERED`` is set, and a raw write to a pipe
returns what it wrote (a signal interrupting it, a full non-blocking pipe). Decision 0129."""

from __future__ import annotations

import fcntl
import io
import json
import os
import threading
from collections.abc import Iterator
from typing import Any

from selfctx.adapters.harness.rpc import LineServer, Method

ANSWER_CHARS = 1_000_000
"""Far more than a pipe holds (64 KiB on Linux): a non-blocking write takes only part of it."""


class _Big(LineServer):
    methods = {"big": Method(lambda _server, _params: "x" * ANSWER_CHARS, {}, {})}


def _lines(fd: int) -> Iterator[bytes]:
    with open(fd, "rb", buffering=0) as stream:
        pending = b""
        while True:
            chunk = stream.read(1 << 16)
            if not chunk:
                if pending:
                    yield pending
                return
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                yield line


def test_an_answer_larger_than_the_pipe_reaches_a_raw_non_blocking_stdout_whole() -> None:
    read_end, write_end = os.pipe()
    flags = fcntl.fcntl(write_end, fcntl.F_GETFL)
    fcntl.fcntl(write_end, fcntl.F_SETFL, flags | os.O_NONBLOCK)
    requests = b"".join(
        json.dumps({"jsonrpc": "2.0", "id": i, "method": "big"}).encode() + b"\n" for i in (1, 2)
    )
    errors: list[BaseException] = []

    def serve() -> None:
        # unbuffered: the raw stream a PYTHONUNBUFFERED process's stdout is
        with open(write_end, "wb", buffering=0) as out:
            try:
                _Big().serve(io.BytesIO(requests), out)
            except BaseException as exc:  # reported below
                errors.append(exc)

    server = threading.Thread(target=serve)
    server.start()
    answers: list[Any] = [json.loads(line) for line in _lines(read_end)]
    server.join(timeout=60)
    assert not errors
    assert [a["id"] for a in answers] == [1, 2]
    assert all(a["result"] == "x" * ANSWER_CHARS for a in answers)
