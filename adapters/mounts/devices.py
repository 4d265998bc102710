"""Spotting bind mounts nobody configured, from ``stat().st_dev`` (docs/specification.md §3, mount
mappings: a fallback).

A file whose device differs from the device of the allowed root it was read under sits on
another mount: a bind mount, a network share, a separate volume. If no mount mapping covers it,
its identity may be wrong (for example a client running inside a sandbox gives a bind-mounted
file the container's filesystem id instead of the host's), so the detector *flags* it: one
:class:`UnconfiguredMount` per (root, device), logged once. It never changes identity; mount
mappings take precedence. It uses the ``fstat`` the reader makes anyway: no extra I/O per file.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence

import attrs

from selfctx.domain.mounts import normalize_absolute

__all__ = ["UnconfiguredMount", "UnconfiguredMounts"]

_log = logging.getLogger(__name__)


def _within(path: str, root: str) -> bool:
    return root == "/" or path == root or path.startswith(root + "/")


@attrs.frozen
class UnconfiguredMount:
    """A file on another device than its root, under no mount mapping."""

    path: str
    """The first file seen on that device."""
    device: int
    root: str
    """The allowed root the file was read under."""
    root_device: int


class UnconfiguredMounts:
    """Collects :class:`UnconfiguredMount` flags; its :meth:`observe` is the reader's stat hook.

    Call :meth:`configure` with the reader's roots and the canonical prefixes of the configured
    mappings before files are read (the composition root does).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._roots: list[tuple[str, int]] = []
        self._mapped: tuple[str, ...] = ()
        self._flags: dict[tuple[str, int], UnconfiguredMount] = {}

    def configure(self, roots: Sequence[str], mapped_prefixes: Sequence[str] = ()) -> None:
        """Record each root's device (one ``stat`` per root, now) and the mapped prefixes."""
        known = []
        for root in roots or ["/"]:
            real = os.path.realpath(normalize_absolute(root))
            try:
                known.append((real, os.stat(real).st_dev))
            except OSError:
                continue  # a root that does not exist holds nothing to flag
        known.sort(key=lambda item: len(item[0]), reverse=True)  # deepest root first
        with self._lock:
            self._roots = known
            self._mapped = tuple(normalize_absolute(p) for p in mapped_prefixes)

    def observe(self, path: str, device: int) -> None:
        """The reader read ``path`` (canonical) and found it on ``device``."""
        if any(_within(path, prefix) for prefix in self._mapped):
            return  # configured: mappings take precedence
        root = next(((r, d) for r, d in self._roots if _within(path, r)), None)
        if root is None or root[1] == device:
            return
        key = (root[0], device)
        with self._lock:
            if key in self._flags:
                return
            flag = UnconfiguredMount(path=path, device=device, root=root[0], root_device=root[1])
            self._flags[key] = flag
        _log.warning(
            "%s is on device %d:%d, not on the device of %s: probably a mount no mapping "
            "describes; add one if the agent sees it under another path",
            path,
            os.major(device),
            os.minor(device),
            root[0],
        )

    def flags(self) -> list[UnconfiguredMount]:
        """Every flag so far, one per (root, device), in the order they were raised."""
        with self._lock:
            return list(self._flags.values())
