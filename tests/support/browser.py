"""Playwright driving the system Chromium (`/usr/bin/chromium`; Playwright's own browser
download is never needed) against the live server: the browser, a signed-in page, screenshots
into `test-artifacts/screenshots/` (git-ignored)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.factories import TEST_PASSWORD

# Playwright's sync API runs an event loop in this thread; the ORM calls the tests make between
# browser steps are ordinary blocking calls, which Django would otherwise refuse.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect

CHROMIUM = "/usr/bin/chromium"
SHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        yield browser
        browser.close()


@pytest.fixture
def new_page(browser, live_server):
    contexts = []

    def build(email: str = "owner@acme.test"):
        context = browser.new_context(
            base_url=live_server.url, viewport={"width": 1360, "height": 900}, accept_downloads=True
        )
        context.set_default_timeout(10_000)
        contexts.append(context)
        page = context.new_page()
        page.goto("/accounts/login/")
        page.get_by_label("Email").fill(email)
        page.get_by_label("Password").fill(TEST_PASSWORD)
        page.get_by_role("button", name="Log in").click()
        expect(page.get_by_role("heading", name="Dashboard")).to_be_visible()
        return page

    yield build
    for context in contexts:
        context.close()


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
