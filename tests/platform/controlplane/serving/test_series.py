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


def tiered(replica, at, prompt_tokens, **tiers):
    """A scrape with KV tiers: each tier as (hit_tokens, onload_bytes, onload_seconds, bytes_held)."""
    kv_tiers = {
        tier: dict(zip(("hit_tokens", "onload_bytes", "onload_seconds", "bytes_held"), values, strict=True))
        for tier, values in tiers.items()
    }
    return Scrape(replica, at, 0.0, 0.0, 0.0, {}, prompt_tokens, kv_tiers)


def test_tier_hit_rate_is_the_share_of_all_replicas_prompt_tokens():
    # 100 prompt tokens in the bucket, 60 of them onloaded from the host tier (50 + 10), 5 from disk
    scrapes = [
        tiered(1, 0, 0.0, host=(0, 0, 0, 0), disk=(0, 0, 0, 0)),
        tiered(1, 10, 50.0, host=(50, 4e9, 2.0, 1e9), disk=(5, 1e9, 1.0, 3e9)),
        tiered(2, 0, 0.0, host=(0, 0, 0, 0)),
        tiered(2, 10, 50.0, host=(10, 2e9, 2.0, 2e9)),
    ]
    series = deployment_series(scrapes, start=10, end=10, step=10)
    assert series["kv_tier_hit_rate"] == {"disk": [0.05], "host": [0.6]}
    assert series["kv_tier_onload_gb_per_s"] == {"disk": [1.0], "host": [1.5]}  # 6 GB in 4 s
    assert series["kv_tier_bytes_held"] == {"disk": [3e9], "host": [3e9]}


def test_a_tier_counter_reset_counts_from_zero_and_no_onload_has_no_bandwidth():
    scrapes = [
        tiered(1, 0, 1000.0, host=(500, 8e9, 4.0, 1e9)),
        tiered(1, 10, 1100.0, host=(550, 8e9, 4.0, 1e9)),  # hits without onload time: no bandwidth
        tiered(1, 20, 40.0, host=(10, 1e9, 0.5, 2e5)),  # restarted: counters from zero
    ]
    series = deployment_series(scrapes, start=0, end=20, step=10)
    assert series["kv_tier_hit_rate"] == {"host": [None, 0.5, 0.25]}
    assert series["kv_tier_onload_gb_per_s"] == {"host": [None, None, 2.0]}
    assert series["kv_tier_bytes_held"] == {"host": [None, 1e9, 2e5]}


def test_the_latest_scrape_of_a_replica_in_a_bucket_holds_its_bytes():
    scrapes = [tiered(1, at, 10.0 * at, host=(at, 0, 0, 100.0 * at)) for at in (0, 5, 10, 15)]
    assert deployment_series(scrapes, start=0, end=10, step=10)["kv_tier_bytes_held"] == {
        "host": [500.0, 1500.0]
    }


def test_a_tier_without_a_baseline_scrape_waits_for_its_next_one():
    # a sample stored before tiers were scraped, then two with tiers: only the second increase counts
    scrapes = [
        scrape(1, 0, 0.0),
        tiered(1, 10, 100.0, host=(5000, 0, 0, 0)),
        tiered(1, 20, 200.0, host=(5050, 0, 0, 0)),
    ]
    series = deployment_series(scrapes, start=10, end=20, step=10)
    assert series["kv_tier_hit_rate"] == {"host": [None, 0.5]}


def test_without_tiers_the_tier_series_are_empty():
    series = deployment_series([scrape(1, 0, 0.0), scrape(1, 10, 100.0)], start=10, end=10, step=10)
    assert series["tokens_per_s"] == [10.0]
    assert (
        series["kv_tier_hit_rate"] == series["kv_tier_onload_gb_per_s"] == series["kv_tier_bytes_held"] == {}
    )
