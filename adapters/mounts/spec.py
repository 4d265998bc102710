"""Configured mounts: what a configuration says, before the host's filesystem id is known."""

from __future__ import annotations

from typing import Final

import attrs

from selfctx.domain.mounts import MountMapping, MountTable

__all__ = ["HOST", "MountConfig", "MountSpec"]

HOST: Final = "host"
"""Stands for the host's filesystem id in a configuration."""


@attrs.frozen
class MountSpec:
    """One configured mount; ``filesystem`` may be :data:`HOST`."""

    agent: str
    """Where the agent sees the mount."""
    canonical: str
    """Where the files are."""
    filesystem: str = HOST
    """The filesystem the canonical path is on: ``host`` or a declared id."""
    read_only: bool = False
    """Whether the agent may only read it (informational)."""

    def resolve(self, host_filesystem_id: str) -> MountMapping:
        """The mapping with ``host`` replaced by the host's id (validates the paths)."""
        fs = host_filesystem_id if self.filesystem == HOST else self.filesystem
        return MountMapping(self.agent, self.canonical, fs, read_only=self.read_only)


@attrs.frozen
class MountConfig:
    """The mounts an agent sees, as configured."""

    default_filesystem: str = HOST
    """The filesystem of every path under no mount: ``host`` or a declared id."""
    mounts: tuple[MountSpec, ...] = ()

    def mappings(self, host_filesystem_id: str) -> tuple[MountMapping, ...]:
        return tuple(spec.resolve(host_filesystem_id) for spec in self.mounts)

    def default_filesystem_id(self, host_filesystem_id: str) -> str:
        return host_filesystem_id if self.default_filesystem == HOST else self.default_filesystem

    def table(self, host_filesystem_id: str) -> MountTable:
        """The mount table for a client whose host filesystem id is ``host_filesystem_id``."""
        return MountTable(
            self.default_filesystem_id(host_filesystem_id), self.mappings(host_filesystem_id)
        )
