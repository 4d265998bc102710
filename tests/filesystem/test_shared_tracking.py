"""A file held by sessions of several clients of one store is watched by one of them; the others
learn its versions from the store before they assemble (decision 0066)."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from selfctx.adapters.filesystem.claims import WatchClaims
from selfctx.adapters.filesystem.tracker import WatchdogTracker
from selfctx.application.ports.tracking import SourceChange
from selfctx.application.service import ContextService
from tests.filesystem.conftest import MakeFsService
from tests.filesystem.helpers import eventually, history, write


def test_claims_one_holder_per_file_until_it_lets_go(tmp_path: Path) -> None:
    path = tmp_path / "state" / "watch" / "store.lock"
    one, two = WatchClaims(path), WatchClaims(path)  # two opens: as two processes
    try:
        assert one.claim("host\x00/w/a.py")
        assert one.claim("host\x00/w/a.py")  # already ours
        assert not two.claim("host\x00/w/a.py")
        assert two.claim("host\x00/w/b.py")
        one.release("host\x00/w/a.py")
        assert two.claim("host\x00/w/a.py")
        two.close()
        assert one.claim("host\x00/w/a.py") and one.claim("host\x00/w/b.py")
        assert path.stat().st_mode & 0o777 == 0o600
        assert path.parent.stat().st_mode & 0o777 == 0o700
    finally:
        one.close()
        two.close()


def _counting(service: ContextService) -> list[Sequence[SourceChange]]:
    """Every batch of changes the service's tracker hands over (wrapping its handler)."""
    tracker = service.tracker
    assert isinstance(tracker, WatchdogTracker)
    seen: list[Sequence[SourceChange]] = []
    handler = tracker._on_changes
    assert handler is not None

    def counted(changes: Sequence[SourceChange]) -> None:
        seen.append(changes)
        handler(changes)

    tracker._on_changes = counted
    return seen


def _line(service: ContextService, sid: str, object_id: str) -> str:
    return next(ln for ln in service.assemble(sid).metadata if ln.startswith(f"id={object_id} "))


@pytest.fixture
def lock(tmp_path: Path) -> Path:
    return tmp_path / "claims" / "store.lock"


def test_one_client_watches_a_shared_file_and_the_other_learns_from_the_store(
    make_fs_service: MakeFsService, workspace: Path, ns: str, lock: Path
) -> None:
    path = workspace / "shared.py"
    write(path, "shared\n")
    first = make_fs_service(claims=lock)
    second = make_fs_service(claims=lock)
    first.start_session(f"{ns}one")
    second.start_session(f"{ns}two")
    oid = first.index_file(f"{ns}one", str(path)).object_id
    second.index_file(f"{ns}two", str(path))
    trackers = [s.tracker for s in (first, second)]
    assert all(isinstance(t, WatchdogTracker) for t in trackers)
    watchers = [t for t in trackers if isinstance(t, WatchdogTracker) and t.watching()]
    assert len(watchers) == 1  # the other waits: the file is watched once for the store
    waiting = [t for t in trackers if isinstance(t, WatchdogTracker) and t.waiting()]
    assert len(waiting) == 1 and waiting[0] is not watchers[0]
    for tracker in trackers:
        assert isinstance(tracker, WatchdogTracker)
        eventually(tracker.idle, "the first look to settle")
    batches = {id(s): _counting(s) for s in (first, second)}

    write(path, "shared and edited\n")

    for service, sid in ((first, f"{ns}one"), (second, f"{ns}two")):

        def sees_the_edit(service: ContextService = service, sid: str = sid) -> bool:
            return _line(service, sid, oid).endswith("char_count=18")

        eventually(sees_the_edit, f"{sid} to see the edit")
    assert history(first, oid) == [("shared\n", None), ("shared and edited\n", None)]
    # One watcher event, one look: the client that does not watch the file read nothing.
    looked = [len(b) for b in batches.values() if b]
    assert len(looked) == 1


def test_when_the_watching_client_stops_another_takes_the_file_over(
    make_fs_service: MakeFsService, workspace: Path, ns: str, lock: Path
) -> None:
    path = workspace / "handed.py"
    write(path, "v1\n")
    first = make_fs_service(claims=lock)
    first.start_session(f"{ns}one")
    oid = first.index_file(f"{ns}one", str(path)).object_id
    second = make_fs_service(claims=lock)
    second.start_session(f"{ns}two")
    second.index_file(f"{ns}two", str(path))
    tracker = second.tracker
    assert isinstance(tracker, WatchdogTracker)
    assert tracker.waiting() and not tracker.watching()
    first.close()  # its process ends: its claims go with it

    eventually(tracker.watching, "the second client to watch the file")
    eventually(tracker.idle, "its first look")
    write(path, "v2, seen by the second\n")

    def sees_it() -> bool:
        return _line(second, f"{ns}two", oid).endswith("char_count=23")

    eventually(sees_it, "the second client's own watcher to write the version")
    assert history(second, oid)[-1] == ("v2, seen by the second\n", None)


def _two_clients(
    make_fs_service: MakeFsService, path: Path, ns: str, text: str, *, reads_wait: bool = False
) -> tuple[ContextService, ContextService, str]:
    """Two clients without watchers, a session each, both holding ``path`` (written as
    ``text``); ``reads_wait``: the first one's store reads on threads, as a database
    server's (otherwise its store's own way). Returns the two services and the file's object id."""
    write(path, text)
    first = make_fs_service(track=False)
    second = make_fs_service(track=False)
    if reads_wait:
        first.store.reads_wait = True
        # These follow the read started ahead, not the node's pushed feed that makes it needless
        # (decision 0148): without it, as on a node that pushes none.
        if hasattr(first.store, "feed_stream"):
            first.store.feed_stream = False
    first.start_session(f"{ns}one")
    second.start_session(f"{ns}two")
    oid = first.index_file(f"{ns}one", str(path)).object_id
    second.index_file(f"{ns}two", str(path))
    return first, second, oid


def test_a_session_learns_versions_other_clients_wrote_before_it_assembles(
    make_fs_service: MakeFsService, workspace: Path, ns: str
) -> None:
    """Without any watcher: another client's agent rewrote the file (and indexed it)."""
    path = workspace / "other.py"
    first, second, oid = _two_clients(make_fs_service, path, ns, "mine\n")
    write(path, "theirs now\n")
    second.index_file(f"{ns}two", str(path), wrote=True)
    assert _line(first, f"{ns}one", oid).endswith("char_count=11")
    assert first.object(f"{ns}one", oid).content == "theirs now\n"
    os.remove(path)


def _versions_reads(store: Any) -> list[int | None]:
    """The list that each read of ``store``'s versions feed appends its ``after_tx_id`` to
    from now on (the reads themselves unchanged)."""
    asked: list[int | None] = []
    feed = store.file_versions

    def counted(after_tx_id: int | None, held: Any = None) -> Any:
        asked.append(after_tx_id)
        return feed(after_tx_id, held)

    store.file_versions = counted
    return asked


def test_a_read_started_ahead_is_the_next_assemblys(
    make_fs_service: MakeFsService, workspace: Path, ns: str
) -> None:
    """``look_ahead`` starts the read of the versions feed that the next assembly makes
    (decision 0089): the assembly takes it, and learns what was written before it; what is
    written after it is learned by the assembly after."""
    path = workspace / "other.py"
    first, second, oid = _two_clients(make_fs_service, path, ns, "mine\n", reads_wait=True)
    asked = _versions_reads(first.store)
    first.look_ahead(f"{ns}one")
    eventually(lambda: len(asked) == 1, "the read started ahead")
    write(path, "theirs now\n")
    second.index_file(f"{ns}two", str(path), wrote=True)
    line = _line(first, f"{ns}one", oid)
    assert len(asked) == 1  # the assembly took the read started ahead: nothing more asked
    assert line.endswith("char_count=5")  # written after it: the next assembly learns it
    assert _line(first, f"{ns}one", oid).endswith("char_count=11")
    assert len(asked) == 2
    write(path, "third\n")
    second.index_file(f"{ns}two", str(path), wrote=True)
    first.look_ahead(f"{ns}one")
    eventually(lambda: len(asked) == 3, "the second read started ahead")
    assert _line(first, f"{ns}one", oid).endswith("char_count=6")  # written before it
    assert len(asked) == 3
    assert first.object(f"{ns}one", oid).content == "third\n"
    first.assemble(f"{ns}one")  # a read started ahead is taken once
    assert len(asked) == 4
    os.remove(path)


def test_a_session_learns_another_clients_version_from_the_feeds_answer_alone(
    make_fs_service: MakeFsService, workspace: Path, ns: str
) -> None:
    """The feed's answer carries the versions of the files the session holds (decision 0106):
    learning another client's version reads nothing more from the store."""
    path = workspace / "other.py"
    first, second, oid = _two_clients(make_fs_service, path, ns, "mine\n")
    write(path, "theirs now\n")
    second.index_file(f"{ns}two", str(path), wrote=True)
    store = first.store
    read: list[list[str]] = []
    get_many = store.get_many

    def counted(object_ids: Any) -> Any:
        ids = list(object_ids)
        read.append(ids)
        return get_many(ids)

    store.get_many = counted  # type: ignore[method-assign]
    assert _line(first, f"{ns}one", oid).endswith("char_count=11")
    assert first.object(f"{ns}one", oid).content == "theirs now\n"
    assert not [ids for ids in read if oid in ids]
    os.remove(path)


def test_a_version_taken_in_after_a_read_ahead_is_not_replaced_by_what_it_carried(
    make_fs_service: MakeFsService, workspace: Path, ns: str
) -> None:
    """A read of the feed started ahead carries another client's version; the session then
    takes in a newer one itself before it assembles: the assembly keeps the newer one (the
    version carried is taken only if the session still holds what it held when it asked)."""
    path = workspace / "other.py"
    first, second, oid = _two_clients(make_fs_service, path, ns, "v1\n", reads_wait=True)
    store = first.store
    write(path, "v2, theirs\n")
    second.index_file(f"{ns}two", str(path), wrote=True)
    asked: list[Any] = []
    feed = store.file_versions

    def counted(after_tx_id: int | None, held: Any = None) -> Any:
        found = feed(after_tx_id, held)
        asked.append(found)
        return found

    store.file_versions = counted  # type: ignore[method-assign]
    first.look_ahead(f"{ns}one")
    eventually(lambda: len(asked) == 1, "the read started ahead")
    assert oid in asked[0].documents  # it carries the second client's version
    write(path, "v3, mine, the newest\n")
    first.index_file(f"{ns}one", str(path), wrote=True)
    assert _line(first, f"{ns}one", oid).endswith("char_count=21")
    assert len(asked) == 1  # the assembly took the read started ahead
    assert first.object(f"{ns}one", oid).content == "v3, mine, the newest\n"
    os.remove(path)


def test_a_read_ahead_asked_without_waiting_is_not_started_while_another_thread_holds_the_session(
    make_fs_service: MakeFsService, workspace: Path, ns: str
) -> None:
    """``look_ahead(wait=False)`` (the proxy's event loop, which must not block: decision 0126)
    starts the read when the session is free, and starts nothing, at once, while another thread
    holds it; asked again with waiting, it starts the read once the session is free."""
    path = workspace / "other.py"
    first, _second, _oid = _two_clients(make_fs_service, path, ns, "mine\n", reads_wait=True)
    asked = _versions_reads(first.store)
    sid = f"{ns}one"
    assert first.look_ahead(sid, wait=False)
    eventually(lambda: len(asked) == 1, "the read started ahead")
    first.assemble(sid)  # takes it
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with first._open(sid).lock:
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(30)
        assert not first.look_ahead(sid, wait=False)
        waiting = threading.Thread(target=first.look_ahead, args=(sid,))
        waiting.start()
        waiting.join(0.2)
        assert waiting.is_alive()  # it waits for the session, as before
        assert len(asked) == 1
    finally:
        release.set()
        holder.join(30)
    waiting.join(30)
    eventually(lambda: len(asked) == 2, "the read started once the session was free")
    os.remove(path)


def test_with_the_nodes_feed_pushed_an_assembly_reads_it_only_when_a_held_file_changed(
    make_fs_service: MakeFsService, workspace: Path, ns: str
) -> None:
    """On a node that pushes its feed to each process (decision 0148), a read ahead and an
    assembly ask the node nothing while no other client wrote a held file, and learn another
    client's version as soon as its writer was told it is written."""
    path = workspace / "other.py"
    first, second, oid = _two_clients(make_fs_service, path, ns, "mine\n")
    store = first.store
    if not getattr(store, "feed_stream", False):
        pytest.skip("a store whose node pushes no feed")
    reads: list[Any] = []
    versions = store.client.versions  # type: ignore[attr-defined]

    def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append(args)
        return versions(*args, **kwargs)

    store.client.versions = counted  # type: ignore[attr-defined]
    first.assemble(f"{ns}one")
    stream = store._stream  # type: ignore[attr-defined]
    eventually(lambda: stream is not None and stream.opened > 0, "the stream")
    first.assemble(f"{ns}one")  # from a point after the stream's start from now on
    before = len(reads)
    for _ in range(3):
        first.look_ahead(f"{ns}one")
        assert _line(first, f"{ns}one", oid).endswith("char_count=5")
    assert len(reads) == before
    write(path, "theirs now\n")
    second.index_file(f"{ns}two", str(path), wrote=True)
    first.look_ahead(f"{ns}one")
    assert _line(first, f"{ns}one", oid).endswith("char_count=11")
    assert first.object(f"{ns}one", oid).content == "theirs now\n"
    assert len(reads) > before  # the held file changed: the node's answer carries it
    os.remove(path)
