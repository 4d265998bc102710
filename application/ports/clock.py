"""The clock port: the only way time reaches the application and the domain."""

from __future__ import annotations

import abc


class Clock(abc.ABC):
    """Tells the time."""

    @abc.abstractmethod
    def now(self) -> str:
        """The current time as an ISO-8601 UTC string with a ``Z`` suffix."""
