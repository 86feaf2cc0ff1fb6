"""Every list page and the new detail pages at 1400 px wide in a real chromium (Playwright): no
horizontal overflow, and a screenshot of each (under CHASSIS_SCREENSHOT_DIR when set) to look at."""

import json

import pytest

from tests.support.browser import check_layout, chromium, log_in, make_user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def admin_page(monkeypatch, live_server):
    make_user("layout-admin", "admin")
    with chromium(monkeypatch) as browser:
        yield log_in(browser, live_server.url, "layout-admin", timeout_ms=15_000)


def admin_page_user_id() -> int:
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get(username="layout-admin").pk


def seed(make_node, make_deployment):
    """Rows with the long values real ones have: failure reasons, JSON changes, long paths."""
    from controlplane.api import audit
    from controlplane.api.models import ApiToken
    from controlplane.serving.models import Replica
    from django.contrib.auth import get_user_model

    node = make_node("gpu-node-with-a-long-name-01", count=8)
    deployment = make_deployment("chat-with-a-rather-long-deployment-name", replicas=2, vendor="nvidia")
    replica = Replica.create_for(deployment, "created by the reconciler", "reconciler")
    replica.schedule(node, node.accelerators.all()[:1], "reconciler")
    replica.fail(
        "engine exited with code 1: " + "Traceback (most recent call last): " * 12, "agent:" + node.name
    )
    user = get_user_model().objects.get(username="layout-admin")
    ApiToken.issue(user, "a script that polls the deployments every minute")
    audit.record(user, "update", deployment, {"engine_options": {f"option_{i}": "x" * 20 for i in range(12)}})
    return deployment, replica


def test_pages_fit_1400_px(admin_page, live_server, make_node, make_deployment, ready_checkpoint):
    deployment, replica = seed(make_node, make_deployment)
    pages = {
        "nodes": "/nodes/",
        "replicas": "/replicas/",
        "replica": f"/replicas/{replica.pk}/",
        "events": "/events/",
        "tokens": "/tokens/",
        "users": "/users/",
        "user": f"/users/{admin_page_user_id()}/",
        "audit": "/audit/",
        "checkpoints": "/checkpoints/",
        "deployments": "/deployments/",
        "deployment": f"/deployments/{deployment.pk}/",
        "delete-checkpoint": f"/checkpoints/{ready_checkpoint.pk}/delete/",
    }
    overflowing = []
    for name, url in pages.items():
        admin_page.goto(f"{live_server.url}{url}")
        admin_page.wait_for_load_state("networkidle")
        try:
            check_layout(admin_page, name)
        except AssertionError as exc:
            overflowing.append(str(exc))
    assert not overflowing, overflowing


def test_deployment_chart_draws_the_sum_over_interleaved_replicas(admin_page, live_server, make_deployment):
    """Two replicas at 30 tokens/s each, scraped in turn 5 s apart: the chart draws 60 tokens/s per
    bucket (it drew 30, 0, 30, 0 when it plotted scrape by scrape)."""
    from datetime import timedelta

    from controlplane.serving.models import MetricSample, Replica
    from django.utils import timezone

    deployment = make_deployment("chat", replicas=2)
    first, second = Replica.create_for(deployment, "t", "t"), Replica.create_for(deployment, "t", "t")
    now = timezone.now()
    for seconds_ago in range(600, -1, -10):
        for replica, offset in ((first, 0), (second, 5)):
            at = now - timedelta(seconds=seconds_ago + offset)
            MetricSample.objects.create(replica=replica, at=at, generation_tokens_total=30.0 * at.timestamp())
    admin_page.goto(f"{live_server.url}/deployments/{deployment.pk}/")
    admin_page.select_option("#chart-range", "15m")
    admin_page.wait_for_selector("#chart-tps[data-range='15m'] canvas")
    drawn = [v for v in json.loads(admin_page.get_attribute("#chart-tps", "data-values")) if v is not None]
    assert len(drawn) >= 50 and all(abs(v - 60.0) < 1e-6 for v in drawn[1:-1]), drawn


def test_kv_tier_chart_draws_a_line_per_tier(admin_page, live_server, tiered_deployment):
    admin_page.goto(f"{live_server.url}/deployments/{tiered_deployment.pk}/")
    admin_page.select_option("#chart-range", "15m")
    admin_page.wait_for_selector("#chart-kv-tiers[data-range='15m'] canvas")
    assert json.loads(admin_page.get_attribute("#chart-kv-tiers", "data-lines")) == ["disk", "host"]
    drawn = [
        v for v in json.loads(admin_page.get_attribute("#chart-kv-tiers", "data-values")) if v is not None
    ]
    assert len(drawn) >= 25 and all(abs(v - 10.0) < 1e-6 for v in drawn), drawn  # disk: 10 % of prompt tokens
    assert admin_page.is_hidden("#kv-tiers-none")
    latest = admin_page.text_content("#kv-tier-latest")
    assert "host: 1.00 GB held, onload 2.00 GB/s" in latest and "disk: 4.00 GB held, onload —" in latest


def test_kv_tier_chart_says_when_no_replica_has_tiers(admin_page, live_server, make_deployment):
    deployment = make_deployment("untiered", replicas=0)
    admin_page.goto(f"{live_server.url}/deployments/{deployment.pk}/")
    admin_page.select_option("#chart-range", "15m")
    admin_page.wait_for_selector("#chart-tps[data-range='15m'] canvas")
    admin_page.wait_for_selector("#kv-tiers-none", state="visible")
    assert admin_page.query_selector("#chart-kv-tiers canvas") is None
    assert admin_page.get_attribute("#chart-kv-tiers", "data-points") == "0"


def test_cost_chart_draws_three_lines_and_the_latest_spend(admin_page, live_server, make_costed_deployment):
    deployment = make_costed_deployment("priced")
    admin_page.goto(f"{live_server.url}/deployments/{deployment.pk}/")
    admin_page.select_option("#chart-range", "15m")
    admin_page.wait_for_selector("#chart-cost[data-range='15m'] canvas")
    assert json.loads(admin_page.get_attribute("#chart-cost", "data-lines")) == [
        "input, uncached ($/M)", "input, cached ($/M)", "output ($/M)",
    ]  # fmt: skip
    drawn = [v for v in json.loads(admin_page.get_attribute("#chart-cost", "data-values")) if v is not None]
    assert len(drawn) >= 25 and all(abs(v - 0.666667) < 1e-6 for v in drawn[1:-1]), drawn  # uncached input
    assert admin_page.is_hidden("#cost-none")
    latest = admin_page.text_content("#cost-latest")
    assert "Spend 7.20 $/h" in latest and "input 600 tok/s, output 300 tok/s" in latest, latest


def test_cost_chart_says_how_to_set_a_price(admin_page, live_server, make_costed_deployment):
    deployment = make_costed_deployment("unpriced", price=0.0)
    admin_page.goto(f"{live_server.url}/deployments/{deployment.pk}/")
    admin_page.select_option("#chart-range", "15m")
    admin_page.wait_for_selector("#chart-tps[data-range='15m'] canvas")
    admin_page.wait_for_selector("#cost-none", state="visible")
    assert (
        admin_page.text_content("#cost-none") == "No price set: set the engine option accelerator_hour_price"
    )
    assert admin_page.query_selector("#chart-cost canvas") is None
    assert "Spend — (no price set)" in admin_page.text_content("#cost-latest")
    assert "output 300 tok/s" in admin_page.text_content("#cost-latest")


def test_speculation_chart_draws_the_pooled_acceptance_and_the_mean_length(
    admin_page, live_server, speculating_deployment
):
    admin_page.goto(f"{live_server.url}/deployments/{speculating_deployment.pk}/")
    admin_page.select_option("#chart-range", "15m")
    admin_page.wait_for_selector("#chart-spec[data-range='15m'] canvas")
    assert json.loads(admin_page.get_attribute("#chart-spec", "data-lines")) == ["draft acceptance (%)"]
    drawn = [v for v in json.loads(admin_page.get_attribute("#chart-spec", "data-values")) if v is not None]
    assert len(drawn) >= 25 and all(abs(v - 65.0) < 1e-6 for v in drawn), drawn
    assert admin_page.is_hidden("#spec-none")
    latest = admin_page.text_content("#spec-latest")
    assert "Mean accepted length 3.17 tokens per step" in latest and "acceptance 65.0 %" in latest, latest


def test_speculation_chart_says_when_no_replica_verified_drafts(admin_page, live_server, make_costed_deployment):
    deployment = make_costed_deployment("plain")
    admin_page.goto(f"{live_server.url}/deployments/{deployment.pk}/")
    admin_page.select_option("#chart-range", "15m")
    admin_page.wait_for_selector("#chart-cost[data-range='15m'] canvas")
    admin_page.wait_for_selector("#spec-none", state="visible")
    assert admin_page.query_selector("#chart-spec canvas") is None
    assert admin_page.get_attribute("#chart-spec", "data-points") == "0"
    assert "Mean accepted length —" in admin_page.text_content("#spec-latest")
