"""The persistent store a command that inspects or changes stored sessions works on."""

from __future__ import annotations

import os
from typing import Final

from selfctx.domain.errors import InvalidInput, MissingInput

__all__ = ["STORE_ENV", "persistent_store"]

STORE_ENV: Final = "SELFCTX_STORE"


def persistent_store(spec: str | None, advice: str) -> str:
    """``--store`` (or ``$SELFCTX_STORE``) when it names a persistent store; else
    :class:`InvalidInput` saying what to give, the in-memory store refused with ``advice`` (it
    lives only inside the process that made it)."""
    spec = spec or os.environ.get(STORE_ENV)
    if not spec:
        raise MissingInput(
            "store",
            "this command reads the sessions a persistent store keeps; give --store auto (the "
            "local XTDB node) or --store xtdb://HOST:PORT, or set $SELFCTX_STORE",
        )
    if spec == "memory":
        raise InvalidInput(
            "store", spec, f"the in-memory store lives only inside one process; {advice}"
        )
    return spec
