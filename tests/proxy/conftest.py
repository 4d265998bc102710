"""The real-client tests share an XTDB node of their own, so that ``selfctx sessions`` lists only
their sessions (the suite's shared node holds every other test's)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from selfctx.adapters.xtdb import XtdbNode


@pytest.fixture(scope="session")
def clients_node(xtdb_jars: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[XtdbNode]:
    node = XtdbNode("memory", run_dir=tmp_path_factory.mktemp("xtdb-clients"))
    with node:
        yield node
