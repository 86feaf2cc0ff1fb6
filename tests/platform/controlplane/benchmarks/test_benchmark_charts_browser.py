"""The uPlot charts of the benchmark pages draw in a real chromium (Playwright) against a live server."""

import shutil

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
CHROMIUM = "/usr/bin/chromium"


@pytest.fixture
def page(monkeypatch, live_server):
    # Playwright's sync API keeps an event loop on this thread; our ORM calls are plain sync code.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    if not shutil.which(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: `apt-get install -y chromium` (make test does it)")
    from controlplane.api.roles import set_role
    from django.contrib.auth import get_user_model
    from playwright.sync_api import sync_playwright

    set_role(get_user_model().objects.create_user("chart-viewer", password="browser-test-pw"), "viewer")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        tab = browser.new_page()
        tab.set_default_timeout(15_000)
        tab.goto(f"{live_server.url}/login/")
        tab.fill("#id_username", "chart-viewer")
        tab.fill("#id_password", "browser-test-pw")
        tab.click("button[type=submit]")
        tab.wait_for_url(f"{live_server.url}/")
        yield tab
        browser.close()


def test_run_and_trend_charts_draw(page, live_server, make_deployment):
    from controlplane.benchmarks.models import BenchmarkRun, BenchmarkSchedule

    deployment = make_deployment()
    schedule = BenchmarkSchedule.objects.create(name="hourly", deployment=deployment)
    for ttft in (10.0, 11.0, 30.0):
        run = BenchmarkRun.objects.create(deployment=deployment, schedule=schedule)
        run.start(["u"])
        run.succeed(
            {"requests_ok": 3, "ttft_p50_ms": ttft, "output_tokens_per_s": 50.0},
            [[0.0, ttft, 1.0, True], [0.2, ttft + 1, 1.1, True], [0.4, ttft + 2, 1.2, True]],
        )
    page.goto(f"{live_server.url}/benchmarks/{run.pk}/")
    page.wait_for_selector("#chart-timeline[data-points='3'] canvas")
    page.wait_for_selector("#chart-distribution[data-points='3'] canvas")
    page.goto(f"{live_server.url}/benchmarks/schedules/{schedule.pk}/")
    page.wait_for_selector("#chart-ttft[data-points='3'] canvas")
    page.wait_for_selector("#chart-tps[data-points='3'] canvas")
    assert page.locator("tr[data-state='succeeded']").count() == 3
