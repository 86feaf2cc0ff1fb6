"""Debian's chromium through Playwright, for the UI tests: launch it, make a user with a role, log in,
and check a page for horizontal overflow (screenshots under CHASSIS_SCREENSHOT_DIR when it is set)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]  # fmt: skip
PASSWORD = "browser-test-pw"
WIDTH = 1400
OVERFLOW = "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"


@contextmanager
def chromium(monkeypatch) -> Iterator:
    """A launched Playwright chromium, closed on exit."""
    # Playwright's sync API keeps an event loop on this thread; our ORM calls are plain sync code.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    if not shutil.which(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: `apt-get install -y chromium` (make test does it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


def make_user(username: str, role: str, password: str = PASSWORD):
    from controlplane.api.roles import set_role
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user(username, password=password)
    set_role(user, role)
    return user


def log_in(
    browser, base_url: str, username: str, password: str = PASSWORD, timeout_ms: int = 20_000, **page_args
):
    """A new page of ``browser``, 1400 px wide, logged in as ``username``."""
    page = browser.new_page(viewport={"width": WIDTH, "height": 900}, **page_args)
    page.set_default_timeout(timeout_ms)
    page.goto(f"{base_url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base_url}/")
    return page


def check_layout(page, name: str) -> None:
    """No horizontal overflow at the page's width; a full-page screenshot when CHASSIS_SCREENSHOT_DIR is set."""
    folder = os.environ.get("CHASSIS_SCREENSHOT_DIR")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)
    overflow = page.evaluate(OVERFLOW)
    assert overflow <= 0, f"{name}: {overflow}px of horizontal overflow"
