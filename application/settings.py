"""Settings a harness may tune; every default is what a user would expect without asking."""

from __future__ import annotations

import attrs

from selfctx.domain.session.state import CollapseWindow, PolicyConfig

__all__ = ["Settings"]


@attrs.frozen
class Settings:
    """Tunable limits and policies of a :class:`~selfctx.application.service.ContextService`."""

    window: CollapseWindow = CollapseWindow()
    """Auto-collapse window for new sessions (the design's default: 5 per turn, 3 turns)."""
    policy: PolicyConfig = PolicyConfig()
    """Layout and collapse policy for new sessions: the design's (``ssot``) by default here; the
    composition root gives new sessions ``selfctx.application.policies.DEFAULT_POLICY`` unless told
    otherwise."""
    max_file_bytes: int = 2 * 1024 * 1024
    """Files larger than this are indexed as metadata only (content null, reason shown)."""
    max_output_bytes: int = 8 * 1024 * 1024
    """Tool outputs and file contents handed over by a harness larger than this are refused."""
