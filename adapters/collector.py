"""Python's cyclic garbage collector paused while a bounded piece of work allocates much that
lives on (decision 0076: an inspector page; decision 0098: an assembly).

The collector is one per process: every pause goes through :data:`COLLECTOR`, a counter, so
that work on several threads re-enables it only when the last of them is done (and only if it
was enabled before the first began).
"""

from __future__ import annotations

import gc
import threading

__all__ = ["COLLECTOR", "Collector"]


class Collector:
    """The collector paused while any ``with COLLECTOR:`` block runs. Work that builds a page or
    a prompt of a long session allocates hundreds of thousands of objects, most of which live on
    in caches; each full collection meanwhile walks every object of the process, about as long
    as the work itself. Reference counting still frees what the work drops; cycles are collected
    after the last block ends, when the collector's counts next say so."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._was_enabled = False

    def __enter__(self) -> None:
        with self._lock:
            if self._users == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._users += 1

    def __exit__(self, *_: object) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0 and self._was_enabled:
                gc.enable()


COLLECTOR = Collector()
"""The process's one pause counter."""
