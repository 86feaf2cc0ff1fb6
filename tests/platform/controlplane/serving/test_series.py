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


def costed(replica, at, per_s, accelerators=2, price=3.6, worked=None):
    """A replica scraped at ``at`` whose counters hold ``worked`` seconds (default ``at``) of ``per_s``
    = (output tokens, prompt tokens, prefix-cache hit tokens, prefill busy s, decode busy s, host-tier
    onload s) each second."""
    output, prompt, hits, prefill, decode, onload = (
        value * (at if worked is None else worked) for value in per_s
    )
    return Scrape(replica, at, output, prompt, hits, {}, prompt, {"host": {"onload_seconds": onload}},
                  accelerators, price, {"prefill": prefill, "decode": decode})  # fmt: skip


# tests/dashboards/test_cost_panels.py's replica: 2 accelerators at 3.6 an hour; per second 600 output
# and 1,200 prompt tokens, 300 of them cached; busy 0.3 s prefill, 0.6 s decode, 0.1 s onloading.
DASHBOARD = (600, 1200, 300, 0.3, 0.6, 0.1)
SPEND_PER_S = 2 * 3.6 / 3600  # 0.002
EXPECTED_PER_MILLION = {
    "input_uncached": round(SPEND_PER_S * 0.3 / 900 * 1e6, 6),  # 0.666667: 900 uncached tokens/s
    "input_cached": round(SPEND_PER_S * 0.1 / 300 * 1e6, 6),  # 0.666667
    "output": round(SPEND_PER_S * 0.6 / 600 * 1e6, 6),  # 2.0
}


def test_cost_per_million_tokens_agrees_with_the_dashboards_cost_row():
    series = deployment_series([costed(1, 0, DASHBOARD), costed(1, 10, DASHBOARD)], start=10, end=10, step=10)
    assert series["spend_per_hour"] == [7.2]
    assert series["cost_per_million"] == {kind: [value] for kind, value in EXPECTED_PER_MILLION.items()}
    assert EXPECTED_PER_MILLION == {"input_uncached": 0.666667, "input_cached": 0.666667, "output": 2.0}
    assert series["tokens_per_s_per_accelerator"] == {"input": [600.0], "output": [300.0]}


def test_two_replicas_add_their_spend_and_share_their_accelerators():
    # each holds one accelerator and does half the dashboard replica's work: the same figures
    half = tuple(value / 2 for value in DASHBOARD)
    scrapes = [costed(replica, at, half, accelerators=1) for replica in (1, 2) for at in (0, 10)]
    series = deployment_series(scrapes, start=10, end=10, step=10)
    assert series["spend_per_hour"] == [7.2]
    assert series["cost_per_million"] == {kind: [value] for kind, value in EXPECTED_PER_MILLION.items()}
    assert series["tokens_per_s_per_accelerator"] == {"input": [600.0], "output": [300.0]}


def test_spend_accrues_while_idle_and_idle_time_is_shared_like_busy_time():
    # busy 10 s in the first bucket, idle in the second: the spend goes on, no tokens have a cost
    busy_then_idle = [costed(1, 0, DASHBOARD), costed(1, 10, DASHBOARD)]
    scrapes = [*busy_then_idle, costed(1, 20, DASHBOARD, worked=10)]  # the totals of 10 s: idle
    series = deployment_series(scrapes, start=10, end=20, step=10)
    assert series["spend_per_hour"] == [7.2, 7.2]
    assert series["cost_per_million"]["output"] == [2.0, None]
    assert series["tokens_per_s_per_accelerator"]["output"] == [300.0, 0.0]


def test_a_cost_counter_reset_counts_from_zero():
    scrapes = [
        costed(1, 0, DASHBOARD, worked=1000),
        costed(1, 10, DASHBOARD, worked=1010),
        costed(1, 20, DASHBOARD, worked=5),  # restarted 5 s ago: its counters went down
    ]
    series = deployment_series(scrapes, start=10, end=20, step=10)
    # the second bucket's spend still covers 10 s, its tokens and busy time only the 5 s since the restart
    assert series["spend_per_hour"] == [7.2, 7.2]
    assert series["cost_per_million"]["output"] == [2.0, 4.0]
    assert series["cost_per_million"]["input_uncached"] == [0.666667, 1.333333]
    assert series["tokens_per_s_per_accelerator"] == {"input": [600.0, 300.0], "output": [300.0, 150.0]}


def test_without_a_price_there_is_no_spend_nor_cost_but_tokens_per_accelerator():
    scrapes = [costed(1, 0, DASHBOARD, price=0.0), costed(1, 10, DASHBOARD, price=0.0)]
    series = deployment_series(scrapes, start=10, end=10, step=10)
    assert series["spend_per_hour"] == [None]
    assert series["cost_per_million"] == {"input_uncached": [None], "input_cached": [None], "output": [None]}
    assert series["tokens_per_s_per_accelerator"] == {"input": [600.0], "output": [300.0]}


def test_no_tokens_of_a_kind_or_no_busy_time_has_no_cost():
    no_hits_nor_onload = (600, 1200, 0, 0.3, 0.6, 0.0)
    series = deployment_series(
        [costed(1, 0, no_hits_nor_onload), costed(1, 10, no_hits_nor_onload)], start=10, end=10, step=10
    )
    assert series["cost_per_million"]["input_cached"] == [None]
    assert series["cost_per_million"]["output"] == [round(SPEND_PER_S * (0.6 / 0.9) / 600 * 1e6, 6)]
    never_busy = (600, 1200, 300, 0.0, 0.0, 0.0)
    series = deployment_series(
        [costed(1, 0, never_busy), costed(1, 10, never_busy)], start=10, end=10, step=10
    )
    assert series["spend_per_hour"] == [7.2]
    assert series["cost_per_million"] == {"input_uncached": [None], "input_cached": [None], "output": [None]}


def test_a_sample_without_accelerators_is_no_baseline_for_cost():
    # stored before the cost families were scraped (or from a vLLM replica): its pair adds no cost
    scrapes = [
        scrape(1, 0, 0.0),
        costed(1, 10, DASHBOARD, worked=1010),
        costed(1, 20, DASHBOARD, worked=1020),
    ]
    series = deployment_series(scrapes, start=10, end=20, step=10)
    assert series["tokens_per_s"] == [60600.0, 600.0]  # the whole count lands in the first bucket
    assert series["spend_per_hour"] == [None, 7.2]
    assert series["cost_per_million"]["output"] == [None, 2.0]
    assert series["tokens_per_s_per_accelerator"]["output"] == [None, 300.0]


def speculating(replica, at, drafts, draft_tokens, accepted):
    return Scrape(
        replica, at, 0.0, 0.0, 0.0, {}, spec_decode_drafts_total=drafts,
        spec_decode_draft_tokens_total=draft_tokens, spec_decode_accepted_tokens_total=accepted,
    )  # fmt: skip


def test_speculation_pools_every_replicas_drafts():
    # replica 1: 10 drafts of 4 tokens, 36 accepted; replica 2: 30 drafts of 2 tokens, 12 accepted.
    scrapes = [speculating(1, 0, 0, 0, 0), speculating(1, 10, 10, 40, 36),
               speculating(2, 0, 0, 0, 0), speculating(2, 10, 30, 60, 12)]  # fmt: skip
    series = deployment_series(scrapes, start=10, end=10, step=10)
    assert series["spec_acceptance_rate"] == [48 / 100]  # not the mean of 0.9 and 0.2
    assert series["spec_mean_accepted_length"] == [1 + 48 / 40]


def test_no_draft_verified_is_a_gap_and_a_restart_counts_from_zero():
    scrapes = [speculating(1, 0, 100, 400, 300), speculating(1, 10, 100, 400, 300),
               speculating(1, 20, 5, 20, 10), speculating(1, 30, 15, 50, 30)]  # fmt: skip
    series = deployment_series(scrapes, start=10, end=30, step=10)
    assert series["spec_acceptance_rate"] == [None, 0.5, 0.6667]
    assert series["spec_mean_accepted_length"] == [None, 3.0, 3.0]
    plain = deployment_series([scrape(1, 0, 0.0), scrape(1, 10, 5.0)], start=10, end=10, step=10)
    assert plain["spec_acceptance_rate"] == plain["spec_mean_accepted_length"] == [None]
