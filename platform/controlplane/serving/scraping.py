"""Scrape every ready replica's /metrics into MetricSample rows (runs on the control-plane queue)."""

from __future__ import annotations

import logging
from dataclasses import asdict, fields
from datetime import timedelta

import httpx
from django.utils import timezone

from controlplane.serving.choices import ReplicaState
from controlplane.serving.conf import setting
from controlplane.serving.metrics import EngineCounters, parse_engine_metrics, rates_between
from controlplane.serving.models import MetricSample, Replica

log = logging.getLogger(__name__)


def _counters(sample: MetricSample) -> EngineCounters:
    """What a sample stored: a MetricSample keeps every EngineCounters field under its name."""
    return EngineCounters(**{f.name: getattr(sample, f.name) for f in fields(EngineCounters)})


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
    return MetricSample.objects.create(replica=replica, at=now, **asdict(current), **asdict(rates))


def scrape_all() -> int:
    scraped = 0
    with httpx.Client(timeout=setting("SCRAPE_TIMEOUT_S")) as client:
        for replica in Replica.objects.filter(state=ReplicaState.READY).exclude(port=None):
            scraped += scrape_replica(replica, client) is not None
    cutoff = timezone.now() - timedelta(hours=setting("SAMPLE_RETENTION_H"))
    MetricSample.objects.filter(at__lt=cutoff).delete()
    return scraped
