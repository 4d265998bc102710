"""The real clock and id source."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from selfctx.application.ports.clock import Clock
from selfctx.application.ports.ids import IdSource

__all__ = ["SystemClock", "UuidIds"]


class SystemClock(Clock):
    """UTC wall-clock time with microseconds."""

    def now(self) -> str:
        return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class UuidIds(IdSource):
    """Random UUID4s, as 32 hex digits."""

    def new_id(self) -> str:
        return uuid.uuid4().hex
