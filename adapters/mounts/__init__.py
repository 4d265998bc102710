"""Mount mappings from configuration: a TOML file, ``docker inspect`` output, and the
``stat().st_dev`` check that flags mounts nobody configured."""

from selfctx.adapters.mounts.config import load_mount_config, parse_mount_config
from selfctx.adapters.mounts.devices import UnconfiguredMount, UnconfiguredMounts
from selfctx.adapters.mounts.docker import (
    DockerMounts,
    container_filesystem_id,
    mounts_from_docker_inspect,
    read_docker_inspect,
)
from selfctx.adapters.mounts.errors import MountConfigError
from selfctx.adapters.mounts.spec import HOST, MountConfig, MountSpec

__all__ = [
    "HOST",
    "DockerMounts",
    "MountConfig",
    "MountConfigError",
    "MountSpec",
    "UnconfiguredMount",
    "UnconfiguredMounts",
    "container_filesystem_id",
    "load_mount_config",
    "mounts_from_docker_inspect",
    "parse_mount_config",
    "read_docker_inspect",
]
