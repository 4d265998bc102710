"""Coalescing bursts of events per key: deliver once things have been quiet for a moment.

An editor's save, a formatter's rewrite or a ``git checkout`` produce a burst of events per file.
Each key waits until no event has arrived for ``delay`` seconds (but never longer than
``max_delay`` after its first event, so a file written without pause is still refreshed), then
every due key is delivered in one batch, from one thread. The delivery callback runs without any
lock held.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["Coalescer"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_log = logging.getLogger(__name__)


class Coalescer(Generic[K, V]):
    """Collects ``(key, value)`` notes and delivers the latest value per key after a quiet spell.

    ``merge(old, new)`` combines two notes for the same key (default: keep the new one).
    ``deliver(batch)`` receives ``{key: value}``; if it raises, ``on_error(batch, exc)`` is
    called (the thread keeps running).
    """

    def __init__(
        self,
        deliver: Callable[[dict[K, V]], None],
        on_error: Callable[[dict[K, V], BaseException], None],
        *,
        delay: float = 0.05,
        max_delay: float = 0.5,
        merge: Callable[[V, V], V] | None = None,
        name: str = "coalescer",
    ) -> None:
        self._deliver = deliver
        self._on_error = on_error
        self._delay = delay
        self._max_delay = max_delay
        self._merge = merge or (lambda old, new: new)
        self._cond = threading.Condition()
        self._pending: dict[K, tuple[float, float, V]] = {}
        """key -> (first note time, last note time, merged value)."""
        self._delivering = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def note(self, key: K, value: V) -> None:
        """Record an event for ``key``; its delivery waits for a quiet spell."""
        now = time.monotonic()
        with self._cond:
            if self._closed:
                return
            previous = self._pending.get(key)
            if previous is None:
                self._pending[key] = (now, now, value)
            else:
                self._pending[key] = (previous[0], now, self._merge(previous[2], value))
            self._cond.notify_all()

    def _due(self, first: float, last: float) -> float:
        return min(last + self._delay, first + self._max_delay)

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._closed and not self._pending:
                        return
                    now = time.monotonic()
                    if self._closed:
                        due_keys = list(self._pending)  # closing: deliver everything now
                    else:
                        due_keys = [
                            k for k, (f, la, _) in self._pending.items() if self._due(f, la) <= now
                        ]
                    if due_keys:
                        break
                    if self._pending:
                        wake = min(self._due(f, la) for f, la, _ in self._pending.values())
                        self._cond.wait(max(wake - now, 0.001))
                    else:
                        self._cond.wait()
                batch = {k: self._pending.pop(k)[2] for k in due_keys}
                self._delivering = True
            try:
                self._deliver(batch)
            except Exception as exc:  # recorded and reported, never swallowed
                _log.exception("delivering %d coalesced change(s) failed", len(batch))
                try:
                    self._on_error(batch, exc)
                except Exception:  # pragma: no cover - the error reporter itself failed
                    _log.exception("reporting a delivery failure failed")
            finally:
                with self._cond:
                    self._delivering = False
                    self._cond.notify_all()

    def idle(self, timeout: float = 5.0) -> bool:
        """Wait until nothing is pending or being delivered; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending or self._delivering:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))
        return True

    def close(self, timeout: float = 5.0) -> None:
        """Deliver what is pending now, then stop the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)
