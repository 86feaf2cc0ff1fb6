"""Acceptance (issue 17): Playwright drives chromium through the operator pages against a live
server and the real worker, beat and agent on PostgreSQL and Redis: a user made by
`manage.py createsuperuser` logs in; a token made on /tokens/ works until revoked (then 401); a
cordoned node gets no new replica; a replica's page shows its log tail read by the node's agent;
tables search, sort and export CSV; a delete asks first and answers 409 naming what still uses the
object; the deployment charts draw the series summed over replicas and follow the time-range picker."""

import csv
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.platform.controlplane.e2e.stack import REPO
from tests.support.browser import check_layout
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.timeout(420)]
PASSWORD = "cli-made-pw-123"


@pytest.fixture
def page(browser):
    tab = browser.new_page(viewport={"width": 1400, "height": 900}, accept_downloads=True)
    tab.set_default_timeout(20_000)
    return tab


def test_operator_pages(stack, live_server, page, tiny_model_dir):
    from controlplane.api.models import ApiToken
    from controlplane.fleet.models import Node
    from controlplane.serving.models import Deployment, Replica

    url = live_server.url
    stack.start_all()
    try:
        # A user made from the command line logs in.
        subprocess.run(
            [sys.executable, "manage.py", "createsuperuser", "--noinput", "--username", "cli-admin",
             "--email", "cli-admin@example.com"],
            cwd=REPO, env={**stack.env, "DJANGO_SUPERUSER_PASSWORD": PASSWORD}, check=True, capture_output=True,
        )  # fmt: skip
        page.goto(f"{url}/login/")
        page.fill("#id_username", "cli-admin")
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(f"{url}/")

        # A token works from the API until it is revoked.
        page.goto(f"{url}/tokens/")
        page.fill("#id_name", "e2e script")
        page.click("#create-token button[type=submit]")
        key = page.locator("#new-token-key").inner_text().strip()
        bearer = {"Authorization": f"Bearer {key}"}
        assert httpx.get(f"{url}/api/v1/nodes/", headers=bearer).status_code == 200
        token = ApiToken.objects.get(name="e2e script")
        page.goto(f"{url}/tokens/")
        assert page.locator(f"#token-{token.pk}").inner_text().count("never") == 0  # last used shown
        with page.expect_navigation():
            page.click(f"#token-{token.pk} button")
        assert httpx.get(f"{url}/api/v1/nodes/", headers=bearer).status_code == 401

        wait_until(
            lambda: Node.objects.filter(name=stack.node).exists(),
            "the agent to register",
            timeout=60,
            poll=0.5,
        )
        page.goto(f"{url}/checkpoints/")
        page.fill("#id_name", "tiny")
        page.fill("#id_path", str(tiny_model_dir))
        page.click("#register-checkpoint button[type=submit]")
        page.locator("#checkpoint-rows td.state-ready").wait_for(timeout=60_000)

        # A cordoned node gets no new replica; uncordoned, it does.
        page.goto(f"{url}/nodes/")
        page.click(f"#node-row-{stack.node} button")
        page.locator(f"#node-row-{stack.node}[data-state=cordoned]").wait_for()
        page.goto(f"{url}/deployments/")
        page.fill("#create-deployment #id_name", "e2e-pages")
        page.select_option("#id_checkpoint", label="tiny@main")
        page.fill("#id_replicas", "2")
        page.select_option("#id_vendor", "cpu")
        page.click("#create-deployment button[type=submit]")
        page.wait_for_url("**/deployments/*/")
        deployment_url = page.url
        page.locator("#placement.state-unschedulable").wait_for(timeout=30_000)
        assert "cordoned node" in page.locator("#placement").inner_text()
        assert not Replica.objects.filter(deployment__name="e2e-pages", node__isnull=False).exists()
        page.goto(f"{url}/nodes/")
        page.click(f"#node-row-{stack.node} button")
        page.locator(f"#node-row-{stack.node}[data-state=up]").wait_for()
        page.goto(deployment_url)
        wait_until(lambda: page.locator("#replicas tr[data-state=ready]").count() == 2, "two ready replicas",
                   timeout=180, poll=1)  # fmt: skip

        # The replica page shows the log tail its node's agent read.
        replica = Replica.objects.filter(deployment__name="e2e-pages", state="ready").first()
        page.goto(f"{url}/replicas/?q=e2e-pages")
        page.click(f"a[href='/replicas/{replica.pk}/']")
        tail = page.locator("#log-tail[data-source=agent]")
        tail.wait_for(timeout=30_000)
        shown = tail.inner_text().strip()
        assert shown and shown.splitlines()[0] in Path(replica.log_path).read_text(errors="replace")
        assert "serving.replica_log_tail" in (stack.var_dir / "agent.log").read_text(errors="replace")
        check_layout(page, "replica-with-agent-log")

        # Tables: search, sort, CSV of the filtered rows.
        page.goto(f"{url}/events/")
        page.fill("#filter-q", "e2e-pages")
        page.click("form.filters button[type=submit]")
        page.wait_for_url("**/events/?*q=e2e-pages*")
        page.click("table.data th a[href*='sort=to_state']")
        page.wait_for_url("**sort=to_state*")
        with page.expect_download() as download:
            page.click("a.export")
        rows = list(csv.reader(open(download.value.path(), encoding="utf-8")))
        assert [name.lower() for name in rows[0][:4]] == ["at", "replica", "from", "to"] and len(rows) > 4
        assert all(row[1].startswith("e2e-pages-") for row in rows[1:])
        assert [row[3] for row in rows[1:]] == sorted(row[3] for row in rows[1:])

        # Deleting the checkpoint the deployment serves: a confirmation, then 409 naming it.
        checkpoint = Deployment.objects.get(name="e2e-pages").checkpoint
        page.goto(f"{url}/checkpoints/{checkpoint.pk}/")
        page.click("#delete-checkpoint")
        page.locator("#confirm-delete").wait_for()
        with page.expect_response(lambda response: response.request.method == "POST") as answer:
            page.click("#confirm-delete button[type=submit]")
        assert answer.value.status == 409
        assert "deployment e2e-pages" in page.locator("#delete-refused").inner_text()
        check_layout(page, "delete-refused")

        # Charts: tokens/s summed over both replicas, the time-range picker, units on the axes.
        for current in Replica.objects.filter(deployment__name="e2e-pages", state="ready"):
            for _ in range(2):
                httpx.post(f"{current.url}/v1/chat/completions", timeout=60, json={
                    "model": "e2e-pages", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})  # fmt: skip
        page.goto(deployment_url)
        page.wait_for_function(
            "() => Number(document.querySelector('#chart-tps').dataset.max || 0) > 0"
            " && Number(document.querySelector('#chart-ttft').dataset.points || 0) > 0",
            timeout=60_000,
        )
        # the legends name the units; the axes (drawn on the canvas) carry them too: see the screenshot
        assert "sum (tok/s)" in page.locator("#chart-tps").inner_text()
        assert "p50 (ms)" in page.locator("#chart-ttft").inner_text()
        page.select_option("#chart-range", "15m")
        page.wait_for_function("() => document.querySelector('#chart-tps').dataset.range === '15m'")
        assert re.fullmatch(r"control plane: one point per \d+ s", page.locator("#chart-note").inner_text())
        check_layout(page, "deployment-charts")
    except BaseException:
        print(stack.logs())
        raise
