import pytest
from controlplane.serving.metrics import histogram_quantile, parse_engine_metrics, rates_between

from engine.outputs import KVTierStats
from tests.support.exposition import replica_exposition, tiered_exposition

METRICS = """\
# HELP vllm:time_to_first_token_seconds Time to first token.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.01",model_name="m"} 0.0
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 4.0
vllm:time_to_first_token_seconds_bucket{le="1.0",model_name="m"} 8.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 8.0
vllm:time_to_first_token_seconds_count{model_name="m"} 8.0
vllm:time_to_first_token_seconds_sum{model_name="m"} 1.5
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="m"} 400.0
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="m"} 900.0
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{model_name="m"} 100.0
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{model_name="m"} 25.0
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 3.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} 0.5
"""


def test_parse_sums_and_buckets():
    counters = parse_engine_metrics(METRICS)
    assert counters.generation_tokens_total == 400
    assert counters.prefix_cache_hits_total == 25
    assert counters.requests_running == 3
    assert counters.kv_cache_usage == 0.5
    assert counters.ttft_buckets == {"0.01": 0.0, "0.1": 4.0, "1.0": 8.0, "+Inf": 8.0}


def test_histogram_quantile_interpolates_like_prometheus():
    # rank 4 of 8 falls at the top of the (0.01, 0.1] bucket
    assert histogram_quantile(0.5, {"0.01": 0, "0.1": 4, "1.0": 8, "+Inf": 8}) == pytest.approx(0.1)
    # rank 6 of 8: halfway through (0.1, 1.0]
    assert histogram_quantile(0.75, {"0.01": 0, "0.1": 4, "1.0": 8, "+Inf": 8}) == pytest.approx(0.55)
    assert histogram_quantile(0.5, {"0.1": 0, "+Inf": 0}) is None
    assert histogram_quantile(0.5, {"0.1": 0, "+Inf": 2}) == 0.1  # all in +Inf: the last finite bound


def test_rates_use_deltas_between_scrapes():
    first = parse_engine_metrics(METRICS)
    later = parse_engine_metrics(
        METRICS.replace(" 400.0", " 600.0")
        .replace('le="1.0",model_name="m"} 8.0', 'le="1.0",model_name="m"} 18.0')
        .replace('le="+Inf",model_name="m"} 8.0', 'le="+Inf",model_name="m"} 18.0')
        .replace('queries_total{model_name="m"} 100.0', 'queries_total{model_name="m"} 110.0')
        .replace('hits_total{model_name="m"} 25.0', 'hits_total{model_name="m"} 34.0')
    )
    rates = rates_between(first, later, seconds=4.0)
    assert rates.tokens_per_s == pytest.approx(50.0)
    assert rates.prefix_cache_hit_rate == pytest.approx(0.9)
    assert 0.1 < rates.ttft_p50_s <= 1.0  # the 10 new requests all landed in (0.1, 1.0]
    alone = rates_between(None, first, None)
    assert alone.tokens_per_s is None and alone.prefix_cache_hit_rate == pytest.approx(0.25)
    restarted = rates_between(later, first, seconds=4.0)  # counters went down: a new process
    assert restarted.tokens_per_s is None and restarted.prefix_cache_hit_rate == pytest.approx(0.25)


def test_parse_reads_each_kv_tier_from_the_engines_exposition():
    text = tiered_exposition(
        host=KVTierStats(128, 9, 8, 9, 4096, onload_bytes=2048, onload_seconds=0.5),
        disk=KVTierStats(16, 3, 1, 3, 8192),
    )
    assert 'chassis_kv_tier_hit_tokens_total{model_name="m",tier="host"} 128.0' in text
    counters = parse_engine_metrics(text)
    assert counters.prompt_tokens_total == 900
    assert counters.kv_tiers == {
        "host": {"hit_tokens": 128.0, "onload_bytes": 2048.0, "onload_seconds": 0.5, "bytes_held": 4096.0},
        "disk": {"hit_tokens": 16.0, "onload_bytes": 0.0, "onload_seconds": 0.0, "bytes_held": 8192.0},
    }


def test_a_replica_without_kv_tiers_reports_none():
    assert parse_engine_metrics(tiered_exposition()).kv_tiers == {}
    assert parse_engine_metrics(METRICS).kv_tiers == {}


def test_parse_reads_accelerators_price_and_busy_seconds_from_the_engines_exposition():
    text = replica_exposition(
        accelerators=2, accelerator_hour_price=3.6, busy_seconds={"prefill": 18.0, "decode": 36.5},
        kv_tiers={"host": KVTierStats(128, 9, 8, 9, 4096, onload_bytes=2048, onload_seconds=6.0)},
    )  # fmt: skip
    assert 'chassis_engine_busy_seconds_total{model_name="m",work="decode"} 36.5' in text
    counters = parse_engine_metrics(text)
    assert counters.accelerators == 2 and counters.accelerator_hour_price == 3.6
    assert counters.busy_seconds == {"prefill": 18.0, "decode": 36.5}
    assert counters.kv_tiers["host"]["onload_seconds"] == 6.0


def test_a_replica_without_a_price_reports_zero_and_a_vllm_replica_reports_no_cost():
    counters = parse_engine_metrics(replica_exposition())
    assert counters.accelerators == 1 and counters.accelerator_hour_price == 0.0
    assert counters.busy_seconds == {"prefill": 0.0, "decode": 0.0}
    vllm = parse_engine_metrics(METRICS)
    assert vllm.accelerators == 0 and vllm.busy_seconds == {}


def test_speculation_counters_and_their_rates_between_scrapes():
    """The engine's own vllm:spec_decode_* counters: 20 drafts, 60 draft tokens, 36 accepted (20,
    10 and 6 at positions 0-2); then 10 drafts more, 30 tokens, 24 accepted."""
    first = parse_engine_metrics(replica_exposition(speculation=(20, 60, [20, 10, 6])))
    assert (first.spec_decode_drafts_total, first.spec_decode_draft_tokens_total) == (20, 60)
    assert first.spec_decode_accepted_tokens_total == 36
    later = parse_engine_metrics(replica_exposition(speculation=(30, 90, [30, 18, 12])))
    rates = rates_between(first, later, seconds=5.0)
    assert rates.spec_acceptance_rate == pytest.approx(24 / 30)
    assert rates.spec_mean_accepted_length == pytest.approx(1 + 24 / 10)
    alone = rates_between(None, first, None)  # the whole life of the process
    assert alone.spec_acceptance_rate == pytest.approx(36 / 60) and alone.spec_mean_accepted_length == 2.8


def test_without_speculation_there_is_no_acceptance():
    counters = parse_engine_metrics(replica_exposition())
    assert counters.spec_decode_drafts_total == counters.spec_decode_draft_tokens_total == 0
    rates = rates_between(counters, counters, seconds=5.0)
    assert rates.spec_acceptance_rate is None and rates.spec_mean_accepted_length is None
