"""Host filesystem adapters: identity, reading, and tracking (watchdog)."""

from adapters.filesystem.identity import HostIdentityUnavailable, host_filesystem_id
from adapters.filesystem.reader import LocalFileReader
from adapters.filesystem.tracker import WatchdogTracker

__all__ = ["HostIdentityUnavailable", "LocalFileReader", "WatchdogTracker", "host_filesystem_id"]
