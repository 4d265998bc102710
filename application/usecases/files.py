"""IndexFile and Discover: the entry points of the indexing protocol (docs/specification.md §3)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Final

import attrs

from selfctx.application.ports.files import SourceUnreachable
from selfctx.application.runner import CommandBuilder, OpenSession, Reads
from selfctx.application.usecases.base import Deps, observe_source, observe_text
from selfctx.domain.errors import InvalidInput, InvalidPath
from selfctx.domain.indexing import Outcome, decide_discovery, decide_full_index
from selfctx.domain.objects import FileObject, Source
from selfctx.domain.session import commands as c
from selfctx.domain.session.state import SessionState

__all__ = [
    "BATCH_BYTES",
    "BATCH_FILES",
    "Discover",
    "DiscoverReport",
    "IndexFile",
    "IndexFiles",
    "IndexResult",
    "resolve",
]

BATCH_FILES: Final = 500
""":class:`IndexFiles` commits at most this many files per transaction ..."""
BATCH_BYTES: Final = 8 * 1024 * 1024
"""... and at most about this many bytes of content (one file may exceed it alone)."""


@attrs.frozen
class IndexResult:
    """What indexing one file did."""

    object_id: str
    outcome: Outcome
    path: str
    """The agent-visible path."""


@attrs.frozen
class DiscoverReport:
    """What discovery did with each path it was given."""

    found: tuple[IndexResult, ...] = ()
    refused: tuple[tuple[str, str], ...] = ()
    """Paths that were not indexed, with the reason (outside the allowed roots, malformed)."""


def resolve(deps: Deps, path: str) -> Source:
    """Agent-visible path → canonical source binding (mount mapping, then the reader's
    canonicalisation of host paths: symlinks, allowed roots)."""
    return deps.files.canonical(deps.mounts.to_source(path))


class IndexFile:
    """An agent read a file: index it fully and put it in every set (trigger ``agent_read``,
    or ``agent_write`` when the agent itself just wrote or edited it); or it saw some lines of it
    (``view``): index the whole file from its source and put it in the index and pool only
    (trigger ``agent_view``, decision 0020)."""

    def __init__(self, deps: Deps) -> None:
        self._deps = deps

    def __call__(
        self,
        session: OpenSession,
        path: str,
        content: str | bytes | None = None,
        *,
        view: bool = False,
        wrote: bool = False,
    ) -> IndexResult:
        source = resolve(self._deps, path)
        if content is not None:
            observed = observe_text(
                self._deps, source, content, where=path, reporter=session.session_id
            )
        else:
            observed = observe_source(self._deps, source)
        outcome = Outcome.UNCHANGED

        def build(reads: Reads, state: SessionState) -> c.Command:
            nonlocal outcome
            stored = reads.stored_file(observed)
            outcome, _ = decide_full_index(stored, observed)
            trigger: c.Trigger = "agent_view" if view else "agent_read"
            return c.IndexFile(observed, stored, "agent_write" if wrote else trigger)

        self._deps.runner.execute(session, build)
        return IndexResult(observed.id, outcome, path)


class IndexFiles:
    """An agent read many files at once (a harness loading a source tree): each as
    :class:`IndexFile` would index it, in order, but committed in batches — one transaction and
    one log entry per :data:`BATCH_FILES` files or :data:`BATCH_BYTES` bytes, with one batch read
    of the stored versions — instead of one of each per file. Batches are pipelined
    (:meth:`SessionRunner.execute_pipelined`): the next is read and decided while the store
    commits the one before.

    Every source of a batch is read before anything of it is committed; a source that cannot be
    read raises its error and leaves that batch and the ones after it unwritten (batches already
    submitted are committed and stay, as separate reads would).
    """

    def __init__(self, deps: Deps) -> None:
        self._deps = deps

    def __call__(self, session: OpenSession, paths: Sequence[str]) -> tuple[IndexResult, ...]:
        if isinstance(paths, str | bytes) or not isinstance(paths, Sequence):
            raise InvalidInput("paths", paths, "must be a sequence of paths, not a single value")
        sources = [resolve(self._deps, path) for path in paths]  # bad paths refused up front
        batches: list[tuple[list[tuple[str, FileObject]], dict[str, Outcome]]] = []

        def builds() -> Iterator[CommandBuilder]:
            # Sources are read lazily: batch n+1 while batch n is on its way to the store.
            batch: list[tuple[str, FileObject]] = []
            size = 0
            for path, source in zip(paths, sources, strict=True):
                observed = observe_source(self._deps, source)
                batch.append((path, observed))
                size += len(observed.content or "")
                if len(batch) >= BATCH_FILES or size >= BATCH_BYTES:
                    yield self._build(batch, batches)
                    batch, size = [], 0
            if batch:
                yield self._build(batch, batches)

        self._deps.runner.execute_pipelined(session, builds())
        results: list[IndexResult] = []
        for batch, outcomes in batches:
            # A path named twice in a batch is read once: the second is unchanged by the first.
            first: set[str] = set()
            for path, observed in batch:
                outcome = outcomes[observed.id] if observed.id not in first else Outcome.UNCHANGED
                first.add(observed.id)
                results.append(IndexResult(observed.id, outcome, path))
        return tuple(results)

    @staticmethod
    def _build(
        batch: list[tuple[str, FileObject]],
        batches: list[tuple[list[tuple[str, FileObject]], dict[str, Outcome]]],
    ) -> CommandBuilder:
        outcomes: dict[str, Outcome] = {}
        batches.append((batch, outcomes))

        def build(reads: Reads, state: SessionState) -> c.Command:
            outcomes.clear()  # decided again on every attempt
            stored = reads.stored_files(observed for _, observed in batch)
            items = []
            for _, observed in batch:
                previous = stored[observed.id]
                if observed.id not in outcomes:
                    outcomes[observed.id], _ = decide_full_index(previous, observed)
                items.append(c.IndexFile(observed, previous, "agent_read"))
            return c.IndexFiles(tuple(items))

        return build


class Discover:
    """Paths seen in tool output: stubs for files nobody indexed, all into index and pool."""

    def __init__(self, deps: Deps) -> None:
        self._deps = deps

    def __call__(
        self, session: OpenSession, paths: Iterable[str], *, strict: bool = True
    ) -> DiscoverReport:
        """With ``strict``, a malformed path is an error and nothing is indexed; otherwise it is
        reported in ``refused`` (what tool-output parsing wants). Paths outside the allowed roots
        are always reported, never indexed."""
        if isinstance(paths, str | bytes) or not isinstance(paths, Iterable):
            raise InvalidInput("paths", paths, "must be a collection of paths, not a single value")
        stubs: list[tuple[str, FileObject]] = []
        refused: list[tuple[str, str]] = []
        for path in paths:
            try:
                stubs.append((path, FileObject.stub(resolve(self._deps, path))))
            except InvalidPath as exc:
                if strict:
                    raise
                refused.append((str(path), exc.reason))
            except (SourceUnreachable, InvalidInput) as exc:
                refused.append((str(path), str(exc)))
        outcomes: dict[str, Outcome] = {}

        def build(reads: Reads, state: SessionState) -> c.Command:
            stored = reads.stored_files(stub for _, stub in stubs)
            found = []
            for _, stub in stubs:
                previous = stored[stub.id]
                outcomes[stub.id], _ = decide_discovery(previous, stub)
                found.append((stub, previous))
            return c.Discover(tuple(found))

        if stubs:
            self._deps.runner.execute(session, build)
        return DiscoverReport(
            found=tuple(IndexResult(stub.id, outcomes[stub.id], path) for path, stub in stubs),
            refused=tuple(refused),
        )
