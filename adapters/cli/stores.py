"""The persistent store a command that inspects or changes stored sessions works on."""

from __future__ import annotations

from typing import Final

from selfctx.adapters.config import load_config
from selfctx.domain.errors import InvalidInput, MissingInput

__all__ = ["STORE_ENV", "STORE_HELP", "persistent_store"]

STORE_ENV: Final = "SELFCTX_STORE"
STORE_HELP: Final = (
    "memory, auto (the local XTDB node) or xtdb://HOST:PORT (default: the store setting, "
    "$SELFCTX_STORE or the configuration file's, else memory)"
)


def persistent_store(spec: str | None, advice: str) -> str:
    """``--store`` (or the ``store`` setting, when a variable or the configuration file sets
    it) when it names a persistent store; else :class:`InvalidInput` saying what to give, the
    in-memory store refused with ``advice`` (it lives only inside the process that made it)."""
    config = load_config()
    if not spec and config.is_set("store"):
        spec = config.get("store")
    if not spec:
        raise MissingInput(
            "store",
            "this command reads the sessions a persistent store keeps; give --store auto (the "
            "local XTDB node) or --store xtdb://HOST:PORT, or set $SELFCTX_STORE or `store` in "
            "the configuration file (docs/configuration.md)",
        )
    if spec == "memory":
        raise InvalidInput(
            "store", spec, f"the in-memory store lives only inside one process; {advice}"
        )
    return spec
