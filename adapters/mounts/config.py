"""Mount mappings from a TOML file (docs/specification.md §3, mount mappings: the harness configures
them at startup).

The format (docs/specification.md, "Mount configuration")::

    # Paths the agent sees outside every [[mounts]] entry belong to this filesystem:
    # "host" (the default: an agent that is not sandboxed) or a declared id.
    default_filesystem = "container:sandbox-1"

    [[mounts]]
    agent = "/workspace"            # the prefix the agent sees
    canonical = "/home/me/project"  # where the files are (the host path, for a bind mount)
    filesystem = "host"             # "host" (default) or a declared filesystem id
    read_only = false               # informational

    [docker]                        # optional: import the Mounts of `docker inspect` output
    inspect = "sandbox.json"        # relative to this file
    container = "sandbox-1"         # which container, if the output holds several

The word ``host`` stands for the host's filesystem id, which is only known when the service is
built; :meth:`MountConfig.table` resolves it. Unknown keys are refused, so a typo cannot silently
drop a mapping.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from typing import Any, Final

from selfctx.adapters.mounts.docker import container_filesystem_id, read_docker_inspect
from selfctx.adapters.mounts.errors import MountConfigError
from selfctx.adapters.mounts.spec import HOST, MountConfig, MountSpec
from selfctx.domain.errors import InvalidInput

__all__ = ["load_mount_config", "parse_mount_config"]

_TOP_KEYS: Final = frozenset({"default_filesystem", "mounts", "docker"})
_MOUNT_KEYS: Final = frozenset({"agent", "canonical", "filesystem", "read_only"})
_DOCKER_KEYS: Final = frozenset({"inspect", "container"})


def _require(where: str, condition: bool, reason: str) -> None:
    if not condition:
        raise MountConfigError(where, reason)


def _check_keys(where: str, table: Mapping[str, Any], allowed: frozenset[str]) -> None:
    unknown = sorted(set(table) - allowed)
    _require(where, not unknown, f"unknown key(s) {unknown}; allowed: {sorted(allowed)}")


def _string(where: str, table: Mapping[str, Any], key: str, default: str | None = None) -> str:
    value = table.get(key, default)
    _require(where, isinstance(value, str) and bool(value), f"'{key}' must be a non-empty string")
    assert isinstance(value, str)
    return value


def parse_mount_config(text: str, *, where: str = "<mounts>", base_dir: str = ".") -> MountConfig:
    """Parse the TOML text of a mount configuration; ``base_dir`` anchors relative file names."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MountConfigError(where, f"not valid TOML: {exc}") from exc
    _check_keys(where, data, _TOP_KEYS)
    specs: list[MountSpec] = []
    raw_mounts = data.get("mounts", [])
    _require(where, isinstance(raw_mounts, list), "'mounts' must be an array of tables")
    for n, raw in enumerate(raw_mounts, start=1):
        at = f"{where}: mounts[{n}]"
        _require(at, isinstance(raw, dict), "each mount must be a table")
        _check_keys(at, raw, _MOUNT_KEYS)
        read_only = raw.get("read_only", False)
        _require(at, isinstance(read_only, bool), "'read_only' must be true or false")
        specs.append(
            MountSpec(
                agent=_string(at, raw, "agent"),
                canonical=_string(at, raw, "canonical"),
                filesystem=_string(at, raw, "filesystem", HOST),
                read_only=read_only,
            )
        )
    default = data.get("default_filesystem")
    docker = data.get("docker")
    if docker is not None:
        at = f"{where}: docker"
        _require(at, isinstance(docker, dict), "'docker' must be a table")
        _check_keys(at, docker, _DOCKER_KEYS)
        inspect_path = os.path.join(base_dir, _string(at, docker, "inspect"))
        container = docker.get("container")
        _require(at, container is None or isinstance(container, str), "'container' is a string")
        imported = read_docker_inspect(inspect_path, container=container)
        specs.extend(imported.mounts)
        if default is None:
            default = container_filesystem_id(imported.container_id)
    if default is None:
        default = HOST
    _require(where, isinstance(default, str) and bool(default), "'default_filesystem' is a string")
    config = MountConfig(default_filesystem=default, mounts=tuple(specs))
    try:
        config.mappings("host-check")  # validate every path now, naming the file
    except InvalidInput as exc:
        raise MountConfigError(where, str(exc)) from exc
    return config


def load_mount_config(path: str) -> MountConfig:
    """Read and parse a mount configuration file."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise MountConfigError(path, f"cannot read it: {exc.strerror or exc}") from exc
    return parse_mount_config(text, where=path, base_dir=os.path.dirname(os.path.abspath(path)))
