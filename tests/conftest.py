"""Fixtures of the core suite: a deterministic clock and id source, an in-memory file system, and
services over a store chosen by ``store_factory``.

``store_factory`` is parametrised by :data:`STORE_KINDS`, read from ``SELFCTX_TEST_STORES``
(comma-separated, default ``memory,xtdb``): every service-level test runs on the in-memory store
and on a real XTDB node (marked ``xtdb``; ``-m "not xtdb"`` or ``SELFCTX_TEST_STORES=memory``
skips the node). The node is the session-scoped ``xtdb_node`` fixture of
``tests/xtdb/fixtures.py``, registered here as a plugin for the whole suite, so one node serves
every folder and is started only if a test asks for it. A store shared between tests gets a
per-test namespace (``ns``): session and filesystem ids carry it, and the wrapped store prefixes
every ``xt/id`` (and the session of every log entry) with it, so no test sees another's objects.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import attrs
import pytest
from hypothesis import HealthCheck, Phase, settings

from selfctx.adapters.memory import MemoryStore
from selfctx.application.ports.store import ObjectStore
from selfctx.application.service import ContextService
from selfctx.application.settings import Settings
from selfctx.domain.mounts import MountMapping, MountTable
from tests.support import (
    CountingClock,
    CountingIds,
    FakeFileReader,
    WrappedStore,
    compose_service,
)

# -- Hypothesis profiles: modest by default (CI has 2 cores), longer on request -----------------
settings.register_profile("default", max_examples=40, deadline=None)
settings.register_profile(
    "long", max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True)
settings.register_profile(  # find a failure fast, without shrinking it (mutation runs)
    "noshrink", max_examples=40, deadline=None, phases=[Phase.explicit, Phase.generate]
)
settings.load_profile(os.environ.get("SELFCTX_HYPOTHESIS_PROFILE", "default"))


def profile_max_examples() -> int:
    """``max_examples`` of the Hypothesis profile loaded above."""
    profile = settings.default
    assert profile is not None  # loaded above, at import
    return profile.max_examples


pytest_plugins = ("tests.xtdb.fixtures",)

# -- Parallel runs (pytest-xdist; decision 0159) -------------------------------------------------
# A worker runs whole modules (``--dist loadfile``), so that a module's fixtures (a node, a browser,
# a proxy) start once; the modules below share an expensive session fixture, so they run on one
# worker, where it is built once. (``--dist loadgroup`` with ``xdist_group`` marks would say this in
# the modules, but pytest-xdist 3.8 does not group on pytest 9.2: its worker renames the node ids.)
_MODULE_GROUPS = {
    # `dists` / `fresh_checkout`: python -m build of a fresh checkout
    "tests/test_install.py": "dists",
    "tests/test_packaging.py": "dists",
    "tests/test_doc_commands.py": "dists",
    # `clients_node`: the real clients' node; the clients must not race each other for CPU either
    "tests/proxy/test_matrix.py": "clients",
    "tests/proxy/test_pi.py": "clients",
}


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: a worker a core this process may run on (a container's CPU set, not the
    host's count), at most 4. Every worker starts its own XTDB node (a JVM of up to 1 GB heap)
    when a test asks for one, and 2 workers is what was measured (2 cores)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(cores or 1, 4))


@pytest.hookimpl(tryfirst=True)  # before xdist's own scheduler is made
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile``, with the modules of :data:`_MODULE_GROUPS` sent together."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ModuleGroups(LoadFileScheduling):  # type: ignore[misc]  # xdist is untyped to mypy here
        def _split_scope(self, nodeid: str) -> str:
            module: str = super()._split_scope(nodeid)
            return _MODULE_GROUPS.get(module, module)

    return ModuleGroups(config, log)


# The nodes tests start keep their secrets' key files here, not in the user's state directory;
# the processes tests start inherit it (decision 0027).
os.environ.setdefault("SELFCTX_XTDB_KEYS", tempfile.mkdtemp(prefix="selfctx-test-keys-"))
# The suite starts many nodes: none runs the warm-up of its request path (decision 0167), which
# tests/xtdb/test_node_warm_up.py turns on for its own. The processes tests start inherit it.
os.environ.setdefault("SELFCTX_XTDB_WARM_UP_MS", "0")

_KINDS = [k.strip() for k in os.environ.get("SELFCTX_TEST_STORES", "memory,xtdb").split(",")]
STORE_KINDS: list[Any] = [
    pytest.param(kind, id=kind, marks=[pytest.mark.xtdb] if kind == "xtdb" else [])
    for kind in _KINDS
]
"""Store back-ends every service-level test runs on."""


@attrs.frozen
class StoreFactory:
    """How to get a fresh store of one kind, and whether its data outlives a test."""

    kind: str
    make: Callable[[], ObjectStore]
    shared: bool
    """True when stores of this kind see other tests' data (one XTDB node for the run)."""


@pytest.fixture(params=STORE_KINDS)
def store_factory(request: pytest.FixtureRequest) -> StoreFactory:
    kind = request.param
    if kind == "memory":
        return StoreFactory("memory", MemoryStore, shared=False)
    if kind == "xtdb":
        from selfctx.adapters.xtdb import open_store

        node = request.getfixturevalue("xtdb_node")
        return StoreFactory("xtdb", lambda: open_store(node.url, timeout=10.0), shared=True)
    raise AssertionError(f"unknown store kind {kind!r}")


@pytest.fixture
def ns(store_factory: StoreFactory) -> str:
    """A per-test prefix for ids that live in a shared store ('' for private stores)."""
    return f"t{uuid.uuid4().hex[:8]}-" if store_factory.shared else ""


@pytest.fixture
def host_id(ns: str) -> str:
    """The host's filesystem id."""
    return f"{ns}host-fs"


@pytest.fixture
def store(store_factory: StoreFactory, ns: str) -> Iterator[WrappedStore]:
    """The test's store, wrapped so tests can count what it receives and inject failures (and,
    for a shared store, keep this test's ids apart from every other test's)."""
    wrapped = WrappedStore(store_factory.make(), namespace=ns)
    yield wrapped
    wrapped.close()


@pytest.fixture
def files(host_id: str) -> FakeFileReader:
    return FakeFileReader(host_id)


@pytest.fixture
def clock() -> CountingClock:
    return CountingClock()


@pytest.fixture
def ids() -> CountingIds:
    return CountingIds()


class MakeService(Protocol):
    def __call__(
        self,
        *,
        store: ObjectStore | None = ...,
        files: FakeFileReader | None = ...,
        mounts: tuple[MountMapping, ...] = ...,
        default_filesystem_id: str | None = ...,
        settings: Settings | None = ...,
    ) -> ContextService: ...


@pytest.fixture
def make_service(
    store: WrappedStore,
    files: FakeFileReader,
    clock: CountingClock,
    ids: CountingIds,
    host_id: str,
) -> MakeService:
    """Build a :class:`ContextService` (by default over the test's store and fake files)."""

    def make(
        *,
        store: ObjectStore | None = store,
        files: FakeFileReader | None = files,
        mounts: tuple[MountMapping, ...] = (),
        default_filesystem_id: str | None = None,
        settings: Settings | None = None,
    ) -> ContextService:
        return compose_service(
            store=store if store is not None else WrappedStore(MemoryStore()),
            clock=clock,
            ids=ids,
            files=files if files is not None else FakeFileReader(host_id),
            mounts=MountTable(default_filesystem_id or host_id, mounts),
            settings=settings,
        )

    return make


@pytest.fixture
def service(make_service: MakeService) -> ContextService:
    return make_service()


@attrs.frozen
class Dists:
    """The wheel and the sdist of this source tree, built once per test session."""

    wheel: Path
    sdist: Path
    source: Path
    """The clean copy of the tree they were built from."""


@pytest.fixture(scope="session")
def fresh_checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean copy of the tree, as a fresh clone has it: the files git knows, tracked or new,
    never .venv, build output, caches or what the Makefile installs."""
    root = Path(__file__).resolve().parents[1]
    source = tmp_path_factory.mktemp("checkout")
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root, capture_output=True, check=False,
    )  # fmt: skip
    if listed.returncode == 0:
        for name in listed.stdout.decode().split("\0"):
            if name and (root / name).is_file():
                (source / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(root / name, source / name)
    else:  # not a git checkout: the tree without what the Makefile installs
        ignore = shutil.ignore_patterns(
            ".*", "__pycache__", "node_modules", "build", "dist", "*.egg-info", "target", "cache"
        )
        shutil.copytree(root, source, ignore=ignore, dirs_exist_ok=True)
    return source


@pytest.fixture(scope="session")
def dists(tmp_path_factory: pytest.TempPathFactory, fresh_checkout: Path) -> Dists:
    """``python -m build`` (sdist, then the wheel from the sdist, as PyPI users get them) of a
    fresh checkout."""
    source = fresh_checkout
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(source)],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return Dists(wheel, sdist, source)
