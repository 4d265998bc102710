"""Mount mappings imported from ``docker inspect`` output (its ``Mounts`` entries).

``docker inspect CONTAINER`` prints a JSON array with one object per container; each has ``Id``,
``Name`` and ``Mounts``, a list of ``{"Type", "Source", "Destination", "RW", ...}``. A ``bind``
mount's ``Source`` is a host path, so its files are the host's: the mapping gets the host's
filesystem id. A ``volume``'s ``Source`` is the volume's directory on the Docker host, also host
files (readable by the client only if it runs on that host with the rights to). Mounts without a
``Source`` (``tmpfs``) live only inside the container and are left out: their paths keep the
container's own filesystem id, so they are never read or watched on the host.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from selfctx.adapters.mounts.errors import MountConfigError
from selfctx.adapters.mounts.spec import MountSpec

__all__ = [
    "DockerMounts",
    "container_filesystem_id",
    "mounts_from_docker_inspect",
    "read_docker_inspect",
]

HOST_MOUNT_TYPES: Final = frozenset({"bind", "volume"})


@attrs.frozen
class DockerMounts:
    """What one container's ``docker inspect`` entry says about its mounts."""

    container_id: str
    name: str
    mounts: tuple[MountSpec, ...]
    """One per host-backed mount, on the filesystem ``host``."""
    skipped: tuple[str, ...] = ()
    """Destinations left out (container-only mounts such as tmpfs)."""


def container_filesystem_id(container_id: str) -> str:
    """The id declared for a container's own files: ``docker:`` and its full id."""
    return f"docker:{container_id}"


def _pick(containers: Sequence[Mapping[str, Any]], container: str | None, where: str) -> Any:
    if container is None:
        if len(containers) != 1:
            names = [c.get("Name", "?") for c in containers]
            raise MountConfigError(where, f"holds {len(containers)} containers {names}; name one")
        return containers[0]
    for entry in containers:
        name = str(entry.get("Name", "")).lstrip("/")
        if container in (name, "/" + name) or str(entry.get("Id", "")).startswith(container):
            return entry
    raise MountConfigError(where, f"no container {container!r} in it")


def mounts_from_docker_inspect(
    data: str | bytes | Sequence[Any] | Mapping[str, Any],
    *,
    container: str | None = None,
    where: str = "<docker inspect>",
) -> DockerMounts:
    """The host-backed mounts of one container in ``docker inspect`` output (text or parsed).

    ``container`` (a name or an id prefix) picks one when the output holds several.
    """
    if isinstance(data, str | bytes):
        try:
            data = json.loads(data)
        except ValueError as exc:
            raise MountConfigError(where, f"not JSON: {exc}") from exc
    parsed: Any = [data] if isinstance(data, Mapping) else data
    if not isinstance(parsed, list | tuple) or not all(isinstance(c, Mapping) for c in parsed):
        raise MountConfigError(where, "expected docker inspect output: a list of containers")
    containers: Sequence[Mapping[str, Any]] = parsed
    entry = _pick(containers, container, where)
    container_id = entry.get("Id")
    if not isinstance(container_id, str) or not container_id:
        raise MountConfigError(where, "the container has no 'Id'")
    raw_mounts = entry.get("Mounts")
    if raw_mounts is None:  # docker prints null for a container without mounts
        raw_mounts = []
    if not isinstance(raw_mounts, list):
        raise MountConfigError(where, "'Mounts' must be a list")
    specs = []
    skipped = []
    for n, mount in enumerate(raw_mounts, start=1):
        if not isinstance(mount, Mapping):
            raise MountConfigError(where, f"Mounts[{n}] is not an object")
        source, dest = mount.get("Source"), mount.get("Destination")
        if not isinstance(dest, str) or not dest:
            raise MountConfigError(where, f"Mounts[{n}] has no 'Destination'")
        kind = mount.get("Type", "bind")
        if kind not in HOST_MOUNT_TYPES or not isinstance(source, str) or not source:
            skipped.append(dest)
            continue
        specs.append(
            MountSpec(agent=dest, canonical=source, read_only=not bool(mount.get("RW", True)))
        )
    return DockerMounts(
        container_id=container_id,
        name=str(entry.get("Name", "")).lstrip("/"),
        mounts=tuple(specs),
        skipped=tuple(skipped),
    )


def read_docker_inspect(path: str, *, container: str | None = None) -> DockerMounts:
    """:func:`mounts_from_docker_inspect` on a file holding ``docker inspect`` output."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise MountConfigError(path, f"cannot read it: {exc.strerror or exc}") from exc
    return mounts_from_docker_inspect(text, container=container, where=path)
