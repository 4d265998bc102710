"""The inspector in a real browser (Debian's chromium, driven by Playwright; one browser for the
module): a session written through the proxy is opened from the sessions page, a request is
followed, every collapsed output in it is expanded and compared byte for byte with what the tool
returned, a file's diff is opened from a search hit, and the timeline grows while requests
arrive. Nothing the pages load comes from anywhere but the inspector.

The same walk takes a screenshot of each page: into a temporary folder, or into the folder
``$SELFCTX_UI_SCREENSHOTS`` names (``SELFCTX_UI_SCREENSHOTS=docs/img``: the images of
docs/ui.md)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from selfctx.adapters.memory import MemoryStore
from tests.ui.support import ODD_OUTPUT, Workbench, workbench, written_session

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workbench]:
    with workbench(MemoryStore(), tmp_path_factory.mktemp("browser") / "work") as running:
        written_session(running)
        running.another_session(3)
        yield running


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One headless chromium for the module, with a profile of its own."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: `make deps-test` installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=str(CHROMIUM),
            headless=True,
            args=FLAGS,
            viewport={"width": 1360, "height": 900},
        )
        try:
            yield context
        finally:
            context.close()


@pytest.fixture
def page(browser: Any, bench: Workbench) -> Iterator[Any]:
    """A tab that has opened the inspector's address (its token is now a cookie); every URL
    it loads is checked to be the inspector's own."""
    tab = browser.new_page()
    loaded: list[str] = []
    tab.on("request", lambda request: loaded.append(request.url))
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    tab.goto(bench.inspector.url(bench.ui))
    yield tab
    tab.close()
    assert loaded and all(url.startswith(bench.base + "/") for url in loaded), loaded
    assert not errors, errors


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wanted = os.environ.get("SELFCTX_UI_SCREENSHOTS")
    folder = Path(wanted) if wanted else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_a_walk_through_the_inspector(page: Any, bench: Workbench, shots: Path) -> None:
    sid = bench.session_id
    # the sessions page, filtered as one types
    row = page.locator("#sessions tbody tr", has_text=sid)
    assert row.is_visible()
    page.fill("#filter", "no such session")
    assert row.is_hidden()
    page.fill("#filter", "")
    assert row.is_visible()
    page.screenshot(path=str(shots / "ui-sessions.png"))

    # the session's timeline: one bar per request
    row.get_by_role("link", name=sid).click()
    page.wait_for_selector("#timeline svg rect.hit")
    records = bench.service.requests(sid)
    assert page.locator("#timeline svg rect.hit").count() == len(records)
    assert page.locator("#requests tbody tr").count() == len(records)
    page.screenshot(path=str(shots / "ui-timeline.png"), full_page=True)

    # the last request, exactly as sent
    last = records[-1].n
    page.locator(f"#r{last} a").first.click()
    page.wait_for_selector("#identical")
    assert "ok" in (page.get_attribute("#identical", "class") or "")
    collapsed = page.locator(".item.tool.collapsed")
    assert collapsed.count() >= 2
    checked = []
    for k in range(collapsed.count()):
        item = collapsed.nth(k)
        item.locator("details.expand summary").click()
        content = item.locator("pre.content")
        page.wait_for_function(
            "pre => pre.textContent !== 'loading…' && pre.closest('details').dataset.loaded",
            arg=content.element_handle(),
        )
        shown = content.evaluate("pre => pre.textContent")
        # the call it answers, and how many times the agent had made that call before
        command, earlier = item.evaluate(
            """item => {
                let before = item.previousElementSibling;
                while (before && !before.classList.contains('assistant'))
                    before = before.previousElementSibling;
                const call = before.querySelector('.call pre').textContent;
                const all = [...document.querySelectorAll('.item.assistant .call pre')];
                return [call, all.slice(0, all.indexOf(before.querySelector('.call pre')))
                    .filter(pre => pre.textContent === call).length];
            }"""
        )
        expected = bench.produced[json.loads(command)["command"]][earlier]
        assert shown == expected  # byte for byte: CRLF, tabs, markup and all
        checked.append(shown)
        if shown != ODD_OUTPUT:
            item.locator("details.expand summary").click()  # fold it again
    assert ODD_OUTPUT in checked, "the odd output is meant to be collapsed"
    page.locator(
        ".item.tool.collapsed", has_text="collapsed: bash ok"
    ).first.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "ui-request.png"))

    # search, from the session's page; a file hit opens the file, whose versions are diffed
    page.goto(f"{bench.ui}/s/{sid}")
    page.fill("#search-box", "return a")
    page.press("#search-box", "Enter")
    page.wait_for_selector("#hits")
    hits = page.locator("#hits li")
    assert hits.count() >= 2
    page.screenshot(path=str(shots / "ui-search.png"))
    page.locator("#hits li.file a", has_text="file").first.click()
    page.wait_for_selector("#diff-a")
    versions = page.locator("table.versions tbody tr").count()
    assert versions >= 2
    page.select_option("#diff-a", str(versions - 1))
    page.select_option("#diff-b", str(versions))
    page.get_by_role("button", name="diff").click()
    page.wait_for_selector("#diff")
    assert page.locator("#diff .del", has_text="return a - b").count() == 1
    assert page.locator("#diff .add", has_text="return a + b").count() == 1
    page.wait_for_selector("#met-list li")  # the sessions that met it, loaded after the page
    assert page.locator("#met-list li", has_text=sid).count() == 1
    page.screenshot(path=str(shots / "ui-object.png"), full_page=True)

    # a tool output's hit leads to the request that showed it, the output marked
    page.go_back()
    page.go_back()
    page.wait_for_selector("#hits")
    page.locator("#hits li.toolcall a", has_text="request").first.click()
    page.wait_for_selector("#identical")
    assert page.evaluate("document.querySelector(':target') !== null")


def test_the_timeline_grows_while_requests_arrive(page: Any, bench: Workbench) -> None:
    sid = bench.session_id
    page.goto(f"{bench.ui}/s/{sid}")
    page.wait_for_selector("#live")
    before = page.locator("#requests tbody tr").count()
    bench.steps(3)  # the agent goes on while the page is open
    page.wait_for_function(  # a function, not a string: the pages' policy forbids eval
        "n => document.querySelectorAll('#requests tbody tr').length === n",
        arg=before + 3,
        timeout=20_000,
    )
    assert page.locator("#timeline svg rect.hit").count() == before + 3
    assert page.locator(f"#r{before + 3} a").get_attribute("href") == (
        f"/_selfctx/ui/s/{sid}/r/{before + 3}"
    )
    assert f"{before + 3} requests" in page.inner_text("#live")


def test_the_inspector_behind_the_front_of_workers(
    browser: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """``selfctx proxy --workers``, each worker with its own store: the front's sessions page
    lists both workers' sessions; a click opens the second worker's session, whose timeline
    grows while its agent works; nothing is loaded from anywhere but the front."""
    from tests.ui.support import front_of

    stores = [MemoryStore(), MemoryStore()]
    with front_of(stores, tmp_path_factory.mktemp("front") / "work", False) as front:
        tab = browser.new_page()
        loaded: list[str] = []
        tab.on("request", lambda request: loaded.append(request.url))
        errors: list[str] = []
        tab.on("pageerror", lambda error: errors.append(str(error)))
        try:
            tab.goto(front.url)
            links = tab.locator("#sessions tbody a")
            assert links.count() == 2
            second = front.held(1)
            tab.click(f"a[href='/_selfctx/ui/w/1/s/{second}']")
            tab.wait_for_selector("#live")
            assert tab.url == f"{front.base}/_selfctx/ui/w/1/s/{second}"
            before = tab.locator("#requests tbody tr").count()
            front.steps(1, 2)
            tab.wait_for_function(
                "n => document.querySelectorAll('#requests tbody tr').length === n",
                arg=before + 2,
                timeout=20_000,
            )
            assert f"{before + 2} requests" in tab.inner_text("#live")
        finally:
            tab.close()
        assert loaded and all(url.startswith(front.base + "/") for url in loaded), loaded
        assert not errors, errors
