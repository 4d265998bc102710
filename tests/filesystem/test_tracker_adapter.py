"""The watchdog adapter and its coalescer on their own: what they deliver, what they refuse, and
that errors on their threads are recorded."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from selfctx.adapters.filesystem.coalesce import Coalescer
from selfctx.adapters.filesystem.tracker import WatchdogTracker
from selfctx.application.ports.tracking import SourceChange, TrackerFailure
from selfctx.domain.objects import FilesystemSource
from tests.filesystem.helpers import eventually, write

HOST = "host-fs"


# -- the coalescer (no timing involved: a long delay, then close() delivers what is pending) -------


def test_a_burst_for_one_key_is_delivered_once_with_merged_notes() -> None:
    batches: list[dict[str, list[int]]] = []
    coalescer: Coalescer[str, list[int]] = Coalescer(
        batches.append, lambda b, e: None, delay=3600, max_delay=3600, merge=lambda a, b: a + b
    )
    for n in range(100):
        coalescer.note("a", [n])
    coalescer.note("b", [0])

    coalescer.close()

    assert batches == [{"a": list(range(100)), "b": [0]}]


def test_a_failing_delivery_is_reported_and_the_thread_goes_on() -> None:
    reported: list[tuple[dict[str, int], BaseException]] = []
    delivered: list[dict[str, int]] = []

    def deliver(batch: dict[str, int]) -> None:
        if "bad" in batch:
            raise RuntimeError("boom")
        delivered.append(batch)

    coalescer: Coalescer[str, int] = Coalescer(
        deliver, lambda b, e: reported.append((b, e)), delay=0, max_delay=0
    )
    coalescer.note("bad", 1)
    eventually(lambda: reported, "the failure report")
    coalescer.note("good", 2)
    eventually(lambda: delivered, "the next delivery")
    coalescer.close()

    assert reported[0][0] == {"bad": 1} and str(reported[0][1]) == "boom"
    assert delivered == [{"good": 2}]


# -- the tracker --------------------------------------------------------------------------------


class Recorder:
    """A change handler that keeps every batch."""

    def __init__(self) -> None:
        self.batches: list[list[SourceChange]] = []
        self.lock = threading.Lock()

    def __call__(self, changes: Sequence[SourceChange]) -> None:
        with self.lock:
            self.batches.append(list(changes))

    def changes(self) -> list[SourceChange]:
        with self.lock:
            return [c for batch in self.batches for c in batch]


@pytest.fixture
def tracker() -> Iterator[WatchdogTracker]:
    tracker = WatchdogTracker(HOST)
    yield tracker
    tracker.close()


def test_container_sources_are_refused_without_touching_the_host(
    tracker: WatchdogTracker, tmp_path: Path
) -> None:
    write(tmp_path / "f", "x")
    tracker.start(Recorder())

    assert tracker.watch(FilesystemSource("container-fs", str(tmp_path / "f"))) is False
    assert tracker.watching() == frozenset() and tracker.watched_directories() == 0


def test_a_source_whose_directory_is_missing_is_not_watched(
    tracker: WatchdogTracker, tmp_path: Path
) -> None:
    tracker.start(Recorder())
    assert tracker.watch(FilesystemSource(HOST, str(tmp_path / "no" / "such.txt"))) is False
    assert tracker.failures() == []  # not an error: the source is orphaned


def test_one_directory_watch_serves_all_its_files(tracker: WatchdogTracker, tmp_path: Path) -> None:
    sources = [FilesystemSource(HOST, str(tmp_path / f"f{n}.txt")) for n in range(20)]
    for source in sources:
        write(source.path, "x")
    recorder = Recorder()
    tracker.start(recorder)

    assert all(tracker.watch(s) for s in sources)
    assert tracker.watch(sources[0])  # idempotent
    assert tracker.watched_directories() == 1
    tracker.unwatch(sources[0])
    assert tracker.watched_directories() == 1
    for source in sources[1:]:
        tracker.unwatch(source)
    assert tracker.watched_directories() == 0 and tracker.watching() == frozenset()


def test_unwatched_files_in_a_watched_directory_are_ignored(
    tracker: WatchdogTracker, tmp_path: Path
) -> None:
    watched = FilesystemSource(HOST, str(tmp_path / "watched.txt"))
    write(watched.path, "1")
    recorder = Recorder()
    tracker.start(recorder)
    tracker.watch(watched)

    write(tmp_path / "noise.txt", "n")
    write(watched.path, "2")

    eventually(recorder.changes, "a delivery")
    assert tracker.idle()
    assert {c.source for c in recorder.changes()} == {watched}


def test_a_delete_is_reported_gone_and_a_rename_reports_the_new_path(
    tracker: WatchdogTracker, tmp_path: Path
) -> None:
    a = FilesystemSource(HOST, str(tmp_path / "a.txt"))
    b = FilesystemSource(HOST, str(tmp_path / "b.txt"))
    write(a.path, "a")
    write(b.path, "b")
    recorder = Recorder()
    tracker.start(recorder)
    tracker.watch(a)
    tracker.watch(b)

    os.unlink(b.path)
    os.rename(a.path, tmp_path / "a2.txt")

    expected = {
        SourceChange(b, gone=True),
        SourceChange(a, gone=True),
        SourceChange(FilesystemSource(HOST, str(tmp_path / "a2.txt")), renamed_from=a),
    }
    eventually(lambda: expected <= set(recorder.changes()), "the three changes")


def test_a_kernel_queue_overflow_reports_every_watched_file(
    tracker: WatchdogTracker, tmp_path: Path
) -> None:
    sources = {FilesystemSource(HOST, str(tmp_path / f"{n}.txt")) for n in range(3)}
    for source in sources:
        write(source.path, "x")
        tracker.watch(source)
    recorder = Recorder()
    tracker.start(recorder)

    # What watchdog logs when inotify drops events (IN_Q_OVERFLOW); it offers no other signal.
    logging.getLogger("watchdog.observers.inotify_c").warning(
        "Inotify queue overflowed; filesystem events were lost"
    )

    eventually(lambda: {c.source for c in recorder.changes()} == sources, "a full rescan")


def test_a_failing_handler_is_recorded_logged_and_passed_to_on_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    errors: list[TrackerFailure] = []
    tracker = WatchdogTracker(HOST, on_error=errors.append)
    source = FilesystemSource(HOST, str(tmp_path / "x.txt"))
    write(source.path, "1")

    def broken(changes: Sequence[SourceChange]) -> None:
        raise ValueError("handler bug")

    tracker.start(broken)
    tracker.watch(source)
    try:
        write(source.path, "2")
        failures = eventually(tracker.failures, "the recorded failure")
    finally:
        tracker.close()

    assert failures[0].paths == (source.path,)
    assert isinstance(failures[0].error, ValueError)
    assert errors and errors[0].error is failures[0].error
    assert "handler bug" in caplog.text


def test_closing_delivers_what_was_already_seen(tmp_path: Path) -> None:
    tracker = WatchdogTracker(HOST, delay=3600, max_delay=3600)  # nothing is due before close
    source = FilesystemSource(HOST, str(tmp_path / "late.txt"))
    write(source.path, "1")
    recorder = Recorder()
    tracker.start(recorder)
    tracker.watch(source)
    write(source.path, "2")
    eventually(lambda: not tracker.idle(timeout=0), "the event to be noted")

    tracker.close()

    assert [c.source for c in recorder.changes()] == [source]
    assert tracker.watch(source) is False  # closed
