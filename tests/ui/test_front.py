"""The inspector behind the front of ``selfctx proxy --workers N`` (decision 0083), over HTTP: two
workers, each a whole proxy with its inspector reached only with the run's secret, behind the
relay. With a store per worker: the sessions of both listed on one page, each session's pages
from the worker that holds it, its live updates and bytes through the front; with one store for
both: one worker answers everything. The front keeps the inspector's protections (token, loopback
names, no cross-site requests), and a worker cannot be reached around it."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.memory import MemoryStore
from selfctx.adapters.proxy import UI_PATH
from selfctx.application.ports.store import ObjectStore
from tests.conftest import STORE_KINDS
from tests.ui.support import Front, front_of


@pytest.fixture(scope="module")
def apart(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Front]:
    """Each worker with its own in-memory store."""
    with front_of([MemoryStore(), MemoryStore()], tmp_path_factory.mktemp("apart"), False) as f:
        yield f


@contextlib.contextmanager
def opened(front: Front) -> Iterator[httpx.Client]:
    with httpx.Client(follow_redirects=True, timeout=60) as client:
        answer = client.get(front.url)
        assert answer.status_code == 200, answer.text
        yield client


def test_the_sessions_of_every_worker_are_listed_on_one_page(apart: Front) -> None:
    first, second = apart.held(0), apart.held(1)
    assert first != second
    with opened(apart) as client:
        page = client.get(f"{apart.base}{UI_PATH}/")
    assert page.status_code == 200 and "<h1>Sessions</h1>" in page.text
    assert f'href="{UI_PATH}/w/0/s/{first}"' in page.text
    assert f'href="{UI_PATH}/w/1/s/{second}"' in page.text
    assert "2 sessions, 5 recorded requests" in page.text
    assert page.headers["content-security-policy"].startswith("default-src 'self'")
    assert f'href="{UI_PATH}/static/ui.css"' in page.text
    with opened(apart) as client:
        assert client.get(f"{apart.base}{UI_PATH}/static/ui.css").status_code == 200


def test_a_sessions_pages_come_from_the_worker_that_holds_it(apart: Front) -> None:
    second = apart.held(1)
    with opened(apart) as client:
        timeline = client.get(f"{apart.base}{UI_PATH}/w/1/s/{second}")
        assert timeline.status_code == 200 and second in timeline.text
        # every link of the worker's pages leads back to it
        assert f'data-src="{UI_PATH}/w/1/api/s/{second}/requests"' in timeline.text
        assert f'href="{UI_PATH}/w/1/s/{second}/r/2"' in timeline.text
        assert client.get(f"{apart.base}{UI_PATH}/w/0/s/{second}").status_code == 404
        request = client.get(f"{apart.base}{UI_PATH}/w/1/s/{second}/r/2")
        assert request.status_code == 200
        links = re.findall(r'(?:href|src|data-src)="(/[^"]*)"', request.text)
        assert links and all(link.startswith(f"{UI_PATH}/w/1/") for link in links)
        objects = [link for link in links if "/o/" in link]
        assert objects
        assert client.get(apart.base + objects[0]).status_code == 200
        oid = objects[0].rsplit("/o/", 1)[1]
        content = client.get(f"{apart.base}{UI_PATH}/w/1/api/content/{oid}")
        assert content.status_code in (200, 204)
        # a worker's own list is the front's, of every worker
        home = client.get(f"{apart.base}{UI_PATH}/w/1/", follow_redirects=False)
        assert home.status_code == 303 and home.headers["location"] == f"{UI_PATH}/"
        # an address without its worker (kept from another start) finds it
        found = client.get(f"{apart.base}{UI_PATH}/s/{second}/r/2", follow_redirects=False)
        assert found.status_code == 307
        assert found.headers["location"] == f"{UI_PATH}/w/1/s/{second}/r/2"
        assert client.get(f"{apart.base}{UI_PATH}/s/nobody").status_code == 404
        assert client.get(f"{apart.base}{UI_PATH}/w/7/").status_code == 404
        # the base path is the front's to name, not the browser's
        forged = client.get(
            f"{apart.base}{UI_PATH}/w/1/s/{second}", headers={"x-selfctx-ui-base": "/elsewhere"}
        )
        assert "/elsewhere" not in forged.text


def test_live_updates_pass_through_the_front(apart: Front) -> None:
    first = apart.held(0)
    with opened(apart) as client:
        feed = f"{apart.base}{UI_PATH}/w/0/api/s/{first}/requests"
        before = client.get(feed, params={"after": 0}).json()["requests"]
        apart.steps(0, 1)
        after = client.get(feed, params={"after": len(before)}).json()["requests"]
    assert len(before) >= 3 and [r["n"] for r in after] == [len(before) + 1]


def test_the_front_keeps_the_inspectors_protections(apart: Front) -> None:
    page = f"{apart.base}{UI_PATH}/"
    with httpx.Client(timeout=60) as bare:
        assert bare.get(page).status_code == 401
        assert bare.get(f"{apart.base}{UI_PATH}/w/0/").status_code == 401
        assert bare.get(page, params={"token": "wrong"}).status_code == 401
        entry = bare.get(apart.url)
        assert entry.status_code == 303 and entry.headers["location"] == f"{UI_PATH}/"
        cookie = entry.headers["set-cookie"]
        port = apart.base.rsplit(":", 1)[1]
        assert f"selfctx-ui-{port}=" in cookie and "HttpOnly" in cookie
        assert "samesite=strict" in cookie.lower() and f"Path={UI_PATH}/" in cookie
    with opened(apart) as client:
        site = client.get(page, headers={"sec-fetch-site": "cross-site"})
        assert site.status_code == 403
        origin = client.get(page, headers={"origin": "http://evil.example"})
        assert origin.status_code == 403
        host = client.get(page, headers={"host": "evil.example"})
        assert host.status_code == 403
        assert client.post(page, content=b"x").status_code == 405
        assert client.get(page, headers={"sec-fetch-site": "same-origin"}).status_code == 200
    # a worker answers nobody but the front
    for worker in apart.workers:
        assert httpx.get(f"{worker}{UI_PATH}/", timeout=60).status_code == 401


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_with_one_store_for_all_one_worker_answers_everything(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Both workers on one store (XTDB: two clients of one node, as ``--store auto`` gives):
    the front lists and shows every session through one worker, also the one the other serves,
    and the timeline of that one stays live."""
    if kind == "xtdb":
        from selfctx.adapters.xtdb import open_store

        url = request.getfixturevalue("xtdb_node").url
        stores: list[ObjectStore] = [open_store(url, timeout=30), open_store(url, timeout=30)]
    else:
        shared = MemoryStore()
        stores = [shared, shared]
    looking = build_service(store=stores[0], workspace=str(tmp_path), track=False)
    earlier = set(looking.sessions())  # (a node other tests wrote to holds theirs)
    looking.close()
    try:
        with front_of(stores, tmp_path / "work", True) as front:
            sessions = sorted(
                s
                for s in front.services[0].sessions()
                if s.startswith("anthropic.") and s not in earlier
            )
            assert len(sessions) == 2
            with opened(front) as client:
                page = client.get(f"{front.base}{UI_PATH}/")
                assert "/w/" not in page.text
                for sid in sessions:
                    assert f'href="{UI_PATH}/s/{sid}"' in page.text
                    timeline = client.get(f"{front.base}{UI_PATH}/s/{sid}")
                    assert timeline.status_code == 200 and sid in timeline.text
                # the second agent's conversation is served by worker 1, shown by worker 0
                feed = f"{front.base}{UI_PATH}/api/s/{{}}/requests"
                counts = {
                    sid: len(client.get(feed.format(sid), params={"after": 0}).json()["requests"])
                    for sid in sessions
                }
                assert sorted(counts.values()) == [2, 3]
                front.steps(1, 1)
                grown = {
                    sid: client.get(feed.format(sid), params={"after": n}).json()["requests"]
                    for sid, n in counts.items()
                }
                assert sorted(len(g) for g in grown.values()) == [0, 1]
    finally:
        for store in {id(s): s for s in stores}.values():
            store.close()
