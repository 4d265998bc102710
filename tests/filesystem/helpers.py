"""Helpers for tests on real files: waiting on observable effects, and running code as an
unprivileged user (root reads files whatever their mode)."""

from __future__ import annotations

import os
import pickle
import time
from collections.abc import Callable
from typing import Any, TypeVar

from selfctx.application.service import ContextService

__all__ = ["NOBODY", "eventually", "history", "run_unprivileged", "write"]

T = TypeVar("T")

NOBODY = 65534
"""uid and gid of ``nobody`` on Debian-like systems."""

DEADLINE = 20.0
"""Seconds a watcher effect may take before a test gives up (generous for loaded CI machines;
tests poll, so a fast machine never waits this long)."""


def eventually(check: Callable[[], T], what: str, timeout: float = DEADLINE) -> T:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def history(service: ContextService, object_id: str) -> list[tuple[str | None, str | None]]:
    """``(content, content_status)`` of every stored version, oldest first."""
    return [
        (v.document.get("content"), v.document.get("content_status"))
        for v in service.history(object_id)
    ]


def write(path: os.PathLike[str] | str, text: str) -> None:
    """Write a file the way most programs do: truncate, write, close."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def run_unprivileged(fn: Callable[[], Any], uid: int = NOBODY) -> Any:
    """Run ``fn`` in a forked child with ``uid`` (when running as root) and return its result.

    Exceptions come back as ``("error", type name, message)``. Not running as root, ``fn`` runs
    here: permissions already apply.
    """
    if os.geteuid() != 0:
        try:
            return fn()
        except Exception as exc:
            return ("error", type(exc).__name__, str(exc))
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        status = 0
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            try:
                result: Any = fn()
            except Exception as exc:
                result = ("error", type(exc).__name__, str(exc))
            payload = pickle.dumps(result)
        except BaseException as exc:  # even a failure to pickle must reach the parent
            payload = pickle.dumps(("error", type(exc).__name__, str(exc)))
            status = 1
        with os.fdopen(write_end, "wb") as out:
            out.write(payload)
        os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as inp:
        data = inp.read()
    os.waitpid(pid, 0)
    return pickle.loads(data)
