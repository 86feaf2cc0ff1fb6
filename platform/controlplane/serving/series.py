"""A deployment's chart series from its replicas' scrapes, one point per time bucket.

Each scrape holds cumulative counters. What a replica did between two of its scrapes (generated
tokens, prefix-cache hits and queries, the TTFT histogram's new counts) is attributed to the bucket
of the later scrape; each bucket then adds up every replica's share. So tokens/s is the sum over
replicas (not one replica at a time, which drew a saw-tooth when scrapes of different replicas
interleaved), and TTFT percentiles come from the merged histogram of all replicas' requests, as
Prometheus' ``histogram_quantile(q, sum by (le) (rate(...)))`` computes them: the quantile over
every request, never an average of per-replica quantiles. Pure functions: tested without a database.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from controlplane.serving.metrics import histogram_quantile

TTFT_QUANTILES = {"ttft_p50_ms": 0.5, "ttft_p90_ms": 0.9}


@dataclass(frozen=True)
class Scrape:
    replica_id: int
    at: float  # unix seconds
    generation_tokens_total: float
    prefix_cache_queries_total: float
    prefix_cache_hits_total: float
    ttft_buckets: dict[str, float]


@dataclass
class _Bucket:
    reported: bool = False
    tokens: float = 0.0
    hits: float = 0.0
    queries: float = 0.0
    ttft: dict[str, float] = field(default_factory=dict)


def _increase(now: float, before: float) -> float:
    """A counter's increase; a counter that went down restarted from zero (as Prometheus' rate())."""
    return now if now < before else now - before


def bucket_starts(start: float, end: float, step: float) -> list[float]:
    first = math.floor(start / step) * step
    return [first + index * step for index in range(int((end - first) // step) + 1)]


def deployment_series(scrapes: Iterable[Scrape], start: float, end: float, step: float) -> dict:
    """{"t": bucket starts, "tokens_per_s", "ttft_p50_ms", "ttft_p90_ms", "prefix_cache_hit_rate"};
    a bucket no replica reported in is None in every series (a gap, not a zero). Scrapes before
    ``start`` only serve as the baseline of a replica's first increase."""
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
        bucket = buckets[index]
        bucket.reported = True
        bucket.tokens += _increase(scrape.generation_tokens_total, before.generation_tokens_total)
        bucket.hits += _increase(scrape.prefix_cache_hits_total, before.prefix_cache_hits_total)
        bucket.queries += _increase(scrape.prefix_cache_queries_total, before.prefix_cache_queries_total)
        restarted = scrape.generation_tokens_total < before.generation_tokens_total
        for bound, count in scrape.ttft_buckets.items():
            earlier = 0.0 if restarted else before.ttft_buckets.get(bound, 0.0)
            bucket.ttft[bound] = bucket.ttft.get(bound, 0.0) + max(count - earlier, 0.0)
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
    return series
