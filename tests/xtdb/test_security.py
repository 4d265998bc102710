"""Only the node's owner can use it or read its data (decision 0027): the secret
every request carries, browser-shaped requests, queries and transactions that would run code,
and the modes of everything the node writes. Against real nodes; as ``nobody`` where the suite
runs as root."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import pytest

from selfctx.adapters.xtdb import XtdbNode, open_store, secret
from selfctx.application.ports.store import StoreRejected
from tests.filesystem.helpers import run_unprivileged

pytestmark = pytest.mark.xtdb

EDN = "application/edn"
READ_PASSWD = '{:query {:find [?x] :where [[(slurp "/etc/passwd") ?x]]}}'


def post_query(node: XtdbNode, body: str, **headers: str) -> httpx.Response:
    return httpx.post(
        node.url + "/_xtdb/query",
        content=body,
        headers={**node.headers, "Content-Type": EDN, **headers},
    )


def test_requests_without_the_secret_are_refused(xtdb_node: XtdbNode) -> None:
    guess = "0" * 64
    status = xtdb_node.url + "/_xtdb/status"
    for headers in ({}, {"Authorization": f"Bearer {guess}"}, {"Authorization": guess}):
        answer = httpx.get(status, headers=headers)
        assert answer.status_code == 401, headers
        assert "needs its secret" in answer.json()["error"]
        assert answer.headers["WWW-Authenticate"] == "Bearer"
        refused = httpx.post(
            xtdb_node.url + "/_xtdb/query",
            content=READ_PASSWD,
            headers={**headers, "Content-Type": EDN},
        )
        assert refused.status_code == 401 and "root:" not in refused.text
    assert httpx.get(status, headers=xtdb_node.headers).status_code == 200
    # A store given a wrong secret says what was refused and where the secret was looked for.
    with pytest.raises(StoreRejected) as err:
        open_store(xtdb_node.url, key=guess)
    assert err.value.status == 401 and "key argument" in str(err.value)
    assert xtdb_node.secret is not None
    log = xtdb_node.log_file.read_text()
    assert guess not in log and xtdb_node.secret not in log


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
    ],
)
def test_requests_a_web_page_could_send_are_refused(
    xtdb_node: XtdbNode, headers: dict[str, str]
) -> None:
    """Even with the secret: a page must never reach the node through a user's browser."""
    answer = post_query(xtdb_node, "{:query {:find [?e] :where [[?e :xt/id]]}}", **headers)
    assert answer.status_code == 403
    assert "web pages" in answer.json()["error"]
    status = httpx.get(xtdb_node.url + "/_xtdb/status", headers={**xtdb_node.headers, **headers})
    assert status.status_code == 403


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("/_xtdb/query", "text/plain"),
        ("/_xtdb/query", "application/x-www-form-urlencoded"),
        ("/_xtdb/query", "multipart/form-data; boundary=x"),
        ("/_xtdb/submit-tx", "text/plain;charset=UTF-8"),
        ("/_xtdb/submit-tx", "application/x-www-form-urlencoded"),
    ],
)
def test_bodies_of_the_wrong_content_type_are_refused(
    xtdb_node: XtdbNode, path: str, content_type: str
) -> None:
    body = READ_PASSWD if path.endswith("query") else json.dumps({"tx-ops": []})
    answer = httpx.post(
        xtdb_node.url + path,
        content=body,
        headers={**xtdb_node.headers, "Content-Type": content_type},
    )
    assert answer.status_code == 415
    assert "reads application/" in answer.json()["error"]


@pytest.mark.parametrize(
    "query",
    [
        READ_PASSWD,
        '{:query {:find [?x] :where [[(clojure.core/slurp "/etc/passwd") ?x]]}}',
        '{:query {:find [(slurp "/etc/passwd")] :where [[?e :xt/id]]}}',
        '{:query {:find [?x] :where [[(spit "/tmp/selfctx-spit" "x") ?x]]}}',
        '{:query {:find [?x] :where [[(clojure.java.shell/sh "id") ?x]]}}',
        "{:query {:find [?x] :where [[(eval (quote (+ 1 2))) ?x]]}}",
    ],
)
def test_queries_cannot_call_what_the_adapter_does_not_need(
    xtdb_node: XtdbNode, query: str
) -> None:
    answer = post_query(xtdb_node, query)
    assert answer.status_code == 400, answer.text
    assert "allowlist" in answer.text or "namespaced function" in answer.text
    assert "root:" not in answer.text
    assert not Path("/tmp/selfctx-spit").exists()


def test_the_adapters_own_queries_still_run(xtdb_node: XtdbNode) -> None:
    """The allow-list keeps the predicate the session log needs (``>``)."""
    with closing(open_store(xtdb_node.url)) as store:
        sid = "security-log"
        store.commit(
            [
                {"xt/id": f"log:{sid}:{n}", "type": "session_log", "session_id": sid, "seq": n}
                for n in (1, 2, 3)
            ]
        )
        assert [d["seq"] for d in store.session_log(sid, after_seq=1)] == [2, 3]


@pytest.mark.parametrize(
    "op",
    [
        ["put", {"xt/id": "evil-fn", "xt/fn": '(fn [ctx] (slurp "/etc/passwd"))'}],
        ["fn", "evil-fn"],
    ],
)
def test_transaction_functions_are_refused(xtdb_node: XtdbNode, op: list[Any]) -> None:
    answer = httpx.post(
        xtdb_node.url + "/_xtdb/submit-tx",
        json={"tx-ops": [op]},
        headers=xtdb_node.headers,
    )
    assert answer.status_code == 400
    assert "transaction functions are not accepted" in answer.json()["error"]


def _modes(folder: Path) -> dict[str, int]:
    """Permission bits of ``folder`` and of everything below it, by path."""
    found = {str(folder): stat.S_IMODE(folder.stat().st_mode)}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(root, name)
            try:
                found[path] = stat.S_IMODE(os.lstat(path).st_mode)
            except FileNotFoundError:
                continue  # RocksDB compacted it away since the walk listed it
    return found


def test_what_a_node_writes_is_its_owners_alone(rocksdb_node: XtdbNode) -> None:
    assert rocksdb_node.data_dir is not None and rocksdb_node.key_file is not None
    with closing(open_store(rocksdb_node.url)) as store:
        store.commit([{"xt/id": "private", "content": "session content"}])
    modes = {**_modes(rocksdb_node.data_dir), **_modes(rocksdb_node.run_dir)}
    assert any(path.endswith(".sst") or path.endswith("CURRENT") for path in modes), modes
    assert any(path.endswith("node.log") for path in modes) and len(modes) > 20
    readable = {path: oct(mode) for path, mode in modes.items() if mode & 0o077}
    assert readable == {}
    assert stat.S_IMODE(rocksdb_node.key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(rocksdb_node.key_file.parent.stat().st_mode) == 0o700


def test_another_user_gets_nothing(rocksdb_node: XtdbNode) -> None:
    """As ``nobody`` (the suite runs as root on CI): no secret, no files, no answers."""
    assert rocksdb_node.data_dir is not None and rocksdb_node.key_file is not None
    with closing(open_store(rocksdb_node.url)) as store:
        store.commit([{"xt/id": "private", "content": "session content"}])
    key_file, data, url = rocksdb_node.key_file, rocksdb_node.data_dir, rocksdb_node.url
    files = [p for p in _modes(data) if os.path.isfile(p)]

    def probe() -> dict[str, Any]:
        def denied(action: Any) -> bool:
            try:
                action()
            except PermissionError:
                return True
            return False

        return {
            "key": denied(key_file.read_text),
            "data": denied(lambda: os.listdir(data)),
            "files": all(denied(lambda p=p: open(p, "rb").read(1)) for p in files),
            "status": httpx.get(url + "/_xtdb/status").status_code,
            "query": httpx.post(
                url + "/_xtdb/query", content=READ_PASSWD, headers={"Content-Type": EDN}
            ).status_code,
            "submit": httpx.post(
                url + "/_xtdb/submit-tx",
                content=json.dumps({"tx-ops": [["put", {"xt/id": "x"}]]}),
                headers={"Content-Type": "application/json"},
            ).status_code,
        }

    seen = run_unprivileged(probe)
    assert isinstance(seen, dict), seen
    assert (seen["status"], seen["query"], seen["submit"]) == (401, 401, 401)
    if os.geteuid() == 0:  # the probe ran as nobody; as the owner it could read its own files
        assert (seen["key"], seen["data"], seen["files"]) == (True, True, True), seen


def test_another_process_finds_the_node_by_its_url_and_a_restart_is_followed(
    rocksdb_node: XtdbNode,
) -> None:
    script = (
        "import sys\n"
        "from selfctx.adapters.xtdb import open_store\n"
        "s = open_store(sys.argv[1])\n"
        "s.commit([{'xt/id': 'from-elsewhere', 'v': 1}])\n"
        "s.close()\n"
    )
    subprocess.run([sys.executable, "-c", script, rocksdb_node.url], check=True, timeout=120)
    store = open_store(rocksdb_node.url)
    try:
        assert store.get("from-elsewhere") == {"xt/id": "from-elsewhere", "v": 1}
        before = rocksdb_node.secret
        rocksdb_node.stop()
        assert rocksdb_node.key_file is not None and not rocksdb_node.key_file.exists()
        rocksdb_node.start()  # the same port, a new secret
        assert rocksdb_node.secret != before
        assert store.get("from-elsewhere") == {"xt/id": "from-elsewhere", "v": 1}
        assert secret.read_key(rocksdb_node.url) == rocksdb_node.secret
    finally:
        store.close()
