"""Scrape every ready replica's /metrics into MetricSample rows (runs on the control-plane queue)."""

from __future__ import annotations

import logging
from datetime import timedelta

import httpx
from django.utils import timezone

from controlplane.serving.choices import ReplicaState
from controlplane.serving.conf import setting
from controlplane.serving.metrics import EngineCounters, parse_engine_metrics, rates_between
from controlplane.serving.models import MetricSample, Replica

log = logging.getLogger(__name__)


def _counters(sample: MetricSample) -> EngineCounters:
    return EngineCounters(
        generation_tokens_total=sample.generation_tokens_total,
        prompt_tokens_total=sample.prompt_tokens_total,
        prefix_cache_queries_total=sample.prefix_cache_queries_total,
        prefix_cache_hits_total=sample.prefix_cache_hits_total,
        ttft_buckets=sample.ttft_buckets,
    )


def scrape_replica(replica: Replica, client: httpx.Client) -> MetricSample | None:
    try:
        response = client.get(f"{replica.url}/metrics")
        response.raise_for_status()
        current = parse_engine_metrics(response.text)
    except (httpx.HTTPError, ValueError) as exc:
        log.warning("scrape of %s failed: %s", replica, exc)
        return None
    now = timezone.now()
    previous = replica.samples.order_by("-at", "-id").first()
    # A relaunched replica starts a new process: its counters are not comparable with the old one's.
    if previous is not None and previous.at < replica.state_changed_at:
        previous = None
    rates = rates_between(
        _counters(previous) if previous else None,
        current,
        (now - previous.at).total_seconds() if previous else None,
    )
    return MetricSample.objects.create(
        replica=replica,
        at=now,
        generation_tokens_total=current.generation_tokens_total,
        prompt_tokens_total=current.prompt_tokens_total,
        prefix_cache_queries_total=current.prefix_cache_queries_total,
        prefix_cache_hits_total=current.prefix_cache_hits_total,
        ttft_buckets=current.ttft_buckets,
        requests_running=current.requests_running,
        kv_cache_usage=current.kv_cache_usage,
        ttft_p50_s=rates.ttft_p50_s,
        tokens_per_s=rates.tokens_per_s,
        prefix_cache_hit_rate=rates.prefix_cache_hit_rate,
    )


def scrape_all() -> int:
    scraped = 0
    with httpx.Client(timeout=setting("SCRAPE_TIMEOUT_S")) as client:
        for replica in Replica.objects.filter(state=ReplicaState.READY).exclude(port=None):
            scraped += scrape_replica(replica, client) is not None
    cutoff = timezone.now() - timedelta(hours=setting("SAMPLE_RETENTION_H"))
    MetricSample.objects.filter(at__lt=cutoff).delete()
    return scraped
