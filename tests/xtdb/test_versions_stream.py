"""The node's versions feed pushed to a stream each process holds (decision 0148): a read of
the feed is skipped when the stream names no version of a held file, and never misses a
version whose writer, in this process or another, was told it is written."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest

from selfctx.adapters.xtdb import XtdbNode, XtdbStore, open_store
from selfctx.adapters.xtdb.stream import VersionsStream

_WRITER = """
import sys
from selfctx.adapters.xtdb import open_store
store = open_store(sys.argv[1], timeout=30.0)
for line in sys.stdin:
    oid, h = line.split()
    store.commit([{"xt/id": oid, "type": "file", "object_hash": h}])
    print("written", flush=True)
store.close()
"""


@pytest.fixture
def ns() -> str:
    return f"vs{uuid.uuid4().hex[:10]}-"


@pytest.fixture(scope="module")
def stream_node(xtdb_jars: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[XtdbNode]:
    """A node of this module's own: its tests count the node's requests and fill its streams'
    slots, which the suite's shared node must not see (decisions 0148, 0154)."""
    node = XtdbNode("rocksdb", tmp_path_factory.mktemp("xtdb-streams") / "data")
    with node:
        yield node


@pytest.fixture
def store(stream_node: XtdbNode) -> Iterator[XtdbStore]:
    with closing(open_store(stream_node.url, timeout=30.0)) as store:
        yield store


def _requests(store: XtdbStore) -> int:
    """The node's count of requests answered (one more for asking it)."""
    return int(store.client.status(timeout=30.0)["selfctxRequests"])


def _eventually(check: Callable[[], bool], what: str, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _open_stream(store: XtdbStore) -> VersionsStream:
    """The store's stream, once open (the first question opens it and asks the node)."""
    store.file_versions(None)
    stream = store._stream
    assert stream is not None and store.feed_stream
    _eventually(lambda: stream.opened > 0, "the stream opened")
    return stream


def test_another_processs_version_is_on_the_stream_once_its_writer_is_told(
    stream_node: XtdbNode, store: XtdbStore, ns: str
) -> None:
    """Another OS process commits a file version; as soon as its commit returned, this process's
    question is answered from its stream and lists it, and the next question, nothing having
    changed, is answered from the stream too: the node is asked nothing."""
    stream = _open_stream(store)
    oid = f"{ns}f"
    start = store.file_versions(None).position
    position = -1 if start is None else start
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, stream_node.url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdin is not None and writer.stdout is not None
    try:
        for i in range(30):
            held = {oid: f"h{i - 1}"}
            answered = stream.answered
            writer.stdin.write(f"{oid} h{i}\n")
            writer.stdin.flush()
            assert writer.stdout.readline().strip() == "written"
            found = store.file_versions(position)
            assert (oid, f"h{i}") in [(o, h) for _, o, h in found.versions], i
            assert found.complete and stream.answered == answered + 1
            held = {oid: f"h{i}"}
            asked = _requests(store)
            again = store.file_versions(found.position, held)
            assert again.versions == () and again.complete
            assert _requests(store) == asked + 1  # only the count itself: no read
            assert found.position is not None
            position = found.position
    finally:
        writer.stdin.close()
        writer.wait(30)


def test_a_changed_held_file_is_read_from_the_node_with_its_document(
    store: XtdbStore, ns: str
) -> None:
    """A version of a held file other than the one held: the node is asked, and its answer
    carries the document (decision 0106), as before the stream."""
    stream = _open_stream(store)
    oid = f"{ns}f"
    store.commit([{"xt/id": oid, "type": "file", "object_hash": "h1", "content": "one"}])
    position = store.file_versions(None).position
    store.commit([{"xt/id": oid, "type": "file", "object_hash": "h2", "content": "two"}])
    answered = stream.answered
    found = store.file_versions(position, {oid: "h1"})
    assert found.documents[oid]["content"] == "two"
    assert stream.answered == answered
    assert store.file_versions(position, {oid: "h2"}).documents == {}
    assert stream.answered == answered + 1


def test_a_lost_stream_falls_back_to_reading_and_opens_again(store: XtdbStore, ns: str) -> None:
    """With the stream lost, every question goes to the node and still sees every version; the
    stream is opened again, and questions are answered from it from where it starts."""
    stream = _open_stream(store)
    oid = f"{ns}f"
    position = store.file_versions(None).position
    stream.drop()
    asked = _requests(store)
    store.commit([{"xt/id": oid, "type": "file", "object_hash": "h1"}])
    found = store.file_versions(position)
    assert (oid, "h1") in [(o, h) for _, o, h in found.versions]
    assert _requests(store) > asked + 2  # the commit, the count, and the read
    _eventually(lambda: stream.opened == 2, "the stream opened again")
    store.commit([{"xt/id": oid, "type": "file", "object_hash": "h2"}])
    # From a point before the new stream's start: the node is asked; after it, the stream.
    found = store.file_versions(position)
    assert (oid, "h2") in [(o, h) for _, o, h in found.versions]
    answered = stream.answered
    later = store.file_versions(found.position, {oid: "h2"})
    assert later.versions == () and stream.answered == answered + 1


def test_a_stream_at_its_end_is_noticed_at_the_next_question(stream_node: XtdbNode) -> None:
    """A stream whose connection reads as at its end (what the node closing it, or going away,
    looks like from here) answers nothing from the next question on: the node is asked."""
    with closing(open_store(stream_node.url, timeout=30.0)) as store:
        stream = _open_stream(store)
        position = store.file_versions(None).position
        assert stream.answer(position, None) is not None
        sock = stream._sock
        assert sock is not None
        sock.shutdown(socket.SHUT_RD)
        assert stream.answer(position, None) is None


def _raw_stream(node: XtdbNode) -> tuple[socket.socket, bytes]:
    """A stream asked for as a client's would be, and the node's answer up to its first line (or
    all of it, when the node ends it)."""
    sock = socket.create_connection(("127.0.0.1", node.port), 30.0)
    head = f"GET /_xtdb/selfctx/versions/stream HTTP/1.0\r\nHost: 127.0.0.1:{node.port}\r\n"
    auth = node.headers["Authorization"]
    sock.sendall(f"{head}Authorization: {auth}\r\n\r\n".encode("latin-1"))
    data = b""
    while b"\r\n\r\n" not in data or b"\n" not in data.split(b"\r\n\r\n", 1)[1]:
        more = sock.recv(65536)
        if not more:
            break
        data += more
    return sock, data


def _served(answer: bytes) -> bool:
    return answer.split(b"\r\n", 1)[0].split()[1:2] == [b"200"]


def _line_with(sock: socket.socket, wanted: bytes) -> bool:
    """Whether the stream brings a line holding ``wanted`` (within 30 s)."""
    sock.settimeout(30.0)
    data = b""
    while wanted not in data:
        more = sock.recv(65536)
        if not more:
            return False
        data += more
    return True


def test_more_streams_than_request_threads_are_served_and_each_sees_a_commit(
    stream_node: XtdbNode, store: XtdbStore, ns: str
) -> None:
    """40 processes' streams at once, more than the node's 32 request threads (decision 0154: a
    stream holds a connection, not a thread), and a file version committed reaches every one."""
    socks: list[socket.socket] = []
    try:
        for _ in range(40):
            sock, answer = _raw_stream(stream_node)
            socks.append(sock)
            assert _served(answer), answer[:200]
        store.commit([{"xt/id": f"{ns}f", "type": "file", "object_hash": "h40"}])
        assert all(_line_with(sock, f'"{ns}f"'.encode()) for sock in socks)
        assert store.client.status(timeout=30.0)["selfctxRequests"] > 0  # still answering
    finally:
        for sock in socks:
            sock.close()


def test_past_the_cap_a_stream_is_refused_and_a_gone_ones_slot_is_given_at_once(
    stream_node: XtdbNode,
) -> None:
    """Streams are served up to a cap (bounded resources), then refused with 503; once one of
    their processes is gone, the next stream asked for gets its slot at once, not at the next
    heartbeat (decision 0154)."""
    socks: list[socket.socket] = []
    try:
        refused: bytes | None = None
        for _ in range(2000):
            sock, answer = _raw_stream(stream_node)
            if not _served(answer):
                sock.close()
                refused = answer
                break
            socks.append(sock)
        assert refused is not None and refused.split()[1] == b"503", "no cap"
        assert len(socks) > 32
        socks.pop(0).close()
        sock, answer = _raw_stream(stream_node)
        socks.append(sock)
        assert _served(answer), answer[:200]
    finally:
        for sock in socks:
            sock.close()
