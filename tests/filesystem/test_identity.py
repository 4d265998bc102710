"""The host's filesystem id (docs/specification.md §1): SHA-256 of the machine id, or a configured
id."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from selfctx.adapters.filesystem.identity import (
    HostIdentityUnavailable,
    host_filesystem_id,
    macos_platform_uuid,
    windows_machine_guid,
)


def test_the_first_readable_machine_id_is_hashed(tmp_path: Path) -> None:
    (tmp_path / "second").write_text("abc123\n")

    found = host_filesystem_id(candidates=[str(tmp_path / "missing"), str(tmp_path / "second")])

    assert found == hashlib.sha256(b"abc123").hexdigest()


def test_an_empty_machine_id_file_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "empty").write_text("\n")
    (tmp_path / "real").write_text("feed\n")

    found = host_filesystem_id(candidates=[str(tmp_path / "empty"), str(tmp_path / "real")])

    assert found == hashlib.sha256(b"feed").hexdigest()


def test_a_configured_id_wins(tmp_path: Path) -> None:
    assert host_filesystem_id("declared-id", candidates=[str(tmp_path / "x")]) == "declared-id"


def test_no_machine_id_and_none_configured_is_a_clear_error(tmp_path: Path) -> None:
    missing = str(tmp_path / "machine-id")

    with pytest.raises(HostIdentityUnavailable) as err:
        host_filesystem_id(candidates=[missing])

    assert err.value.kind == "host_identity_unavailable"
    assert missing in str(err.value) and "SELFCTX_HOST_FILESYSTEM_ID" in str(err.value)


# -- other platforms: their own machine ids, asked through a faked answer ---------------------

IOREG_ANSWER = """+-o MacBookPro18,3  <class IOPlatformExpertDevice, id 0x100000215, registered>
    {
      "IOPlatformSerialNumber" = "C02XXXXXXXXX"
      "IOPlatformUUID" = "3F1E2D4C-5B6A-4798-8A9B-0C1D2E3F4A5B"
      "model" = <"MacBookPro18,3">
    }
"""


def test_macos_hashes_the_platform_uuid_that_ioreg_prints() -> None:
    uuid = "3F1E2D4C-5B6A-4798-8A9B-0C1D2E3F4A5B"
    assert macos_platform_uuid(lambda: IOREG_ANSWER) == uuid

    found = host_filesystem_id(
        platform="darwin", macos=lambda: macos_platform_uuid(lambda: IOREG_ANSWER)
    )

    assert found == hashlib.sha256(uuid.encode()).hexdigest()


def test_windows_hashes_the_machine_guid_of_the_registry() -> None:
    guid = "9b1d6c2e-4f3a-4e5b-8c7d-1a2b3c4d5e6f"
    assert windows_machine_guid(lambda: guid + "\n") == guid

    found = host_filesystem_id(platform="win32", windows=lambda: guid)

    assert found == hashlib.sha256(guid.encode()).hexdigest()


def test_a_platform_that_cannot_answer_is_a_clear_error(tmp_path: Path) -> None:
    def refuses() -> str:
        raise OSError("ioreg: command not found")

    assert macos_platform_uuid(refuses) is None
    assert macos_platform_uuid(lambda: "no uuid here") is None
    with pytest.raises(HostIdentityUnavailable, match="IOPlatformUUID"):
        host_filesystem_id(platform="darwin", macos=lambda: None)

    def no_key() -> str:
        raise FileNotFoundError("the system cannot find the file specified")

    assert windows_machine_guid(no_key) is None
    with pytest.raises(HostIdentityUnavailable, match="MachineGuid"):
        host_filesystem_id(platform="win32", windows=lambda: windows_machine_guid(no_key))


def test_linux_reads_the_machine_id_files_not_the_other_platforms(tmp_path: Path) -> None:
    (tmp_path / "machine-id").write_text("linux-id\n")

    def must_not_be_asked() -> str | None:
        raise AssertionError("asked the wrong platform")

    found = host_filesystem_id(
        platform="linux",
        candidates=[str(tmp_path / "machine-id")],
        macos=must_not_be_asked,
        windows=must_not_be_asked,
    )

    assert found == hashlib.sha256(b"linux-id").hexdigest()
