"""Errors of mount configuration."""

from __future__ import annotations

from selfctx.domain.errors import SelfContextError

__all__ = ["MountConfigError"]


class MountConfigError(SelfContextError):
    """A mount configuration (TOML file, ``docker inspect`` output) cannot be used as it is.

    ``where`` names the file (and the entry), ``reason`` says what to fix.
    """

    kind = "mount_config_error"

    def __init__(self, where: str, reason: str) -> None:
        self.where = where
        self.reason = reason
        super().__init__(f"{where}: {reason}")
