"""Read an engine's Prometheus /metrics (vLLM names) and turn two scrapes into rates."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

TTFT = "vllm:time_to_first_token_seconds"
COUNTERS = {
    "vllm:generation_tokens_total": "generation_tokens_total",
    "vllm:prompt_tokens_total": "prompt_tokens_total",
    "vllm:prefix_cache_queries_total": "prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total": "prefix_cache_hits_total",
    # speculative decoding (replicas with a proposer): drafts verified, their tokens, those accepted
    "vllm:spec_decode_num_drafts_total": "spec_decode_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total": "spec_decode_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total": "spec_decode_accepted_tokens_total",
}
GAUGES = {
    "vllm:num_requests_running": "requests_running",
    "vllm:kv_cache_usage_perc": "kv_cache_usage",
    # cost (chassis replicas only): accelerators held, and the price per accelerator-hour the operator
    # set with the engine option accelerator_hour_price (0: not set)
    "chassis_accelerators": "accelerators",
    "chassis_accelerator_hour_price": "accelerator_hour_price",
}
# Step time spent per kind of work (label ``work``: prefill, decode), each step shared among its rows.
BUSY_SECONDS = "chassis_engine_busy_seconds_total"
# Per KV tier below the device pool (the engine's chassis_kv_tier_* families, label ``tier``): the
# counters the deployment page reads, and the bytes each tier holds (a gauge).
KV_TIER_SAMPLES = {
    "chassis_kv_tier_hit_tokens_total": "hit_tokens",
    "chassis_kv_tier_onload_bytes_total": "onload_bytes",
    "chassis_kv_tier_onload_seconds_total": "onload_seconds",
    "chassis_kv_tier_bytes": "bytes_held",
}


@dataclass
class EngineCounters:
    generation_tokens_total: float = 0.0
    prompt_tokens_total: float = 0.0
    prefix_cache_queries_total: float = 0.0
    prefix_cache_hits_total: float = 0.0
    spec_decode_drafts_total: float = 0.0
    spec_decode_draft_tokens_total: float = 0.0
    spec_decode_accepted_tokens_total: float = 0.0
    requests_running: float = 0.0
    kv_cache_usage: float = 0.0
    accelerators: float = 0.0
    accelerator_hour_price: float = 0.0
    ttft_buckets: dict[str, float] = field(default_factory=dict)  # upper bound ("0.1", "+Inf") -> count
    kv_tiers: dict[str, dict[str, float]] = field(default_factory=dict)  # tier -> KV_TIER_SAMPLES values
    busy_seconds: dict[str, float] = field(default_factory=dict)  # work ("prefill", "decode") -> seconds


def _tier_values() -> dict[str, float]:
    return dict.fromkeys(KV_TIER_SAMPLES.values(), 0.0)


def parse_engine_metrics(text: str) -> EngineCounters:
    """Sum each metric over its label sets (model name, replica, ...)."""
    counters = EngineCounters()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in COUNTERS:
                attr = COUNTERS[sample.name]
                setattr(counters, attr, getattr(counters, attr) + sample.value)
            elif sample.name in GAUGES:
                attr = GAUGES[sample.name]
                setattr(counters, attr, getattr(counters, attr) + sample.value)
            elif sample.name == f"{TTFT}_bucket":
                bound = _bound_key(sample.labels["le"])
                counters.ttft_buckets[bound] = counters.ttft_buckets.get(bound, 0.0) + sample.value
            elif sample.name in KV_TIER_SAMPLES:
                tier = counters.kv_tiers.setdefault(sample.labels["tier"], _tier_values())
                tier[KV_TIER_SAMPLES[sample.name]] += sample.value
            elif sample.name == BUSY_SECONDS:
                work = sample.labels["work"]
                counters.busy_seconds[work] = counters.busy_seconds.get(work, 0.0) + sample.value
    return counters


def _bound_key(le: str) -> str:
    value = float(le)
    return "+Inf" if math.isinf(value) else repr(value)


def histogram_quantile(q: float, buckets: dict[str, float]) -> float | None:
    """Prometheus' histogram_quantile on cumulative buckets: linear inside the bucket holding rank q."""
    ordered = sorted(((float(bound), count) for bound, count in buckets.items()), key=lambda pair: pair[0])
    if not ordered or ordered[-1][1] <= 0:
        return None
    rank = q * ordered[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in ordered:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return lower_bound


@dataclass(frozen=True)
class Rates:
    ttft_p50_s: float | None
    tokens_per_s: float | None
    prefix_cache_hit_rate: float | None
    spec_acceptance_rate: float | None = None  # accepted / verified draft tokens
    spec_mean_accepted_length: float | None = None  # tokens a speculating request emits per step


def speculation_rates(drafts: float, draft_tokens: float, accepted: float) -> tuple[float | None, float | None]:
    """(acceptance rate, mean accepted length) of the drafts verified over an interval, as vLLM and
    the engine dashboard define them: accepted over verified draft tokens, and 1 + accepted per draft
    (the accepted tokens plus the target's own); None where no draft (token) was verified."""
    rate = accepted / draft_tokens if draft_tokens > 0 else None
    length = 1 + accepted / drafts if drafts > 0 else None
    return rate, length


def rates_between(previous: EngineCounters | None, current: EngineCounters, seconds: float | None) -> Rates:
    """What happened between two scrapes. Without a previous scrape (or after the engine restarted
    and its counters went back to zero) the whole life of the process counts, and tokens/s is unknown."""
    restarted = previous is not None and current.generation_tokens_total < previous.generation_tokens_total
    base = EngineCounters() if previous is None or restarted else previous
    delta_buckets = {
        bound: count - base.ttft_buckets.get(bound, 0.0) for bound, count in current.ttft_buckets.items()
    }
    queries = current.prefix_cache_queries_total - base.prefix_cache_queries_total
    hits = current.prefix_cache_hits_total - base.prefix_cache_hits_total
    tokens = current.generation_tokens_total - base.generation_tokens_total
    acceptance, length = speculation_rates(
        current.spec_decode_drafts_total - base.spec_decode_drafts_total,
        current.spec_decode_draft_tokens_total - base.spec_decode_draft_tokens_total,
        current.spec_decode_accepted_tokens_total - base.spec_decode_accepted_tokens_total,
    )
    return Rates(
        ttft_p50_s=histogram_quantile(0.5, delta_buckets),
        tokens_per_s=tokens / seconds if previous is not None and not restarted and seconds else None,
        prefix_cache_hit_rate=hits / queries if queries > 0 else None,
        spec_acceptance_rate=acceptance,
        spec_mean_accepted_length=length,
    )
