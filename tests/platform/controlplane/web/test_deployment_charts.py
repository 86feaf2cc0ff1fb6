"""The deployment page's chart data: aggregated over replicas, a time range to pick, and history
past the control plane's retention from Prometheus' query API (a fake one on loopback: no real
Prometheus can run on this machine, `which prometheus` finds none)."""

from datetime import timedelta

import pytest

from tests.support.fake_prometheus import FakePrometheus

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_replicas(make_deployment):
    """Two replicas generating 30 tokens/s each, their scrapes interleaved 5 s apart."""
    from controlplane.serving.models import MetricSample, Replica
    from django.utils import timezone

    deployment = make_deployment("chat", replicas=2)
    first, second = Replica.create_for(deployment, "t", "t"), Replica.create_for(deployment, "t", "t")
    now = timezone.now()
    for seconds_ago in range(300, -1, -10):
        for replica, offset in ((first, 0), (second, 5)):
            at = now - timedelta(seconds=seconds_ago + offset)
            MetricSample.objects.create(replica=replica, at=at, generation_tokens_total=30.0 * at.timestamp())
    return deployment


def test_tokens_per_second_is_the_sum_over_replicas(login, two_replicas):
    client = login("viewer")
    body = client.get(f"/deployments/{two_replicas.pk}/samples.json?range=15m").json()
    assert body["range"] == "15m" and body["source"] == "control plane" and body["step_s"] == 10
    values = [v for v in body["tokens_per_s"] if v is not None]
    assert len(values) >= 25 and all(abs(v - 60.0) < 1e-6 for v in values[1:-1]), values
    assert set(body) >= {"t", "ttft_p50_ms", "ttft_p90_ms", "prefix_cache_hit_rate", "note"}
    assert client.get(f"/deployments/{two_replicas.pk}/samples.json?range=1y").status_code == 400


def test_longer_than_retention_reads_prometheus(login, two_replicas, settings):
    def answer(query, start, end, step):
        if "generation_tokens_total" in query:
            return [(start, "61.5"), (start + step, "NaN")]
        return []

    client = login("viewer")
    with FakePrometheus(answer) as prometheus:
        settings.CHASSIS_PROMETHEUS_URL = prometheus.url
        body = client.get(f"/deployments/{two_replicas.pk}/samples.json?range=7d").json()
    assert body["source"] == "prometheus" and body["tokens_per_s"][:2] == [61.5, None]
    assert body["step_s"] == 7 * 86400 / 240
    tokens_query = next(q["query"] for q in prometheus.queries if "generation_tokens_total" in q["query"])
    assert (
        tokens_query.startswith("sum(rate(vllm:generation_tokens_total{")
        and 'deployment="chat"' in tokens_query
    )
    ttft_query = next(q["query"] for q in prometheus.queries if "(0.9," in q["query"])
    assert "histogram_quantile(0.9, sum by (le)" in ttft_query

    with FakePrometheus(lambda *args: None) as refusing:
        settings.CHASSIS_PROMETHEUS_URL = refusing.url
        body = client.get(f"/deployments/{two_replicas.pk}/samples.json?range=7d").json()
    assert body["source"] == "control plane" and "refused the query" in body["note"]


def test_without_prometheus_long_ranges_say_how_much_is_kept(login, two_replicas, settings):
    settings.CHASSIS_PROMETHEUS_URL = ""
    body = login("viewer").get(f"/deployments/{two_replicas.pk}/samples.json?range=30d").json()
    assert body["source"] == "control plane" and "CHASSIS_PROMETHEUS_URL" in body["note"]
