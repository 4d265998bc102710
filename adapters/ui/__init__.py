"""``selfctx ui``: a local web inspector of what the model saw (decision 0055).

:class:`Inspector` is an ASGI application over a ``ContextService``: the store's sessions, each
session's requests as a timeline, each request exactly as it was sent (rebuilt from the log and
checked against the digest recorded then), every object's versions and diffs, and search.
``selfctx ui --store URL`` serves it on 127.0.0.1; ``selfctx proxy`` at ``/_selfctx/ui``.
"""

from __future__ import annotations

from selfctx.adapters.ui.app import Inspector

__all__ = ["Inspector"]
