"""The host's filesystem id (SSOT §5.4): SHA-256 of the machine id, or a configured id."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from selfctx.adapters.filesystem.identity import HostIdentityUnavailable, host_filesystem_id


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
