"""A replica's /metrics, scraped into a MetricSample: its KV tiers stored per tier and served by the
REST API (an httpx transport stands in for the replica, serving the engine's own exposition)."""

import httpx
import pytest

from engine.outputs import KVTierStats
from tests.support.exposition import replica_exposition, tiered_exposition

pytestmark = pytest.mark.django_db


@pytest.fixture
def replica(make_deployment):
    from controlplane.serving.models import Replica

    replica = Replica.create_for(make_deployment("chat", replicas=1), "t", "t")
    replica.host, replica.port = "127.0.0.1", 8000
    replica.save()
    return replica


def serving(text: str) -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(lambda request: httpx.Response(200, text=text)))


def test_a_scrape_stores_each_kv_tier_and_the_api_serves_them(replica, api):
    from controlplane.serving.scraping import scrape_replica

    host = KVTierStats(128, 9, 8, 9, 4096, onload_bytes=2048, onload_seconds=0.5)
    with serving(tiered_exposition(host=host)) as client:
        sample = scrape_replica(replica, client)
    sample.refresh_from_db()
    expected = {
        "host": {"hit_tokens": 128.0, "onload_bytes": 2048.0, "onload_seconds": 0.5, "bytes_held": 4096.0}
    }
    assert sample.kv_tiers == expected and sample.prompt_tokens_total == 900
    served = api("viewer").get(f"/api/v1/metric-samples/?replica={replica.pk}").json()["results"]
    assert [row["kv_tiers"] for row in served] == [expected]


def test_a_replica_without_tiers_stores_none(replica):
    from controlplane.serving.scraping import scrape_replica

    with serving(tiered_exposition()) as client:
        assert scrape_replica(replica, client).kv_tiers == {}


def test_a_scrape_stores_the_cost_families_and_the_api_serves_them(replica, api):
    from controlplane.serving.scraping import scrape_replica

    text = replica_exposition(
        accelerators=2, accelerator_hour_price=3.6, busy_seconds={"prefill": 1.5, "decode": 4.0}
    )
    with serving(text) as client:
        sample = scrape_replica(replica, client)
    sample.refresh_from_db()
    assert (sample.accelerators, sample.accelerator_hour_price) == (2, 3.6)
    assert sample.busy_seconds == {"prefill": 1.5, "decode": 4.0}
    served = api("viewer").get(f"/api/v1/metric-samples/?replica={replica.pk}").json()["results"]
    assert [(row["accelerators"], row["accelerator_hour_price"], row["busy_seconds"]) for row in served] == [
        (2.0, 3.6, {"prefill": 1.5, "decode": 4.0})
    ]


def test_two_scrapes_of_a_speculating_replica_store_its_acceptance_and_the_api_serves_it(replica, api):
    from controlplane.serving.scraping import scrape_replica

    with serving(replica_exposition(speculation=(20, 60, [20, 10, 6]))) as client:
        first = scrape_replica(replica, client)
    with serving(replica_exposition(speculation=(30, 90, [30, 18, 12]))) as client:
        second = scrape_replica(replica, client)
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.spec_decode_drafts_total, first.spec_decode_draft_tokens_total) == (20, 60)
    assert first.spec_acceptance_rate == pytest.approx(36 / 60)  # the process so far
    assert second.spec_acceptance_rate == pytest.approx(24 / 30)  # since the first scrape
    assert second.spec_mean_accepted_length == pytest.approx(1 + 24 / 10)
    served = api("viewer").get(f"/api/v1/metric-samples/?replica={replica.pk}").json()["results"]
    assert sorted(row["spec_acceptance_rate"] for row in served) == pytest.approx([0.6, 0.8])
    assert {row["spec_decode_accepted_tokens_total"] for row in served} == {36.0, 60.0}
