"""IndexFile and Discover: the two entry points of the indexing protocol (SSOT §5.6)."""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from application.ports.files import SourceUnreachable
from application.runner import OpenSession, Reads
from application.usecases.base import Deps, observe_source, observe_text
from domain.errors import InvalidInput, InvalidPath
from domain.indexing import Outcome, decide_discovery, decide_full_index
from domain.objects import FileObject, Source
from domain.session import commands as c
from domain.session.state import SessionState

__all__ = ["Discover", "DiscoverReport", "IndexFile", "IndexResult", "resolve"]


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
    """An agent read a file: index it fully and put it in every set (trigger ``agent_read``)."""

    def __init__(self, deps: Deps) -> None:
        self._deps = deps

    def __call__(
        self, session: OpenSession, path: str, content: str | bytes | None = None
    ) -> IndexResult:
        source = resolve(self._deps, path)
        if content is not None:
            observed = observe_text(self._deps, source, content, where=path)
        else:
            observed = observe_source(self._deps, source)
        outcome = Outcome.UNCHANGED

        def build(reads: Reads, state: SessionState) -> c.Command:
            nonlocal outcome
            stored = reads.stored_file(observed.id)
            outcome, _ = decide_full_index(stored, observed)
            return c.IndexFile(observed, stored, "agent_read")

        self._deps.runner.execute(session, build)
        return IndexResult(observed.id, outcome, path)


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
            stored = reads.stored_many(stub.id for _, stub in stubs)
            found = []
            for _, stub in stubs:
                previous = stored[stub.id]
                if previous is not None and not isinstance(previous, FileObject):
                    raise InvalidInput("path", stub.source.path, "names a non-file object")
                outcomes[stub.id], _ = decide_discovery(previous, stub)
                found.append((stub, previous))
            return c.Discover(tuple(found))

        if stubs:
            self._deps.runner.execute(session, build)
        return DiscoverReport(
            found=tuple(IndexResult(stub.id, outcomes[stub.id], path) for path, stub in stubs),
            refused=tuple(refused),
        )
