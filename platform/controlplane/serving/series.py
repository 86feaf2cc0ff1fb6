"""A deployment's chart series from its replicas' scrapes, one point per time bucket.

Each scrape holds cumulative counters. What a replica did between two of its scrapes (generated
tokens, prefix-cache hits and queries, the TTFT histogram's new counts) is attributed to the bucket
of the later scrape; each bucket then adds up every replica's share. So tokens/s is the sum over
replicas (not one replica at a time, which drew a saw-tooth when scrapes of different replicas
interleaved), and TTFT percentiles come from the merged histogram of all replicas' requests, as
Prometheus' ``histogram_quantile(q, sum by (le) (rate(...)))`` computes them: the quantile over
every request, never an average of per-replica quantiles. KV tiers below the device pool add, per
tier, the share of prompt tokens onloaded from it, its onload bandwidth and the bytes it holds (the
sum over replicas of each one's latest gauge in the bucket). Cost, as the engine dashboard's Cost row
(dashboards/engine_dashboard.py cost_row) defines it: each replica accrues accelerators × price per
accelerator-hour over the time between two of its scrapes (busy or idle); a bucket's spend is split
by each kind of work's share of the busy time (prefill, decode, onloads from the KV tiers) over that
kind's tokens (uncached input, output, cached input). Only scrape pairs of replicas that report
accelerators count toward cost and tokens/s per accelerator. Speculative decoding, as the engine
dashboard's row: the draft acceptance rate (accepted over verified draft tokens) and the mean accepted
length (1 + accepted per draft), over every replica's drafts in the bucket (None where none was
verified). Pure functions: tested without a database.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from controlplane.serving.metrics import histogram_quantile, speculation_rates

TTFT_QUANTILES = {"ttft_p50_ms": 0.5, "ttft_p90_ms": 0.9}
TIER_COUNTERS = ("hit_tokens", "onload_bytes", "onload_seconds")  # cumulative, in metrics.KV_TIER_SAMPLES
# per tier: the share of prompt tokens onloaded from it, its onload bandwidth, the bytes it holds
TIER_SERIES = ("kv_tier_hit_rate", "kv_tier_onload_gb_per_s", "kv_tier_bytes_held")
# per bucket: the spend per hour, the cost per million tokens of each kind and tokens/s per accelerator
COST_SERIES = ("spend_per_hour", "cost_per_million", "tokens_per_s_per_accelerator")
# per bucket, over the replicas' verified drafts
SPECULATION_SERIES = ("spec_acceptance_rate", "spec_mean_accepted_length")


@dataclass(frozen=True)
class Scrape:
    replica_id: int
    at: float  # unix seconds
    generation_tokens_total: float
    prefix_cache_queries_total: float
    prefix_cache_hits_total: float
    ttft_buckets: dict[str, float]
    prompt_tokens_total: float = 0.0
    kv_tiers: dict[str, dict[str, float]] = field(default_factory=dict)  # as metrics.EngineCounters'
    accelerators: float = 0.0  # 0: the replica does not say (not a chassis replica, or an older sample)
    accelerator_hour_price: float = 0.0  # 0: not set
    busy_seconds: dict[str, float] = field(default_factory=dict)  # cumulative, work -> seconds
    spec_decode_drafts_total: float = 0.0
    spec_decode_draft_tokens_total: float = 0.0
    spec_decode_accepted_tokens_total: float = 0.0


@dataclass
class _Cost:
    """What the replicas that report accelerators did in one bucket."""

    priced: bool = False  # a replica reported a price
    spend: float = 0.0  # currency
    accelerator_seconds: float = 0.0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    onload_s: float = 0.0
    prompt_tokens: float = 0.0
    hit_tokens: float = 0.0  # prefix-cache hits (device pool and tiers)
    generation_tokens: float = 0.0


@dataclass
class _Bucket:
    reported: bool = False
    tokens: float = 0.0
    prompt_tokens: float = 0.0
    hits: float = 0.0
    queries: float = 0.0
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    ttft: dict[str, float] = field(default_factory=dict)
    tier_increases: dict[str, dict[str, float]] = field(default_factory=dict)  # tier -> TIER_COUNTERS
    tier_bytes_held: dict[int, dict[str, float]] = field(default_factory=dict)  # replica -> tier -> bytes
    cost: _Cost = field(default_factory=_Cost)


def _increase(now: float, before: float) -> float:
    """A counter's increase; a counter that went down restarted from zero (as Prometheus' rate())."""
    return now if now < before else now - before


def bucket_starts(start: float, end: float, step: float) -> list[float]:
    first = math.floor(start / step) * step
    return [first + index * step for index in range(int((end - first) // step) + 1)]


def deployment_series(scrapes: Iterable[Scrape], start: float, end: float, step: float) -> dict:
    """{"t": bucket starts, "tokens_per_s", "ttft_p50_ms", "ttft_p90_ms", "prefix_cache_hit_rate"},
    the SPECULATION_SERIES,
    the per-tier TIER_SERIES (empty dicts without tiers) and COST_SERIES ("spend_per_hour" a list,
    "cost_per_million" {"input_uncached", "input_cached", "output"} and "tokens_per_s_per_accelerator"
    {"input", "output"}, lists; None where undefined: no price, no tokens of that kind, no busy time). A bucket no replica reported in is None
    in every series (a gap, not a zero). Scrapes before ``start`` only serve as the baseline of a
    replica's first increase."""
    starts = bucket_starts(start, end, step)
    buckets = [_Bucket() for _ in starts]
    previous: dict[int, Scrape] = {}
    for scrape in sorted(scrapes, key=lambda s: (s.at, s.replica_id)):
        before = previous.get(scrape.replica_id)
        previous[scrape.replica_id] = scrape
        index = int((scrape.at - starts[0]) // step)
        if not 0 <= index < len(buckets):
            continue
        if before is None:
            continue
        _add_increases(buckets[index], scrape, before)
        _add_tier_increases(buckets[index], scrape, before)
        _add_cost(buckets[index].cost, scrape, before)
    series: dict[str, list] = {"t": starts, "tokens_per_s": [], "prefix_cache_hit_rate": []}
    series.update({name: [] for name in TTFT_QUANTILES})
    for bucket in buckets:
        series["tokens_per_s"].append(round(bucket.tokens / step, 3) if bucket.reported else None)
        series["prefix_cache_hit_rate"].append(
            round(bucket.hits / bucket.queries, 4) if bucket.queries else None
        )
        for name, q in TTFT_QUANTILES.items():
            seconds = histogram_quantile(q, bucket.ttft) if bucket.ttft else None
            series[name].append(None if seconds is None else round(seconds * 1000, 3))
    return {**series, **_speculation_series(buckets), **_tier_series(buckets), **_cost_series(buckets, step)}


def _speculation_series(buckets: list[_Bucket]) -> dict[str, list]:
    points = [speculation_rates(b.drafts, b.draft_tokens, b.accepted) for b in buckets]
    return {
        name: [None if point[i] is None else round(point[i], 4) for point in points]
        for i, name in enumerate(SPECULATION_SERIES)
    }


def _add_increases(bucket: _Bucket, scrape: Scrape, before: Scrape) -> None:
    bucket.reported = True
    bucket.tokens += _increase(scrape.generation_tokens_total, before.generation_tokens_total)
    bucket.prompt_tokens += _increase(scrape.prompt_tokens_total, before.prompt_tokens_total)
    bucket.hits += _increase(scrape.prefix_cache_hits_total, before.prefix_cache_hits_total)
    bucket.queries += _increase(scrape.prefix_cache_queries_total, before.prefix_cache_queries_total)
    bucket.drafts += _increase(scrape.spec_decode_drafts_total, before.spec_decode_drafts_total)
    bucket.draft_tokens += _increase(scrape.spec_decode_draft_tokens_total, before.spec_decode_draft_tokens_total)
    bucket.accepted += _increase(scrape.spec_decode_accepted_tokens_total, before.spec_decode_accepted_tokens_total)
    restarted = scrape.generation_tokens_total < before.generation_tokens_total
    for bound, count in scrape.ttft_buckets.items():
        earlier = 0.0 if restarted else before.ttft_buckets.get(bound, 0.0)
        bucket.ttft[bound] = bucket.ttft.get(bound, 0.0) + max(count - earlier, 0.0)


def _add_tier_increases(bucket: _Bucket, scrape: Scrape, before: Scrape) -> None:
    for tier, values in scrape.kv_tiers.items():
        earlier = before.kv_tiers.get(tier)
        if earlier is None:  # no baseline (say, a sample stored before tiers were scraped): the
            continue  # tier's whole cumulative count would land in this one bucket
        increases = bucket.tier_increases.setdefault(tier, dict.fromkeys(TIER_COUNTERS, 0.0))
        for counter in TIER_COUNTERS:
            increases[counter] += _increase(values.get(counter, 0.0), earlier.get(counter, 0.0))
    bucket.tier_bytes_held[scrape.replica_id] = {
        tier: values.get("bytes_held", 0.0) for tier, values in scrape.kv_tiers.items()
    }


def _tier_series(buckets: list[_Bucket]) -> dict[str, dict[str, list]]:
    """Each of TIER_SERIES as {tier: one value per bucket}, None where the tier has no data (or, for
    the bandwidth, no onload)."""
    tiers = sorted(
        {tier for bucket in buckets for tier in bucket.tier_increases}
        | {tier for bucket in buckets for held in bucket.tier_bytes_held.values() for tier in held}
    )
    points = {tier: [_tier_point(bucket, tier) for bucket in buckets] for tier in tiers}
    return {
        name: {tier: [point[position] for point in points[tier]] for tier in tiers}
        for position, name in enumerate(TIER_SERIES)
    }


def _tier_point(bucket: _Bucket, tier: str) -> tuple[float | None, float | None, float | None]:
    """One bucket's values of TIER_SERIES for one tier."""
    increases = bucket.tier_increases.get(tier)
    hit_rate = gb_per_s = None
    if increases and bucket.prompt_tokens:
        hit_rate = round(increases["hit_tokens"] / bucket.prompt_tokens, 4)
    if increases and increases["onload_seconds"] > 0:
        gb_per_s = round(increases["onload_bytes"] / increases["onload_seconds"] / 1e9, 3)
    held = [by_tier[tier] for by_tier in bucket.tier_bytes_held.values() if tier in by_tier]
    return hit_rate, gb_per_s, sum(held) if held else None


def _add_cost(cost: _Cost, scrape: Scrape, before: Scrape) -> None:
    """One replica's spend, busy time and tokens between two scrapes that both report accelerators
    (a pair without, such as a sample stored before these were scraped, has no baseline)."""
    if scrape.accelerators <= 0 or before.accelerators <= 0:
        return
    seconds = scrape.at - before.at
    cost.priced = cost.priced or scrape.accelerator_hour_price > 0
    cost.spend += scrape.accelerators * scrape.accelerator_hour_price * seconds / 3600
    cost.accelerator_seconds += scrape.accelerators * seconds
    busy, earlier = scrape.busy_seconds, before.busy_seconds
    cost.prefill_s += _increase(busy.get("prefill", 0.0), earlier.get("prefill", 0.0))
    cost.decode_s += _increase(busy.get("decode", 0.0), earlier.get("decode", 0.0))
    for tier, values in scrape.kv_tiers.items():
        if tier in before.kv_tiers:
            onload = values.get("onload_seconds", 0.0)
            cost.onload_s += _increase(onload, before.kv_tiers[tier].get("onload_seconds", 0.0))
    cost.prompt_tokens += _increase(scrape.prompt_tokens_total, before.prompt_tokens_total)
    cost.hit_tokens += _increase(scrape.prefix_cache_hits_total, before.prefix_cache_hits_total)
    cost.generation_tokens += _increase(scrape.generation_tokens_total, before.generation_tokens_total)


def _per_million(cost: _Cost, work_s: float, tokens: float) -> float | None:
    """The spend times this work's share of the busy time, per million of its tokens."""
    busy = cost.prefill_s + cost.decode_s + cost.onload_s
    if not cost.priced or busy <= 0 or tokens <= 0:
        return None
    return round(cost.spend * work_s / busy / tokens * 1e6, 6)


def _cost_series(buckets: list[_Bucket], step: float) -> dict:
    """COST_SERIES, one value per bucket."""
    costs = [bucket.cost for bucket in buckets]

    def per_accelerator(tokens: str) -> list[float | None]:
        return [
            round(getattr(c, tokens) / c.accelerator_seconds, 3) if c.accelerator_seconds else None
            for c in costs
        ]

    return {
        "spend_per_hour": [round(c.spend / step * 3600, 6) if c.priced else None for c in costs],
        "cost_per_million": {
            "input_uncached": [_per_million(c, c.prefill_s, c.prompt_tokens - c.hit_tokens) for c in costs],
            "input_cached": [_per_million(c, c.onload_s, c.hit_tokens) for c in costs],
            "output": [_per_million(c, c.decode_s, c.generation_tokens) for c in costs],
        },
        "tokens_per_s_per_accelerator": {
            "input": per_accelerator("prompt_tokens"),
            "output": per_accelerator("generation_tokens"),
        },
    }
