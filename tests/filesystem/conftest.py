"""Fixtures for tests on real files: a workspace in a temporary directory, services built by the
composition root over the store ``store_factory`` chooses, with or without a watchdog tracker.

Store kinds come from ``SELFCTX_TEST_STORES`` (``tests/conftest.py``): memory by default,
``SELFCTX_TEST_STORES=memory,xtdb`` runs every test here on a real XTDB node as well.

Every tracker a test makes is closed at the end, and the test fails if the tracker recorded a
failure the test did not expect (an error on the watcher thread is never allowed to pass quietly).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.filesystem.tracker import WatchdogTracker
from selfctx.application.policies import policy_by_name
from selfctx.application.ports.store import ObjectStore
from selfctx.application.ports.tracking import TrackerFailure
from selfctx.application.service import ContextService
from selfctx.application.settings import Settings
from tests.conftest import StoreFactory


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A canonical (symlink-free) empty directory the reader is confined to."""
    root = Path(os.path.realpath(tmp_path)) / "ws"
    root.mkdir()
    return root


class MakeFsService(Protocol):
    def __call__(
        self,
        *,
        track: bool = ...,
        store: ObjectStore | None = ...,
        expect_failures: bool = ...,
        quiet: float = ...,
        **kwargs: Any,
    ) -> ContextService: ...


@pytest.fixture
def make_fs_service(
    store_factory: StoreFactory, host_id: str, workspace: Path
) -> Iterator[MakeFsService]:
    """Build a service over real files in ``workspace``; ``track=True`` adds a watchdog tracker
    whose coalescing waits for ``quiet`` seconds without events. The default (0.25 s, five times
    the production delay) keeps a loaded machine from splitting one write into two looks; a test
    whose steps must land in one burst gives itself a longer one.

    Services made without ``store`` share one store (two clients of one database).
    """
    shared: list[ObjectStore] = []
    made: list[tuple[ContextService, bool]] = []

    def make(
        *,
        track: bool = True,
        store: ObjectStore | None = None,
        expect_failures: bool = False,
        quiet: float = 0.25,
        **kwargs: Any,
    ) -> ContextService:
        if store is None:
            if not shared:
                shared.append(store_factory.make())
            store = shared[0]
        kwargs.setdefault("workspace", str(workspace))
        tracker = (
            WatchdogTracker(host_id, delay=quiet, max_delay=max(quiet * 10, 0.5)) if track else None
        )
        # Tracking is what these tests are about; they read the ssot layout's metadata lines.
        kwargs.setdefault("settings", Settings(policy=policy_by_name("ssot")))
        service = build_service(store=store, host_id=host_id, tracker=tracker, **kwargs)
        made.append((service, expect_failures))
        return service

    yield make
    unexpected: list[TrackerFailure] = []
    for service, expect_failures in made:
        service.close()
        if service.tracker is not None and not expect_failures:
            unexpected += service.tracker.failures()
    for store in shared:
        store.close()
    assert not unexpected, f"the tracker recorded failures: {unexpected}"
