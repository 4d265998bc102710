"""The composition root: production defaults wired in one place.

Tests and embedders call :func:`build_service` with what they want to replace (a store, a file
reader, mounts); everything else gets the default: the in-memory store, the system clock, random
ids, the host's file reader confined to the workspace.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Sequence

from selfctx.adapters.config import Config, load_config
from selfctx.adapters.filesystem.claims import WatchClaims, claims_path
from selfctx.adapters.filesystem.identity import host_filesystem_id
from selfctx.adapters.filesystem.reader import LocalFileReader
from selfctx.adapters.filesystem.shelf import FileShelf
from selfctx.adapters.filesystem.tracker import WatchdogTracker
from selfctx.adapters.memory import MemoryStore
from selfctx.adapters.mounts import UnconfiguredMounts, load_mount_config
from selfctx.adapters.search import SqliteSearchIndex
from selfctx.adapters.summarizer import ExtractiveSummarizer, summarizer_from_env
from selfctx.adapters.system import SystemClock, UuidIds
from selfctx.adapters.tokenizer import default_tokenizer
from selfctx.application.ports.clock import Clock
from selfctx.application.ports.files import FileReader
from selfctx.application.ports.ids import IdSource
from selfctx.application.ports.search import SearchIndex
from selfctx.application.ports.store import ConflictError, Expect, ObjectStore, StoreError
from selfctx.application.ports.summarizer import Summarizer
from selfctx.application.ports.tokenizer import Tokenizer
from selfctx.application.ports.tracking import SourceTracker
from selfctx.application.service import ContextService
from selfctx.application.settings import Settings
from selfctx.domain.errors import InvalidInput
from selfctx.domain.mounts import MountMapping, MountTable

__all__ = ["build_service", "open_store", "store_identity"]


def _say(message: str) -> None:
    print(f"selfctx: {message}", file=sys.stderr)


def open_store(
    spec: str | None = None,
    *,
    timeout: float = 30.0,
    announce: Callable[[str], None] | None = _say,
) -> ObjectStore:
    """A store from a ``--store`` value: ``memory``, ``xtdb://HOST:PORT`` or ``auto`` (a local
    RocksDB-backed XTDB node under the user's data directory, started if needed); by default the
    ``store`` setting (docs/configuration.md), itself ``memory`` by default.

    A node that ``auto`` starts outlives the program, so that the next command finds it at once;
    ``announce`` (default: a line on stderr; None: silent) is told so, with the command that
    stops it."""
    if spec is None:
        spec = load_config().get("store")
    if not isinstance(spec, str):
        raise InvalidInput("store", spec, "use 'memory', 'xtdb://HOST:PORT' or 'auto'")
    if spec == "memory":
        return MemoryStore()
    if spec.startswith("xtdb://") or spec == "auto":
        from selfctx.adapters import xtdb  # imported lazily: the embedded default needs no JVM

        if spec == "auto":
            node = xtdb.local_node()
            url = node.url
            if node.started and announce is not None:
                announce(
                    f"started a local XTDB node for --store auto at {url} (pid {node.info.pid}, "
                    f"data {node.info.data_dir}); it keeps running for the next commands; "
                    f"stop it with: {node.stop_hint()}"
                )
        else:
            url = "http://" + spec[len("xtdb://") :]
        return xtdb.open_store(url, timeout=timeout)
    raise InvalidInput("store", spec, "use 'memory', 'xtdb://HOST:PORT' or 'auto'")


STORE_IDENTITY = "selfctx-store-identity"
"""The id of the document that names a store: a random identity written by the first server
that asks, the same through every node of a cluster (whose addresses differ)."""


def store_identity(store: ObjectStore) -> str | None:
    """The store's own name for itself (None when the store cannot say now: the caller falls
    back on the address it was given). The servers of one machine watch a file once per
    store (decision 0066); on a cluster, once for all its nodes (decision 0093), so an edit is
    not read and written by one watcher per node, the later ones conflicting."""
    for _ in range(3):
        try:
            doc = store.get(STORE_IDENTITY)
            if doc is not None:
                identity = doc.get("identity")
                return f"store:{identity}" if isinstance(identity, str) and identity else None
            identity = uuid.uuid4().hex
            store.commit(
                [{"xt/id": STORE_IDENTITY, "type": "store_identity", "identity": identity}],
                [Expect(STORE_IDENTITY, None)],
            )
            return f"store:{identity}"
        except ConflictError:
            continue  # another server named it first: read its name
        except StoreError:
            return None
    return None


def build_service(
    *,
    store: ObjectStore | None = None,
    workspace: str | None = None,
    roots: Sequence[str] | None = None,
    mounts: Sequence[MountMapping] = (),
    default_filesystem_id: str | None = None,
    host_id: str | None = None,
    files: FileReader | None = None,
    clock: Clock | None = None,
    ids: IdSource | None = None,
    settings: Settings | None = None,
    tokenizer: Tokenizer | None = None,
    mounts_file: str | None = None,
    track: bool = False,
    tracker: SourceTracker | None = None,
    store_name: str | None = None,
    mount_detector: UnconfiguredMounts | None = None,
    search: SearchIndex | None = None,
    search_path: str | None = None,
    summarizer: Summarizer | None = None,
    config: Config | None = None,
) -> ContextService:
    """A ready :class:`ContextService`.

    ``workspace`` (default: the current directory) is the root reads are confined to unless
    ``roots`` says otherwise. ``mounts`` translate a sandboxed agent's paths; paths under no mount
    belong to ``default_filesystem_id`` (default: the host's, i.e. no sandbox). New sessions get
    the measured default layout policy (``selfctx.application.policies.DEFAULT_POLICY``) unless
    ``settings`` or ``start_session(policy=...)`` says otherwise.

    Whatever is not passed comes from ``config`` (default: :func:`load_config`, the configuration
    file under the environment; docs/configuration.md): the policy and limits of new sessions,
    the mount file, the host's filesystem id, the summarizer.

    ``mounts_file`` (default: the ``files.mounts`` setting) is a TOML mount configuration
    (``selfctx.adapters.mounts``); its mappings come after ``mounts``, and its default filesystem
    applies unless ``default_filesystem_id`` is given. ``track=True`` watches the files sessions
    read with watchdog (or pass a ``tracker``); call ``service.close()`` to stop it. With a
    ``store_name`` (the store's address, as ``--store`` gives it), a file is watched by one
    process per store on this machine, and the others learn its versions from the store
    (decision 0066). A
    ``mount_detector`` is told the device of every file read and flags mounts nobody configured.
    The search index is ``search``, or SQLite FTS5 in ``search_path`` (default: in memory,
    built from the store on first use; decision 0040). Compaction summaries come from
    ``summarizer``, else the HTTP summarizer the ``summarizer.*`` settings configure, else the
    extractive one (decision 0043); the extractive one is also the fallback when a model fails.
    """
    config = config if config is not None else load_config()
    host = host_filesystem_id(config.get("files.host_filesystem_id", host_id))
    workspace = os.path.realpath(workspace or os.getcwd())
    mounts_file = config.get("files.mounts", mounts_file) or None
    mappings = tuple(mounts)
    default_fs = default_filesystem_id
    if mounts_file:
        mount_config = load_mount_config(mounts_file)
        mappings += mount_config.mappings(host)
        default_fs = default_fs or mount_config.default_filesystem_id(host)
    reader_roots = list(roots) if roots else [workspace]
    if mount_detector is not None:
        mount_detector.configure(reader_roots, [m.canonical_prefix for m in mappings])
    table = MountTable(default_fs or host, mappings)
    reader = files or LocalFileReader(
        host,
        roots=reader_roots,
        on_stat=mount_detector.observe if mount_detector else None,
        mounts=table,
    )
    if tracker is None and track:
        claims = None
        if store_name is not None and store_name != "memory" and store is not None:
            claims = WatchClaims(claims_path(store_identity(store) or store_name))
        tracker = WatchdogTracker(host, claims=claims)
    return ContextService(
        store=store if store is not None else MemoryStore(),
        clock=clock or SystemClock(),
        ids=ids or UuidIds(),
        files=reader,
        mounts=table,
        settings=settings or config.settings(),
        tokenizer=tokenizer or default_tokenizer(),
        tracker=tracker,
        search=search or SqliteSearchIndex(search_path or ":memory:"),
        summarizer=summarizer or summarizer_from_env(config=config) or ExtractiveSummarizer(),
        fallback_summarizer=ExtractiveSummarizer(),
        shelf=FileShelf,
    )
