"""The host's filesystem id (docs/specification.md §1, source bindings): SHA-256 of the machine id
or its platform equivalent.

Linux (and most other Unix systems) keep the id in ``/etc/machine-id`` or dbus's copy of it;
macOS exposes the hardware UUID as ``IOPlatformUUID`` through ``ioreg``; Windows keeps
``MachineGuid`` in the registry under ``HKLM\\SOFTWARE\\Microsoft\\Cryptography``. Each is stable
across reboots and distinct per installation, which is what an id for "files that change together"
needs. How the platform is asked is injectable, so every platform's path is tested on any machine.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from selfctx.domain.errors import SelfContextError

__all__ = [
    "MACHINE_ID_FILES",
    "HostIdentityUnavailable",
    "host_filesystem_id",
    "macos_platform_uuid",
    "platform_machine_id",
    "windows_machine_guid",
]

MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")

_IOREG = ("ioreg", "-rd1", "-c", "IOPlatformExpertDevice")
_IOPLATFORM_UUID = re.compile(r'"IOPlatformUUID"\s*=\s*"([^"]+)"')
_WINDOWS_KEY = r"SOFTWARE\Microsoft\Cryptography"


class HostIdentityUnavailable(SelfContextError):
    """No machine id could be read and none was configured."""

    kind = "host_identity_unavailable"


def _run_ioreg() -> str:
    done = subprocess.run(_IOREG, capture_output=True, text=True, timeout=10, check=False)
    return done.stdout if done.returncode == 0 else ""


def macos_platform_uuid(run: Callable[[], str] = _run_ioreg) -> str | None:
    """macOS: the ``IOPlatformUUID`` that ``ioreg -rd1 -c IOPlatformExpertDevice`` prints."""
    try:
        match = _IOPLATFORM_UUID.search(run())
    except (OSError, subprocess.SubprocessError):
        return None
    return match.group(1) if match else None


def _read_machine_guid() -> str:
    if sys.platform != "win32":
        raise OSError("the registry exists only on Windows")
    import winreg

    flags = winreg.KEY_READ | getattr(winreg, "KEY_WOW64_64KEY", 0)
    with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, _WINDOWS_KEY, 0, flags) as key:
        value, _ = winreg.QueryValueEx(key, "MachineGuid")
    return str(value)


def windows_machine_guid(read: Callable[[], str] = _read_machine_guid) -> str | None:
    """Windows: ``MachineGuid`` under ``HKEY_LOCAL_MACHINE\\SOFTWARE\\Microsoft\\Cryptography``
    (the 64-bit view, also from a 32-bit Python)."""
    try:
        return read().strip() or None
    except (OSError, ImportError):
        return None


def platform_machine_id(
    platform: str = sys.platform,
    candidates: Sequence[str] = MACHINE_ID_FILES,
    *,
    macos: Callable[[], str | None] = macos_platform_uuid,
    windows: Callable[[], str | None] = windows_machine_guid,
) -> tuple[str | None, str]:
    """The platform's machine id (None if it cannot be read) and where it was looked for."""
    if platform == "darwin":
        return macos(), "IOPlatformUUID (ioreg)"
    if platform in ("win32", "cygwin"):
        return windows(), f"MachineGuid (HKLM\\{_WINDOWS_KEY})"
    for candidate in candidates:
        try:
            machine_id = Path(candidate).read_text(encoding="utf-8").strip()
        except OSError:
            continue
        if machine_id:
            return machine_id, candidate
    return None, ", ".join(candidates)


def host_filesystem_id(
    configured: str | None = None,
    candidates: Sequence[str] = MACHINE_ID_FILES,
    *,
    platform: str = sys.platform,
    macos: Callable[[], str | None] = macos_platform_uuid,
    windows: Callable[[], str | None] = windows_machine_guid,
) -> str:
    """The configured id if given, else the SHA-256 (hex) of the platform's machine id."""
    if configured:
        return configured
    machine_id, looked = platform_machine_id(platform, candidates, macos=macos, windows=windows)
    if machine_id:
        return hashlib.sha256(machine_id.encode("utf-8")).hexdigest()
    raise HostIdentityUnavailable(
        f"no machine id in {looked}; configure the host filesystem id "
        "(SELFCTX_HOST_FILESYSTEM_ID or host_filesystem_id=...)"
    )
