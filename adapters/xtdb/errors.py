"""Errors of running XTDB itself (fetching jars, starting nodes), as opposed to using a store.

Store errors (unreachable, rejected, conflict) are the port's own, in
``selfctx.application.ports.store``.
"""

from __future__ import annotations

from selfctx.domain.errors import SelfContextError


class XtdbSetupError(SelfContextError):
    """Something XTDB needs is missing: Java, Maven, the registry, the ``xtdb/`` project folder.

    The message names what is missing and how to provide it.
    """

    kind = "xtdb_setup"


class NodeStartError(SelfContextError):
    """An XTDB node did not come up: its process exited or never answered on its port.

    Carries the node's log file and the last lines of its log, which say why.
    """

    kind = "xtdb_node_start"

    def __init__(self, reason: str, *, log_file: str = "", log_tail: str = "") -> None:
        self.reason = reason
        self.log_file = log_file
        self.log_tail = log_tail
        detail = f"\n--- last lines of {log_file} ---\n{log_tail}" if log_tail else ""
        super().__init__(f"XTDB node failed to start: {reason}{detail}")
