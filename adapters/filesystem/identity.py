"""The host's filesystem id (SSOT §5.4): SHA-256 of the machine id."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from selfctx.domain.errors import SelfContextError

__all__ = ["MACHINE_ID_FILES", "HostIdentityUnavailable", "host_filesystem_id"]

MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")


class HostIdentityUnavailable(SelfContextError):
    """No machine id could be read and none was configured."""

    kind = "host_identity_unavailable"


def host_filesystem_id(
    configured: str | None = None, candidates: Sequence[str] = MACHINE_ID_FILES
) -> str:
    """The configured id if given, else the SHA-256 (hex) of the first readable machine id."""
    if configured:
        return configured
    for candidate in candidates:
        try:
            machine_id = Path(candidate).read_text(encoding="utf-8").strip()
        except OSError:
            continue
        if machine_id:
            return hashlib.sha256(machine_id.encode("utf-8")).hexdigest()
    raise HostIdentityUnavailable(
        f"no machine id in {', '.join(candidates)}; configure the host filesystem id "
        "(SELFCTX_HOST_FILESYSTEM_ID or host_filesystem_id=...)"
    )
