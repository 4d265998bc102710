"""Where XTDB's pieces live on this machine: the ``xtdb/`` project, the jar cache, node data.

Every location is a setting (docs/configuration.md): an environment variable or the
configuration file can move it, so CI and tests can isolate them:

- ``SELFCTX_XTDB_PROJECT``: the ``xtdb/`` folder (pom.xml, configs, the HTTP server source).
  Default: the copy installed with the package (``selfctx/xtdb/`` in a wheel), which is ``xtdb/``
  at the root of the source tree in an editable install.
- ``SELFCTX_XTDB_HOME``: the jar cache. Default ``$XDG_CACHE_HOME/self-context-manager/xtdb-1.24.5``
  (``~/.cache/...``); jars go to ``lib/`` below it, compiled namespaces to ``classes/``,
  Maven's downloads to ``m2/``.
- ``SELFCTX_XTDB_DATA``: the data directory of the local node ``--store auto`` uses. Default
  ``$XDG_DATA_HOME/self-context-manager/xtdb`` (``~/.local/share/...``).
"""

from __future__ import annotations

import os
from pathlib import Path

from selfctx.adapters.config import setting
from selfctx.adapters.xtdb.errors import XtdbSetupError

XTDB_VERSION = "1.24.5"
"""The XTDB release the project runs (xtdb-core; see xtdb/pom.xml for the other pins)."""

_APP = "self-context-manager"


def project_dir() -> Path:
    """The ``xtdb/`` folder holding pom.xml, the EDN config templates and the HTTP server."""
    override = setting("xtdb.project")
    # adapters/xtdb/paths.py -> two levels up is the source tree's root (an editable install)
    # or the installed selfctx/ package, which holds the folder as selfctx/xtdb (a wheel).
    candidate = Path(override) if override else Path(__file__).resolve().parents[2] / "xtdb"
    if not (candidate / "pom.xml").is_file():
        raise XtdbSetupError(
            f"cannot find the XTDB node's project folder (looked for {candidate / 'pom.xml'}); "
            "reinstall self-context-manager (its wheel carries the folder) or set "
            "SELFCTX_XTDB_PROJECT to the folder that holds the node's pom.xml"
        )
    return candidate


def xtdb_home() -> Path:
    """The cache folder holding the fetched jars (``lib/``) and Maven's repository (``m2/``)."""
    override = setting("xtdb.home")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / _APP / f"xtdb-{XTDB_VERSION}"


def lib_dir() -> Path:
    """Every jar a node needs, fetched once by :func:`selfctx.adapters.xtdb.fetch.fetch_jars`."""
    return xtdb_home() / "lib"


def classes_dir() -> Path:
    """XTDB's Clojure namespaces compiled once after fetching (see ``xtdb/aot.clj``)."""
    return xtdb_home() / "classes"


def default_data_dir() -> Path:
    """The data directory of the local RocksDB node that ``--store auto`` starts or reuses."""
    override = setting("xtdb.data")
    if override:
        return Path(override)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / _APP / "xtdb"


def default_memory_run_dir() -> Path:
    """Where a background in-memory node keeps its pid file and log (it has no data)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / _APP / "xtdb-memory"
