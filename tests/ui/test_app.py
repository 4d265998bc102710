"""The inspector over HTTP, on both stores: who gets in (its token, loopback names, no cross-site
requests), what every answer forbids, and what each page shows of a session written through
the proxy; ``selfctx ui`` and ``selfctx proxy`` as processes print where it is."""

from __future__ import annotations

import contextlib
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from selfctx.adapters.memory import MemoryStore
from selfctx.adapters.proxy.serving import serve_in_thread
from selfctx.adapters.ui import Inspector
from selfctx.application.ports.store import ObjectStore
from selfctx.application.requests import context_digest
from tests.conftest import STORE_KINDS
from tests.ui.support import CALC_V1, CALC_V2, ODD_OUTPUT, Workbench, workbench, written_session


@pytest.fixture(scope="module", params=STORE_KINDS)
def bench(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Workbench]:
    """One session for the module (the tests only add to it), on each store."""
    if request.param == "xtdb":
        from selfctx.adapters.xtdb import open_store

        store: ObjectStore = open_store(request.getfixturevalue("xtdb_node").url, timeout=30)
    else:
        store = MemoryStore()
    try:
        with workbench(store, tmp_path_factory.mktemp("ui") / "work") as running:
            written_session(running)
            yield running
    finally:
        store.close()


@contextlib.contextmanager
def opened(bench: Workbench) -> Iterator[httpx.Client]:
    """A client holding the inspector's cookie, as a browser does after opening the URL."""
    with httpx.Client(follow_redirects=True, timeout=60) as client:
        answer = client.get(bench.inspector.url(bench.ui))
        assert answer.status_code == 200, answer.text
        yield client


def test_the_token_is_the_only_way_in(bench: Workbench) -> None:
    with httpx.Client(timeout=60) as bare:
        assert bare.get(bench.ui + "/").status_code == 401
        assert bare.get(bench.ui + "/?token=wrong").status_code == 401
        first = bare.get(bench.inspector.url(bench.ui))
        assert first.status_code == 303
        assert first.headers["location"] == "/_selfctx/ui/"  # the token leaves the address bar
        cookie = first.headers["set-cookie"]
        assert (
            "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/_selfctx/ui/" in cookie
        )
        assert bare.get(bench.ui + "/").status_code == 200  # the cookie now
        # another start's token (or a cookie of another inspector) does not open this one
        other = Inspector(bench.service)
        bare.cookies.clear()
        assert bare.get(other.url(bench.ui)).status_code == 401
    # without the trailing slash, the proxy sends the browser to the inspector, token and all
    with httpx.Client(timeout=60) as bare:
        moved = bare.get(bench.ui + f"?token={bench.inspector.token}")
        assert moved.status_code == 308
        assert moved.headers["location"] == f"/_selfctx/ui/?token={bench.inspector.token}"


@pytest.mark.parametrize(
    "headers",
    [
        {"sec-fetch-site": "cross-site"},
        {"sec-fetch-site": "same-site"},
        {"origin": "http://evil.example"},
        {"origin": "null"},
        {"host": "evil.example"},
        {"host": "127.0.0.1.nip.io:80"},
    ],
    ids=["cross-site", "same-site", "foreign-origin", "null-origin", "foreign-host", "rebound"],
)
def test_browser_shaped_cross_site_requests_are_refused(
    bench: Workbench, headers: dict[str, str]
) -> None:
    with opened(bench) as client:
        assert client.get(bench.ui + "/", headers=headers).status_code == 403
        sid = bench.session_id
        assert client.get(bench.ui + f"/api/s/{sid}/requests", headers=headers).status_code == 403


def test_it_only_reads_and_answers_its_own_origin(bench: Workbench) -> None:
    with opened(bench) as client:
        host = bench.base.removeprefix("http://")
        same = {"origin": f"http://{host}", "sec-fetch-site": "same-origin"}
        assert client.get(bench.ui + "/", headers=same).status_code == 200
        assert client.post(bench.ui + "/", headers=same).status_code == 405
        assert client.request("DELETE", bench.ui + "/").status_code == 405


def test_every_answer_forbids_anything_from_elsewhere(bench: Workbench) -> None:
    sid = bench.session_id
    with opened(bench) as client:
        for path in ["/", f"/s/{sid}", f"/s/{sid}/r/1", "/static/ui.js", "/static/ui.css"]:
            answer = client.get(bench.ui + path)
            assert answer.status_code == 200, path
            policy = answer.headers["content-security-policy"]
            assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy
            assert answer.headers["x-content-type-options"] == "nosniff"
            assert answer.headers["referrer-policy"] == "no-referrer"
            # nothing names another site: no CDN, no font service, no scheme-relative address
            assert not re.search(r"(?:src|href)\s*=\s*[\"'](?:https?:)?//", answer.text), path
            assert "url(http" not in answer.text and "@import" not in answer.text
        assert client.get(bench.ui + "/static/other.js").status_code == 404


def test_the_sessions_page_shows_figures_and_filters(bench: Workbench) -> None:
    sid = bench.session_id
    records = bench.service.requests(sid)
    with opened(bench) as client:
        page = client.get(bench.ui + "/").text
        assert sid in page and "test-agent/1.0" in page and "scripted-model" in page
        assert f">{len(records):,}<" in page
        assert f">{records[-1].total_naive:,}<" in page
        assert f">{records[-1].total_managed:,}<" in page
        assert sid not in client.get(bench.ui + "/?q=no-such-session").text
        assert sid in client.get(bench.ui + "/?q=TEST-AGENT&sort=requests&desc=0").text


def test_a_request_is_shown_exactly_as_it_was_sent(bench: Workbench) -> None:
    sid = bench.session_id
    records = bench.service.requests(sid)
    sent = bench.model.of("anthropic")
    assert len(records) == len(sent)
    with opened(bench) as client:
        for record in records:
            page = client.get(bench.ui + f"/s/{sid}/r/{record.n}").text
            assert 'id="identical"' in page and "✓ Rebuilt from the store" in page, record.n
        last = client.get(bench.ui + f"/s/{sid}/r/{records[-1].n}").text
        # collapsed outputs are shown by their line and say why they collapsed
        assert "why it is collapsed: " in last and "log position" in last
        assert re.search(r"\[#\d+ collapsed: bash ok", last)
        # every tool output the model was sent in full appears, escaped, in the page
        escaped = ODD_OUTPUT.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        first_with_odd = next(
            r.n for r in records if "odd" in str(bench.service.past_context(sid, r.seq).context)
        )
        assert escaped.replace("\r\n", "\n") in client.get(
            bench.ui + f"/s/{sid}/r/{first_with_odd}"
        ).text.replace("\r\n", "\n")
        # time travel: the same view at any log position, as selfctx show --at-position
        page = client.get(bench.ui + f"/s/{sid}/at/3").text
        assert "log position 3" in page and "selfctx show --at-position 3" in page
        assert (
            client.get(bench.ui + f"/s/{sid}/r?n=2", follow_redirects=False)
            .headers["location"]
            .endswith(f"/s/{sid}/r/2")
        )


def test_a_collapsed_output_comes_back_byte_for_byte(bench: Workbench) -> None:
    sid = bench.session_id
    state = bench.service.state(sid)
    odd = next(
        i
        for i in state.index
        if bench.service.object(sid, i).content == ODD_OUTPUT  # the tool output as stored
    )
    assert odd not in state.active, "the session is meant to have collapsed it"
    tx = bench.service.requests(sid)[-1].tx_id
    with opened(bench) as client:
        answer = client.get(bench.ui + f"/api/content/{odd}?tx={tx}")
        assert answer.status_code == 200
        assert answer.headers["content-type"] == "text/plain; charset=utf-8"
        assert answer.content == ODD_OUTPUT.encode("utf-8")
        assert bench.produced["odd"] == [ODD_OUTPUT]


def test_an_object_page_lists_versions_diffs_and_where_it_was_seen(bench: Workbench) -> None:
    sid = bench.session_id
    calc = bench.service.object_id_for(str(bench.workspace / "calc.py"))
    versions = bench.service.history(calc)
    assert [v.document.get("content") for v in versions][-2:] == [CALC_V1, CALC_V2]
    with opened(bench) as client:
        page = client.get(bench.ui + f"/o/{calc}").text
        assert "calc.py" in page and versions[-1].document["object_hash"] in page
        assert f'data-include="/_selfctx/ui/o/{calc}/met?part=1"' in page
        met = client.get(bench.ui + f"/o/{calc}/met?part=1").text
        assert met.startswith('<ul id="met-list">') and sid in met and "first sent in" in met
        assert "shown in full in requests" in met
        assert "<h1>Sessions that met" in client.get(bench.ui + f"/o/{calc}/met").text
        diff = client.get(bench.ui + f"/o/{calc}?a={len(versions) - 1}&b={len(versions)}").text
        assert '<span class="del">-    return a - b</span>' in diff
        assert '<span class="add">+    return a + b</span>' in diff
        same = client.get(bench.ui + f"/o/{calc}?a=1&b=1").text
        assert "the same content" in same
        assert client.get(bench.ui + f"/o/{calc}?a=1&b=99").status_code == 400


def test_search_links_hits_to_requests_and_objects(bench: Workbench) -> None:
    sid = bench.session_id
    with opened(bench) as client:
        page = client.get(bench.ui + f"/s/{sid}/search", params={"q": "return a"}).text
        assert 'id="hits"' in page
        hits = re.findall(r'<li class="hit (\w+)">', page)
        assert "file" in hits and "toolcall" in hits
        assert re.search(rf'href="/_selfctx/ui/s/{re.escape(sid)}/r/\d+#o-tc_', page)
        assert "/_selfctx/ui/o/" in page
        assert "0 hits" in client.get(bench.ui + f"/s/{sid}/search?q=zzzqqq").text


def test_the_timeline_data_grows_with_the_session(bench: Workbench) -> None:
    sid = bench.session_id
    with opened(bench) as client:
        before = client.get(bench.ui + f"/api/s/{sid}/requests?after=0").json()
        count = len(before["requests"])
        assert [r["n"] for r in before["requests"]] == list(range(1, count + 1))
        first = before["requests"][0]
        assert sum(first["parts"].values()) == first["managed"] and first["naive"] > 0
        assert any(m["kind"] == "collapse" for r in before["requests"] for m in r["marks"])
        bench.steps(2)
        after = client.get(bench.ui + f"/api/s/{sid}/requests?after={count}").json()
        assert [r["n"] for r in after["requests"]] == [count + 1, count + 2]
        page = client.get(bench.ui + f"/s/{sid}").text
        assert f'href="/_selfctx/ui/s/{sid}/r/{count + 2}"' in page


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/s/no-such-session", 404),
        ("/s/bad id!", 400),
        ("/s/{sid}/r/0", 400),
        ("/s/{sid}/r/99999", 400),
        ("/s/{sid}/at/0", 400),
        ("/s/{sid}/r?n=x", 400),
        ("/o/no-such-object", 404),
        ("/o/no-such-object/met", 404),
        ("/api/content/no-such-object", 400),
        ("/api/s/{sid}/requests?after=-1", 400),
        ("/api/content/{sid}?tx=abc", 400),
    ],
)
def test_bad_addresses_get_clear_errors(bench: Workbench, path: str, status: int) -> None:
    with opened(bench) as client:
        answer = client.get(bench.ui + path.format(sid=bench.session_id))
        assert answer.status_code == status, answer.text
        if "/api/" in path:
            assert answer.json()["error"]["message"]
        else:
            assert '<p class="bad">' in answer.text


def test_the_inspector_rebuilds_what_the_service_rebuilds(bench: Workbench) -> None:
    """The inspector keeps states and objects between pages; what it renders is what
    ContextService.past_context renders from the store, at every request."""
    sid = bench.session_id
    history = bench.inspector.sessions.get(sid)
    for record in reversed(history.records):
        mine = history.past(record.seq, record.tx_id)
        theirs = bench.service.past_context(sid, record.seq, tx_id=record.tx_id)
        assert mine.context == theirs.context
        assert mine.state == theirs.state
        assert context_digest(mine.context) == record.digest


def _served(argv: list[str], marker: str) -> Any:
    """A ``selfctx`` command that serves, and what it printed up to the line with ``marker``
    (everything it printed if it stopped, or after a minute)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "selfctx.adapters.cli.main", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put("")

    threading.Thread(target=read, daemon=True).start()
    out = ""
    deadline = time.monotonic() + 60
    while marker not in out and time.monotonic() < deadline:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        if not line:
            break
        out += line
    return process, out


def _stop(process: Any) -> None:
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.mark.xtdb
def test_selfctx_ui_serves_a_store_on_loopback_with_a_token(xtdb_node: Any, tmp_path: Path) -> None:
    store = "xtdb://" + xtdb_node.url.removeprefix("http://")
    argv = ["ui", "--store", store, "--port", "0", "--index", str(tmp_path / "index.sqlite")]
    process, out = _served(argv, "token=")
    try:
        url = re.search(r"http://127\.0\.0\.1:\d+/\?token=\S+", out)
        assert url, out + process.stderr.read() if process.poll() is not None else out
        with httpx.Client(follow_redirects=True, timeout=60) as client:
            answer = client.get(url.group())
            assert answer.status_code == 200 and "<h1>Sessions</h1>" in answer.text
            bare = httpx.get(url.group().split("?")[0], timeout=60)
            assert bare.status_code == 401
    finally:
        _stop(process)
    refused = subprocess.run(
        [sys.executable, "-m", "selfctx.adapters.cli.main", "ui", "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2 and "this machine only" in refused.stderr
    memory = subprocess.run(
        [sys.executable, "-m", "selfctx.adapters.cli.main", "ui", "--store", "memory"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert memory.returncode == 2 and "in-memory store" in memory.stderr


def test_selfctx_proxy_prints_where_its_inspector_is(tmp_path: Path) -> None:
    argv = ["proxy", "--port", "0", "--workspace", str(tmp_path), "--no-track"]
    process, out = _served(argv, "inspector")
    try:
        found = re.search(
            r"inspector \(what the model saw\): (http://\S+/_selfctx/ui/\?token=\S+)", out
        )
        assert found, out
        with httpx.Client(follow_redirects=True, timeout=60) as client:
            assert client.get(found.group(1)).status_code == 200
    finally:
        _stop(process)
    process, out = _served([*argv, "--no-ui"], "inspector")
    try:
        assert "inspector: off" in out
        base = re.search(r"listening on (http://\S+)", out)
        assert base
        assert httpx.get(base.group(1) + "/_selfctx/ui/", timeout=60).status_code != 200
    finally:
        _stop(process)


def test_selfctx_proxy_with_workers_serves_its_inspector_at_the_front(tmp_path: Path) -> None:
    argv = ["proxy", "--port", "0", "--workspace", str(tmp_path), "--no-track", "--workers", "2"]
    process, out = _served(argv, "inspector")
    try:
        found = re.search(
            r"inspector \(what the model saw\): (http://\S+)(/_selfctx/ui/\?token=\S+)", out
        )
        assert found, out
        base = found.group(1)
        with httpx.Client(follow_redirects=True, timeout=60) as client:
            page = client.get(base + found.group(2))
            assert page.status_code == 200 and "No sessions in this store yet." in page.text
            for worker in (0, 1):  # both workers answer, each for its own store
                missing = client.get(f"{base}/_selfctx/ui/w/{worker}/s/nobody")
                assert missing.status_code == 404 and "nobody" in missing.text
        assert httpx.get(base + "/_selfctx/ui/", timeout=60).status_code == 401
    finally:
        _stop(process)


def test_the_inspector_can_be_served_on_its_own(bench: Workbench) -> None:
    inspector = Inspector(bench.service)
    with serve_in_thread(inspector.app) as base, httpx.Client(follow_redirects=True) as client:
        page = client.get(inspector.url(base))
        assert page.status_code == 200 and f'href="/s/{bench.session_id}"' in page.text
        assert client.get(base + "/static/ui.css").status_code == 200
