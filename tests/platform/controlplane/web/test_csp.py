"""Every page carries the Content-Security-Policy, and the UI still works under it: chromium loads
each page (charts and Swagger UI included) without logging a single violation."""

import pytest
from django.contrib.auth import get_user_model

from tests.support.browser import PASSWORD, chromium, make_user

POLICY = {"default-src": "'self'", "script-src": "'self'", "style-src": "'self'", "object-src": "'none'"}


def policy(response) -> dict:
    directives = (part.strip().split(" ", 1) for part in response["Content-Security-Policy"].split(";"))
    return {name: value for name, value in directives}


@pytest.mark.django_db
def test_every_kind_of_response_carries_the_policy(client, make_deployment):
    deployment = make_deployment()
    assert POLICY.items() <= policy(client.get("/login/")).items()
    assert POLICY.items() <= policy(client.get("/django-admin/login/")).items()
    client.force_login(get_user_model().objects.create_superuser("csp-admin", "a@example.com", "pw-123456"))
    for url in ("/", f"/deployments/{deployment.pk}/", "/api/docs/", "/api/v1/nodes/", "/no-such-page/"):
        assert POLICY.items() <= policy(client.get(url)).items(), url


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_chromium_logs_no_violation_on_any_page(monkeypatch, live_server, make_deployment):
    from controlplane.benchmarks.models import BenchmarkRun

    make_user("csp-operator", "operator")
    deployment = make_deployment()
    run = BenchmarkRun.objects.create(deployment=deployment)
    run.start(["u"])
    run.succeed({"requests_ok": 2, "ttft_p50_ms": 10.0}, [[0.0, 10.0, 1.0, True], [0.2, 11.0, 1.1, True]])
    complaints = []
    with chromium(monkeypatch) as browser:
        page = browser.new_page()
        page.set_default_timeout(15_000)
        page.on(
            "console",
            lambda message: "Content Security Policy" in message.text and complaints.append(message.text),
        )
        page.on("pageerror", lambda error: complaints.append(f"script error: {error}"))
        page.goto(f"{live_server.url}/login/")
        page.fill("#id_username", "csp-operator")
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(f"{live_server.url}/")
        for path in ("/checkpoints/", "/deployments/", "/benchmarks/"):
            page.goto(f"{live_server.url}{path}")
        page.goto(f"{live_server.url}/deployments/{deployment.pk}/")
        page.wait_for_selector("#chart-ttft[data-points] canvas")  # uPlot drew: its scripts ran
        page.wait_for_function("window.htmx !== undefined")
        page.goto(f"{live_server.url}/benchmarks/{run.pk}/")
        page.wait_for_selector("#chart-timeline[data-points='2'] canvas")
        page.goto(f"{live_server.url}/api/docs/")
        page.wait_for_selector(".opblock")  # Swagger UI rendered the schema
    assert complaints == []
