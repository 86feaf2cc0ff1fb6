"""Chart series aggregated over replicas per time bucket, without a database."""

from controlplane.serving.series import Scrape, deployment_series


def scrape(replica, at, tokens, ttft=None, hits=0.0, queries=0.0):
    return Scrape(replica, at, tokens, queries, hits, ttft or {})


def test_interleaved_replicas_sum_instead_of_saw_tooth():
    # Two replicas at 30 tok/s each, scraped 5 s apart in turn: one scrape per sample row, as stored.
    scrapes = [scrape(1, at, 30.0 * at) for at in range(0, 61, 10)]
    scrapes += [scrape(2, at, 30.0 * at) for at in range(5, 66, 10)]
    series = deployment_series(scrapes, start=20, end=60, step=10)
    assert series["t"] == [20, 30, 40, 50, 60]
    assert series["tokens_per_s"] == [60.0, 60.0, 60.0, 60.0, 60.0]


def test_a_restarted_replica_counts_from_zero_and_an_empty_bucket_is_a_gap():
    scrapes = [scrape(1, 0, 1000.0), scrape(1, 10, 1100.0), scrape(1, 20, 50.0), scrape(1, 50, 350.0)]
    series = deployment_series(scrapes, start=0, end=50, step=10)
    assert series["tokens_per_s"] == [None, 10.0, 5.0, None, None, 30.0]


def test_ttft_quantiles_come_from_every_replicas_requests_merged():
    # replica 1: 9 fast requests (<= 0.1 s); replica 2: 1 slow one (<= 1 s). The median request is
    # fast; an average of the two replicas' medians would say about 0.5 s.
    before = {"0.1": 0.0, "1.0": 0.0, "+Inf": 0.0}
    scrapes = [
        scrape(1, 0, 0.0, before), scrape(1, 10, 9.0, {"0.1": 9.0, "1.0": 9.0, "+Inf": 9.0}),
        scrape(2, 0, 0.0, before), scrape(2, 10, 1.0, {"0.1": 0.0, "1.0": 1.0, "+Inf": 1.0}),
    ]  # fmt: skip
    series = deployment_series(scrapes, start=10, end=10, step=10)
    assert series["ttft_p50_ms"][0] < 100 and series["ttft_p90_ms"][0] <= 100
    assert deployment_series(scrapes, start=10, end=10, step=10)["tokens_per_s"] == [1.0]


def test_hit_rate_pools_hits_and_queries_of_all_replicas():
    scrapes = [scrape(1, 0, 0.0), scrape(1, 10, 0.0, hits=9.0, queries=10.0),
               scrape(2, 0, 0.0), scrape(2, 10, 0.0, hits=1.0, queries=90.0)]  # fmt: skip
    assert deployment_series(scrapes, start=10, end=10, step=10)["prefix_cache_hit_rate"] == [0.1]
