"""The secret a node asks of every request, and where its clients find it (decision 0027).

Each start of a node draws a new secret and writes it to a key file named after the node's
address, ``<keys dir>/<host>-<port>``, readable by its owner only, in a directory only its owner
can enter. The node reads it from there when it starts; any client of the same user finds it from
the node's URL alone, so ``open_store("xtdb://127.0.0.1:PORT")`` works from any process, and
other users get nothing. A restarted node has a new secret: a client that is refused reads the
key file again.

The keys directory is ``$SELFCTX_XTDB_KEYS``, else ``$XDG_STATE_HOME/self-context-manager/
xtdb-keys`` (``~/.local/state/...``). The secret never appears in a URL, a log or an error.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path
from urllib.parse import urlsplit

from selfctx.adapters.config import setting
from selfctx.adapters.xtdb.errors import XtdbSetupError

__all__ = [
    "KEYS_ENV",
    "key_file",
    "keys_dir",
    "new_secret",
    "private_dir",
    "read_key",
    "remove_key",
    "write_key",
]

KEYS_ENV = "SELFCTX_XTDB_KEYS"

_LOOPBACK_NAMES = {"localhost": "127.0.0.1", "ip6-localhost": "::1"}


def keys_dir() -> Path:
    """Where key files live (``$SELFCTX_XTDB_KEYS`` or the user's state directory)."""
    override = setting("xtdb.keys")
    if override:
        return Path(override)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "self-context-manager" / "xtdb-keys"


def key_file(url: str) -> Path:
    """The key file of the node at ``url`` (``http://host:port`` or ``xtdb://host:port``)."""
    parts = urlsplit(url if "://" in url else "http://" + url)
    host = (parts.hostname or "127.0.0.1").lower()
    host = _LOOPBACK_NAMES.get(host, host)
    if parts.port is None:
        raise XtdbSetupError(f"{url!r} names no port: expected xtdb://HOST:PORT")
    return keys_dir() / f"{host}-{parts.port}"


def new_secret() -> str:
    """256 random bits, as hex."""
    return secrets.token_hex(32)


def private_dir(path: Path) -> Path:
    """Create ``path`` (and its parents) if needed and make it the owner's alone (0700).

    An existing directory of another user, or one shared on purpose (sticky, like /tmp), is
    refused rather than changed.
    """
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise XtdbSetupError(f"{path} is not a directory")
    if info.st_uid != os.geteuid():
        raise XtdbSetupError(f"{path} belongs to another user (uid {info.st_uid}): not using it")
    if info.st_mode & stat.S_ISVTX:
        raise XtdbSetupError(f"{path} is a shared directory (sticky): choose a folder of your own")
    if stat.S_IMODE(info.st_mode) & 0o077:
        path.chmod(0o700)
    return path


def write_key(path: Path, secret: str) -> None:
    """Write ``secret`` to ``path`` (0600), replacing any earlier key in one step."""
    private_dir(path.parent)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, secret.encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)


def read_key(url: str) -> str | None:
    """The secret of the node at ``url`` from its key file; None if there is none or it cannot
    be read (the node then answers 401, and says so)."""
    try:
        path = key_file(url)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except (OSError, XtdbSetupError):
        return None
    with os.fdopen(fd, "rb") as f:
        text = f.read(1024).decode("ascii", "replace").strip()
    return text or None


def remove_key(path: Path, secret: str) -> None:
    """Delete the key file if it still holds ``secret`` (a newer node may have replaced it)."""
    with contextlib.suppress(OSError):
        if path.read_text(encoding="ascii").strip() == secret:
            path.unlink()
