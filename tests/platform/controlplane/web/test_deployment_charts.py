"""The deployment page's chart data: aggregated over replicas, a time range to pick, and history
past the control plane's retention from Prometheus' query API: a real Prometheus (history
backfilled with promtool) for the answers, and a fake one on loopback for what a real one will not
do on demand (refuse a query)."""

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


def test_kv_tier_series_per_tier(login, tiered_deployment):
    body = login("viewer").get(f"/deployments/{tiered_deployment.pk}/samples.json?range=15m").json()
    assert set(body["kv_tier_hit_rate"]) == {"host", "disk"}
    host = [v for v in body["kv_tier_hit_rate"]["host"] if v is not None]
    disk = [v for v in body["kv_tier_hit_rate"]["disk"] if v is not None]
    assert len(host) >= 25 and set(host) == {0.3} and set(disk) == {0.1}
    assert {v for v in body["kv_tier_onload_gb_per_s"]["host"] if v is not None} == {2.0}
    assert set(body["kv_tier_onload_gb_per_s"]["disk"]) == {None}  # nothing onloaded: no bandwidth
    assert {v for v in body["kv_tier_bytes_held"]["disk"] if v is not None} == {4e9}


def test_the_page_has_a_kv_tier_chart_and_says_when_no_replica_has_tiers(login, two_replicas):
    client = login("viewer")
    page = client.get(f"/deployments/{two_replicas.pk}/").content.decode()
    assert "Prompt tokens served per KV tier" in page and 'id="chart-kv-tiers" data-chart="tiers"' in page
    assert "No replica reports KV tiers" in page  # shown by charts.js when the tier series are empty
    body = client.get(f"/deployments/{two_replicas.pk}/samples.json?range=15m").json()
    assert body["kv_tier_hit_rate"] == body["kv_tier_onload_gb_per_s"] == body["kv_tier_bytes_held"] == {}


def test_the_page_has_a_speculation_chart_and_says_when_no_replica_verified_drafts(login, two_replicas):
    client = login("viewer")
    page = client.get(f"/deployments/{two_replicas.pk}/").content.decode()
    assert 'id="chart-spec" data-chart="spec"' in page
    assert "No replica verified draft tokens" in page  # shown by charts.js when the series are empty
    body = client.get(f"/deployments/{two_replicas.pk}/samples.json?range=15m").json()
    assert set(body["spec_acceptance_rate"]) == set(body["spec_mean_accepted_length"]) == {None}


def test_speculation_series_pool_the_replicas_drafts(login, speculating_deployment):
    body = login("viewer").get(f"/deployments/{speculating_deployment.pk}/samples.json?range=15m").json()
    rates = [v for v in body["spec_acceptance_rate"] if v is not None]
    lengths = [v for v in body["spec_mean_accepted_length"] if v is not None]
    assert len(rates) >= 25 and set(rates) == {0.65}  # 13 of 20 draft tokens, not the mean of 0.75 and 0.25
    assert set(lengths) == {round(1 + 13 / 6, 4)}


def test_prometheus_without_a_price_has_no_spend_nor_cost(login, two_replicas, settings):
    def answer(query, start, end, step):
        if "chassis_accelerator_hour_price" in query:  # spend and cost per million: no price set
            return [(start, "0"), (start + step, "0")]
        if "chassis_accelerators" in query:  # tokens/s per accelerator
            return [(start, "15"), (start + step, "15")]
        return []

    with FakePrometheus(answer) as prometheus:
        settings.CHASSIS_PROMETHEUS_URL = prometheus.url
        body = login("viewer").get(f"/deployments/{two_replicas.pk}/samples.json?range=7d").json()
    assert body["source"] == "prometheus"
    assert body["spend_per_hour"][:2] == [None, None]
    assert {kind: values[:2] for kind, values in body["cost_per_million"].items()} == {
        "input_uncached": [None, None], "input_cached": [None, None], "output": [None, None],
    }  # fmt: skip
    assert body["tokens_per_s_per_accelerator"]["output"][:2] == [15.0, 15.0]
    spend_query = next(
        q["query"]
        for q in prometheus.queries
        if q["query"].startswith("sum by (model_name) (chassis_accelerators")
    )
    assert 'deployment="chat"' in spend_query and "$" not in spend_query


def _inside(values):
    """A series' values but its first and last (buckets the 5 minutes of samples only partly fill)."""
    return [v for v in values if v is not None][1:-1]


def test_cost_series_agree_with_the_dashboards_cost_row(login, make_costed_deployment):
    deployment = make_costed_deployment("priced")
    body = login("viewer").get(f"/deployments/{deployment.pk}/samples.json?range=15m").json()
    assert body["step_s"] == 10
    spend = _inside(body["spend_per_hour"])
    assert len(spend) >= 25 and all(v == pytest.approx(7.2) for v in spend), spend
    expected = {"input_uncached": 0.666667, "input_cached": 0.666667, "output": 2.0}  # test_cost_panels.py's
    for kind, value in expected.items():
        assert all(v == pytest.approx(value, abs=1e-6) for v in _inside(body["cost_per_million"][kind])), kind
    per_accelerator = body["tokens_per_s_per_accelerator"]
    assert all(v == pytest.approx(300.0) for v in _inside(per_accelerator["output"]))
    assert all(v == pytest.approx(600.0) for v in _inside(per_accelerator["input"]))


def test_without_a_price_the_page_says_how_to_set_one(login, make_costed_deployment):
    deployment = make_costed_deployment("unpriced", price=0.0)
    client = login("viewer")
    page = client.get(f"/deployments/{deployment.pk}/").content.decode()
    assert "Cost per million tokens" in page and 'id="chart-cost" data-chart="cost"' in page
    assert "No price set: set the engine option accelerator_hour_price" in page  # shown by charts.js
    body = client.get(f"/deployments/{deployment.pk}/samples.json?range=15m").json()
    assert set(body["spend_per_hour"]) == {None}
    assert all(set(values) == {None} for values in body["cost_per_million"].values())
    assert all(v == pytest.approx(300.0) for v in _inside(body["tokens_per_s_per_accelerator"]["output"]))


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
    spec_queries = [q["query"] for q in prometheus.queries if "spec_decode" in q["query"]]
    assert len(spec_queries) == 2 and all('deployment="chat"' in q for q in spec_queries)
    assert body["spec_acceptance_rate"][0] is None  # the fake has no drafts: a gap

    with FakePrometheus(lambda *args: None) as refusing:
        settings.CHASSIS_PROMETHEUS_URL = refusing.url
        body = client.get(f"/deployments/{two_replicas.pk}/samples.json?range=7d").json()
    assert body["source"] == "control plane" and "refused the query" in body["note"]


def test_without_prometheus_long_ranges_say_how_much_is_kept(login, two_replicas, settings):
    settings.CHASSIS_PROMETHEUS_URL = ""
    body = login("viewer").get(f"/deployments/{two_replicas.pk}/samples.json?range=30d").json()
    assert body["source"] == "control plane" and "CHASSIS_PROMETHEUS_URL" in body["note"]


def openmetrics_history(start: int, end: int) -> str:
    """Two replicas of deployment chat over [start, end), one scrape a minute: 30 tokens/s each;
    chat-0 answers every first token within 0.1 s, chat-1 within 1 s but not 0.1 s. Each takes 100
    prompt tokens/s, 40 of them onloaded from its host KV tier at 3 GB/s, which holds 2 GB; 25 of them
    are prefix-cache hits. Each holds 2 accelerators at 3.6 an hour and is busy 0.3 s a second on
    prefill, 0.5 s on decode (0.1 s onloading). Each verifies 10 drafts of 4 tokens a second and
    accepts 30 of the 40 tokens."""
    families = {
        "vllm:generation_tokens": ["# TYPE vllm:generation_tokens counter"],
        "vllm:time_to_first_token_seconds": ["# TYPE vllm:time_to_first_token_seconds histogram"],
        "vllm:prompt_tokens": ["# TYPE vllm:prompt_tokens counter"],
        "chassis_kv_tier_hit_tokens": ["# TYPE chassis_kv_tier_hit_tokens counter"],
        "chassis_kv_tier_onload_bytes": ["# TYPE chassis_kv_tier_onload_bytes counter"],
        "chassis_kv_tier_onload_seconds": ["# TYPE chassis_kv_tier_onload_seconds counter"],
        "chassis_kv_tier_bytes": ["# TYPE chassis_kv_tier_bytes gauge"],
        "vllm:prefix_cache_hits": ["# TYPE vllm:prefix_cache_hits counter"],
        "chassis_engine_busy_seconds": ["# TYPE chassis_engine_busy_seconds counter"],
        "chassis_accelerators": ["# TYPE chassis_accelerators gauge"],
        "chassis_accelerator_hour_price": ["# TYPE chassis_accelerator_hour_price gauge"],
        "vllm:spec_decode_num_drafts": ["# TYPE vllm:spec_decode_num_drafts counter"],
        "vllm:spec_decode_num_draft_tokens": ["# TYPE vllm:spec_decode_num_draft_tokens counter"],
        "vllm:spec_decode_num_accepted_tokens": ["# TYPE vllm:spec_decode_num_accepted_tokens counter"],
    }
    for at in range(start, end, 60):
        requests, elapsed = (at - start) // 60, at - start
        for replica, fast in (("chat-0", True), ("chat-1", False)):
            labels = f'job="chassis-replicas",deployment="chat",replica="{replica}"'
            families["vllm:generation_tokens"].append(
                f"vllm:generation_tokens_total{{{labels}}} {30 * elapsed} {at}"
            )
            ttft = families["vllm:time_to_first_token_seconds"]
            for bound, count in (("0.1", requests if fast else 0), ("1.0", requests), ("+Inf", requests)):
                ttft.append(f'vllm:time_to_first_token_seconds_bucket{{{labels},le="{bound}"}} {count} {at}')
            ttft.append(f"vllm:time_to_first_token_seconds_count{{{labels}}} {requests} {at}")
            ttft.append(f"vllm:time_to_first_token_seconds_sum{{{labels}}} {requests * 0.05} {at}")
            families["vllm:prompt_tokens"].append(
                f"vllm:prompt_tokens_total{{{labels}}} {100 * elapsed} {at}"
            )
            for name, per_s in (("hit_tokens", 40), ("onload_bytes", 3e8), ("onload_seconds", 0.1)):
                families[f"chassis_kv_tier_{name}"].append(
                    f'chassis_kv_tier_{name}_total{{{labels},tier="host"}} {per_s * elapsed} {at}'
                )
            families["chassis_kv_tier_bytes"].append(
                f'chassis_kv_tier_bytes{{{labels},tier="host"}} 2e9 {at}'
            )
            families["vllm:prefix_cache_hits"].append(
                f"vllm:prefix_cache_hits_total{{{labels}}} {25 * elapsed} {at}"
            )
            for work, per_s in (("prefill", 0.3), ("decode", 0.5)):
                families["chassis_engine_busy_seconds"].append(
                    f'chassis_engine_busy_seconds_total{{{labels},work="{work}"}} {per_s * elapsed} {at}'
                )
            families["chassis_accelerators"].append(f"chassis_accelerators{{{labels}}} 2 {at}")
            families["chassis_accelerator_hour_price"].append(
                f"chassis_accelerator_hour_price{{{labels}}} 3.6 {at}"
            )
            for name, per_s in (("drafts", 10), ("draft_tokens", 40), ("accepted_tokens", 30)):
                families[f"vllm:spec_decode_num_{name}"].append(
                    f"vllm:spec_decode_num_{name}_total{{{labels}}} {per_s * elapsed} {at}"
                )
    return "\n".join([*(line for lines in families.values() for line in lines), "# EOF", ""])


def test_a_week_from_a_real_prometheus(prometheus_binary, tmp_path, login, make_deployment, settings):
    """Two days of history backfilled into a real Prometheus' TSDB (promtool), read through its
    query_range API: tokens/s summed over the replicas, TTFT percentiles from the merged histogram."""
    import shutil
    import subprocess
    import time

    from tests.support.prometheus import Prometheus

    now = int(time.time())
    (tmp_path / "history.om").write_text(openmetrics_history(now - 2 * 86400, now - 3 * 3600))
    promtool = shutil.which("promtool") or f"{prometheus_binary}tool"
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(tmp_path / "history.om"),
                    str(tmp_path / "prometheus" / "data")], check=True, capture_output=True)  # fmt: skip
    prometheus = Prometheus(prometheus_binary, tmp_path / "prometheus", targets=[])
    try:
        settings.CHASSIS_PROMETHEUS_URL = prometheus.url
        deployment = make_deployment("chat")
        body = login("viewer").get(f"/deployments/{deployment.pk}/samples.json?range=7d").json()
    finally:
        prometheus.stop()
    assert body["source"] == "prometheus", body["note"]
    inside = [i for i, t in enumerate(body["t"]) if now - 2 * 86400 + 3 * 3600 < t < now - 6 * 3600]
    assert len(inside) > 40
    assert all(abs(body["tokens_per_s"][i] - 60.0) < 0.5 for i in inside)
    assert all(abs(body["ttft_p50_ms"][i] - 100.0) < 1 for i in inside)  # half the requests within 0.1 s
    assert all(abs(body["ttft_p90_ms"][i] - 820.0) < 5 for i in inside)  # 0.1 + 0.9 * (0.4 / 0.5) s
    assert set(body["kv_tier_hit_rate"]) == {"host"}
    assert all(abs(body["kv_tier_hit_rate"]["host"][i] - 0.4) < 1e-3 for i in inside)
    assert all(abs(body["kv_tier_onload_gb_per_s"]["host"][i] - 3.0) < 1e-3 for i in inside)
    assert all(body["kv_tier_bytes_held"]["host"][i] == 4e9 for i in inside)  # 2 GB on each replica
    # cost, as the dashboard's Cost row: 4 accelerators at 3.6 an hour; per second 60 output and 200
    # prompt tokens, 50 of them cached; busy 0.6 s prefill, 1.0 s decode, 0.2 s onloading
    spend_per_s, busy = 4 * 3.6 / 3600, 0.6 + 1.0 + 0.2
    expected = {
        "input_uncached": spend_per_s * 0.6 / busy / 150 * 1e6,
        "input_cached": spend_per_s * 0.2 / busy / 50 * 1e6,
        "output": spend_per_s * 1.0 / busy / 60 * 1e6,
    }
    assert all(body["spend_per_hour"][i] == pytest.approx(14.4) for i in inside)
    for kind, value in expected.items():
        assert all(body["cost_per_million"][kind][i] == pytest.approx(value, rel=1e-3) for i in inside), kind
    assert all(body["tokens_per_s_per_accelerator"]["output"][i] == pytest.approx(15.0) for i in inside)
    assert all(body["tokens_per_s_per_accelerator"]["input"][i] == pytest.approx(50.0) for i in inside)
    assert all(body["spec_acceptance_rate"][i] == pytest.approx(0.75) for i in inside)
    assert all(body["spec_mean_accepted_length"][i] == pytest.approx(4.0) for i in inside)
    before = [
        v
        for t, v in zip(body["t"], body["tokens_per_s"], strict=True)
        if t < now - 2 * 86400 - 2 * body["step_s"]
    ]
    assert before and all(v is None for v in before)  # no history there: gaps, not zeros
