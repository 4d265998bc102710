"""``selfctx bench store`` runs end to end and prints the JSON it promises (tiny sizes, in-memory
nodes; the figures themselves are reported in docs/benchmarks.md, not asserted)."""

from __future__ import annotations

import json

import pytest

from selfctx.adapters.bench.store import copy_latest, stdlib_sources
from selfctx.adapters.cli.main import main
from selfctx.adapters.memory import MemoryStore


@pytest.mark.xtdb
@pytest.mark.slow
def test_bench_store_prints_one_json_object_with_its_figures(
    xtdb_jars: object, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["bench", "store", "--json", "--sizes", "30", "--node", "memory"]  # one node
    code = main([*args, "--index-limit", "40"])

    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) == {"per_turn_ms", "bytes_per_turn", "resume_s", "index"}
    for store in ("memory", "xtdb"):
        assert set(result["per_turn_ms"][store]) == {"30"}
        for figures in result["per_turn_ms"][store].values():
            assert 0 < figures["median"] <= figures["p95"]
    assert set(result["bytes_per_turn"]) == {"xtdb"}
    assert all(b > 0 for b in result["bytes_per_turn"]["xtdb"].values())
    assert set(result["resume_s"]) == {"batch", "one_by_one"}
    assert all(s > 0 for s in result["resume_s"].values())
    index = result["index"]
    assert set(index) == {
        "files",
        "files_per_s",
        "mb_per_s",
        "raw_read_sha256_mb_per_s",
        "passes_files_per_s",
    }
    assert index["files"] == 40 and index["files_per_s"] > 0
    assert len(index["passes_files_per_s"]) == 3
    assert index["passes_files_per_s"][0] == index["files_per_s"]


def test_copying_a_session_keeps_the_latest_version_of_every_document() -> None:
    source, target = MemoryStore(), MemoryStore()
    source.commit([{"xt/id": "a", "type": "file", "v": 1}, {"xt/id": "b", "type": "chat"}])
    source.commit([{"xt/id": "a", "type": "file", "v": 2}])
    assert copy_latest(source, target) == 2
    assert target.get_many(["a", "b"]) == source.get_many(["a", "b"])


def test_the_index_bench_reads_the_standard_library() -> None:
    files = stdlib_sources()
    assert len(files) > 100
    assert all(p.suffix == ".py" and "site-packages" not in p.parts for p in files)
    assert any(p.name == "os.py" for p in files)
