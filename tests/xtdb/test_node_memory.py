"""A node's memory stays bounded whatever the size of its documents: it keeps the documents it
read last up to a size, not up to a count (``selfctx.cache``, decision 0017), and a large answer
does not leave a buffer of its size behind on the thread that sent it."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from selfctx.adapters.xtdb import XtdbNode, XtdbSetupError, open_store
from selfctx.adapters.xtdb.node import doc_cache_bytes

pytestmark = pytest.mark.xtdb

MB = 1024 * 1024


def digest(doc: Mapping[str, Any]) -> str:
    return hashlib.sha256(doc["content"].encode()).hexdigest()


def test_a_small_heap_writes_and_reads_far_more_documents_than_it_could_hold(
    xtdb_jars: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 320 documents of 1 MB each through a node with a 256 MB heap. XTDB's own cache keeps up to
    # 131,072 documents, whatever their size: every document indexed or read stays on the heap,
    # and this node runs out of it while writing ("Java heap space"). Ours keeps 16 MB of them.
    monkeypatch.setenv(
        "SELFCTX_XTDB_JAVA_OPTS",
        "-Xms256m -Xmx256m -XX:MaxDirectMemorySize=1g -XX:+UseSerialGC",
    )
    monkeypatch.setenv("SELFCTX_XTDB_DOC_CACHE_MB", "16")
    digests: dict[str, str] = {}
    with XtdbNode("rocksdb", tmp_path / "data") as node:
        store = open_store(node.url, timeout=60.0)
        try:
            for batch in range(20):
                docs = [
                    {
                        "xt/id": f"big-{batch}-{n}",
                        "type": "file",
                        "content": os.urandom(MB // 2).hex(),
                    }
                    for n in range(16)
                ]
                store.commit(docs)
                digests |= {d["xt/id"]: digest(d) for d in docs}
            ids = sorted(digests)
            for start in range(0, len(ids), 16):
                got = store.get_many(ids[start : start + 16])
                want = {i: digests[i] for i in ids[start : start + 16]}
                assert {i: digest(d) for i, d in got.items()} == want
        finally:
            store.close()
        assert "OutOfMemoryError" not in node.log_file.read_text(errors="replace")


@pytest.mark.parametrize("value", ["0", "-3", "lots", "1.5"])
def test_a_bad_document_cache_size_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("SELFCTX_XTDB_DOC_CACHE_MB", value)
    with pytest.raises(XtdbSetupError, match="SELFCTX_XTDB_DOC_CACHE_MB"):
        doc_cache_bytes()


def test_the_document_cache_size_defaults_to_64_mb(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SELFCTX_XTDB_DOC_CACHE_MB", raising=False)
    assert doc_cache_bytes() == 64 * MB
    monkeypatch.setenv("SELFCTX_XTDB_DOC_CACHE_MB", "200")
    assert doc_cache_bytes() == 200 * MB


def test_large_answers_do_not_pin_direct_memory_on_each_request_thread(
    xtdb_jars: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 40 answers of 8 MB from a node allowed 48 MB of direct memory. The JDK copies each socket
    # write into a temporary direct buffer of the write's size and keeps one per thread; written
    # whole, each answer pinned 8 MB on a thread of its own (the pool starts a thread per request
    # up to 32), and the sixth read or so never got its answer.
    monkeypatch.setenv(
        "SELFCTX_XTDB_JAVA_OPTS", "-Xms512m -Xmx1g -XX:MaxDirectMemorySize=48m -XX:+UseParallelGC"
    )
    docs = [{"xt/id": f"d{n}", "content": os.urandom(MB // 2).hex()} for n in range(8)]
    with XtdbNode("rocksdb", tmp_path / "data") as node:
        store = open_store(node.url, timeout=20.0)
        try:
            store.commit(docs)
            for _ in range(40):
                got = store.get_many(d["xt/id"] for d in docs)
                assert {i: digest(d) for i, d in got.items()} == {
                    d["xt/id"]: digest(d) for d in docs
                }
        finally:
            store.close()
