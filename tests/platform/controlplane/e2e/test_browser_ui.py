"""Acceptance 4: Playwright drives Debian's chromium through the operator UI against a live server
and the real worker, beat and agent."""

import shutil

import httpx
import pytest

from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.timeout(280)]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]  # fmt: skip


@pytest.fixture
def browser(monkeypatch):
    # Playwright's sync API keeps an event loop on this thread; our ORM calls are plain sync code.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    if not shutil.which(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: `apt-get install -y chromium` (make test does it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield launched
        launched.close()


def make_user(username, role):
    from controlplane.api.roles import set_role
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user(username, password="browser-test-pw")
    set_role(user, role)


def log_in(browser, live_server, username):
    page = browser.new_page()
    page.set_default_timeout(20_000)
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", "browser-test-pw")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
    return page


def test_operator_flow_and_viewer_without_buttons(stack, live_server, browser, tiny_model_dir):
    from controlplane.fleet.models import Node
    from controlplane.serving.models import Replica

    make_user("olivia", "operator")
    make_user("victor", "viewer")
    stack.start_all()
    try:
        wait_until(
            lambda: Node.objects.filter(name=stack.node).exists(),
            "the agent to register",
            timeout=60,
            poll=0.5,
        )
        page = log_in(browser, live_server, "olivia")
        assert page.locator(f"#node-{stack.node}").is_visible()

        page.goto(f"{live_server.url}/checkpoints/")
        page.fill("#id_name", "tiny")
        page.fill("#id_path", "relative/path")
        page.click("#register-checkpoint button[type=submit]")
        assert (
            page.locator("#register-checkpoint .error").inner_text()
            == "must be an absolute path on the nodes"
        )
        page.fill("#id_path", str(tiny_model_dir))
        page.click("#register-checkpoint button[type=submit]")
        page.locator("#checkpoint-rows td.state-ready").wait_for(timeout=60_000)  # validated by the worker

        page.goto(f"{live_server.url}/deployments/")
        page.fill("#id_name", "browser-demo")
        page.select_option("#id_checkpoint", label="tiny@main")
        page.fill("#id_replicas", "1")
        page.select_option("#id_vendor", "cpu")
        page.click("#create-deployment button[type=submit]")
        page.wait_for_url("**/deployments/*/")
        page.locator("#replicas tr[data-state=ready]").wait_for(timeout=120_000)

        replica = Replica.objects.get(deployment__name="browser-demo", state="ready")
        for _ in range(3):  # traffic, so the TTFT chart has something to show
            httpx.post(f"{replica.url}/v1/chat/completions", timeout=60, json={
                "model": "browser-demo", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})  # fmt: skip
        page.wait_for_function(
            "() => Number(document.querySelector('#chart-ttft').dataset.points || 0) > 0", timeout=30_000
        )
        assert page.locator("#chart-ttft canvas").count() == 1
        assert "→ ready" in page.locator("#events").inner_text()

        viewer = log_in(browser, live_server, "victor")
        viewer.goto(page.url)
        viewer.locator("#replicas tr[data-state=ready]").wait_for()
        assert viewer.locator("main form[method=post] button").count() == 0  # a filter form is no action
        assert viewer.locator("#scale-form").count() == 0
        viewer.goto(f"{live_server.url}/checkpoints/")
        assert (
            viewer.locator("main form[method=post] button").count() == 0
            and viewer.locator("#register-checkpoint").count() == 0
        )

        page.fill("#id_replicas", "0")
        page.click("#scale-form button[type=submit]")
        page.get_by_text("No replicas.").wait_for(timeout=60_000)
        assert Replica.objects.get(pk=replica.pk).state == "stopped"
    except BaseException:
        print(stack.logs())
        raise
