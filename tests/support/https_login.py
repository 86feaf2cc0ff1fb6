"""Log in to the control plane's web UI with chromium over HTTPS and print what the browser saw, as
JSON. Run as a program so it can run inside another network namespace (ip netns exec ... python -m
tests.support.https_login URL USER PASSWORD)."""

from __future__ import annotations

import json
import sys
import time

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


def main(base_url: str, username: str, password: str) -> dict:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # The playbook's certificate is self-signed: the caller checks it against the file separately.
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(ignore_https_errors=True)
            trace_requests(page)
            # Deadlines, not expectations: a loaded CI machine serves the page in well under a second
            # when idle, but the control plane's units may still be starting beside it.
            page.set_default_timeout(90_000)
            page.set_default_navigation_timeout(90_000)
            page.goto(f"{base_url}/login/")
            page.fill("#id_username", username)
            page.fill("#id_password", password)
            page.click("button[type=submit]")
            page.wait_for_url(f"{base_url}/")
            cookies = {c["name"]: c["secure"] for c in page.context.cookies()}
            return {"url": page.url, "title": page.title(), "secure_cookies": cookies,
                    "body": page.inner_text("body")[:2000]}  # fmt: skip
        finally:
            browser.close()


def trace_requests(page) -> None:
    """Every request's start, answer, end or failure on stderr, so a deadline that passes says which
    request the browser was still waiting for."""
    started = time.monotonic()

    def log(event: str, detail: str) -> None:
        print(f"{time.monotonic() - started:8.3f}s {event} {detail}", file=sys.stderr, flush=True)

    page.on("request", lambda request: log("request", f"{request.method} {request.url}"))
    page.on("response", lambda response: log("response", f"{response.status} {response.url}"))
    page.on("requestfinished", lambda request: log("finished", request.url))
    page.on("requestfailed", lambda request: log("failed", f"{request.url} {request.failure}"))


def answered(trace: str, url: str) -> bool:
    """Whether a trace of ``trace_requests`` shows an answer of 200 to ``url``."""
    return f"response 200 {url}" in trace


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:4])))
