"""The browser tests' fixtures: Playwright's Chromium and a signed-in page (skipped, with this
directory, where Playwright is not installed)."""

from tests.support.browser import browser, new_page  # noqa: F401 - the fixtures
