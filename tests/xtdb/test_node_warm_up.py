"""A node runs its request path on a scratch node of its own before it answers (``selfctx.warm-up``,
decision 0167): the JIT compiles the path first, and nothing of it reaches the node's store.

The suite's nodes skip it (``SELFCTX_XTDB_WARM_UP_MS=0``, tests/conftest.py); these tests turn it
on for the nodes they start."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import httpx
import pytest

from selfctx.adapters.xtdb import XtdbNode
from selfctx.adapters.xtdb.errors import XtdbSetupError
from selfctx.adapters.xtdb.node import java_command, warm_up_ms

pytestmark = pytest.mark.xtdb


def status(node: XtdbNode) -> dict[str, object]:
    answer = httpx.get(f"{node.url}/_xtdb/status", headers=node.headers, timeout=30.0)
    answer.raise_for_status()
    body: dict[str, object] = answer.json()
    return body


def type_query(node: XtdbNode, kind: str) -> list[object]:
    answer = httpx.post(
        f"{node.url}/_xtdb/query",
        headers={**node.headers, "Content-Type": "application/edn"},
        content=f'{{:query {{:find [?e] :where [[?e :type ?t]] :in [?t]}} :in-args ["{kind}"]}}',
        timeout=30.0,
    )
    answer.raise_for_status()
    rows: list[object] = answer.json()
    return rows


@pytest.mark.parametrize("config", ["memory", "rocksdb"])
def test_the_warm_up_runs_before_the_node_answers_and_leaves_nothing_in_its_store(
    xtdb_jars: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    config: Literal["memory", "rocksdb"],
) -> None:
    monkeypatch.setenv("SELFCTX_XTDB_WARM_UP_MS", "1500")
    data = tmp_path / "data" if config == "rocksdb" else None
    with XtdbNode(config, data_dir=data, run_dir=tmp_path) as node:
        seen = status(node)
        warmed = seen["selfctxWarmUp"]
        assert isinstance(warmed, dict)
        assert isinstance(warmed["rounds"], int) and warmed["rounds"] >= 1, warmed
        # Bounded: 1.5 s, or the one round it always runs.
        assert isinstance(warmed["ms"], int) and 0 <= warmed["ms"] < 1500 + 60_000
        # Nothing the scratch node was sent is the node's: no transaction, no document written
        # or read, no document of any type the warm-up wrote, no file version in the feed, and
        # only the launcher's own requests counted.
        assert seen["selfctxDocumentsWritten"] == 0
        assert seen["selfctxDocumentsRead"] == 0
        assert isinstance(seen["selfctxRequests"], int) and seen["selfctxRequests"] <= 3
        latest = httpx.get(
            f"{node.url}/_xtdb/latest-submitted-tx", headers=node.headers, timeout=30.0
        )
        assert latest.status_code == 404
        for kind in ("log", "request", "session", "file"):
            assert type_query(node, kind) == []
        versions = httpx.get(
            f"{node.url}/_xtdb/selfctx/versions",
            params={"after-tx-id": -1},
            headers=node.headers,
            timeout=30.0,
        )
        versions.raise_for_status()
        assert versions.json()["versions"] == []
        assert versions.json()["position"] == -1  # no transaction seen
    log = (tmp_path / "node.log").read_text(errors="replace")
    assert "warm-up:" in log
    assert "the warm-up failed" not in log and "the warm-up stopped" not in log
    # Started before the node's server: the warm-up's line comes first.
    assert log.index("warm-up:") < log.index("HTTP server started")


def test_a_node_started_without_a_warm_up_says_so(
    xtdb_jars: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SELFCTX_XTDB_WARM_UP_MS", "0")
    with XtdbNode("memory", run_dir=tmp_path) as node:
        assert status(node)["selfctxWarmUp"] is None
    assert "warm-up:" not in (tmp_path / "node.log").read_text(errors="replace")


@pytest.mark.parametrize("value", ["-1", "lots", "1.5"])
def test_a_bad_warm_up_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("SELFCTX_XTDB_WARM_UP_MS", value)
    with pytest.raises(XtdbSetupError, match="SELFCTX_XTDB_WARM_UP_MS"):
        warm_up_ms()


def test_the_warm_up_is_on_by_default_and_reaches_the_jvm(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("SELFCTX_XTDB_WARM_UP_MS", raising=False)
    assert warm_up_ms() > 0
    assert f"-Dselfctx.warm-up-ms={warm_up_ms()}" in java_command(tmp_path / "n.edn", tmp_path)
    monkeypatch.setenv("SELFCTX_XTDB_WARM_UP_MS", "0")
    assert "-Dselfctx.warm-up-ms=0" in java_command(tmp_path / "n.edn", tmp_path)
