"""Host filesystem adapters: identity, reading, and tracking (watchdog)."""

from selfctx.adapters.filesystem.identity import HostIdentityUnavailable, host_filesystem_id
from selfctx.adapters.filesystem.reader import LocalFileReader
from selfctx.adapters.filesystem.tracker import WatchdogTracker

__all__ = ["HostIdentityUnavailable", "LocalFileReader", "WatchdogTracker", "host_filesystem_id"]
