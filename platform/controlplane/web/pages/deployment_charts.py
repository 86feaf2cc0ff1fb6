"""The deployment page's chart data (``samples.json?range=1h``): one point per time bucket,
aggregated over the replicas (serving/series.py); history older than the control plane keeps comes
from Prometheus when CHASSIS_PROMETHEUS_URL is set."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from django.conf import settings
from django.http import JsonResponse

from controlplane.serving.conf import setting
from controlplane.serving.models import Deployment, MetricSample
from controlplane.serving.prometheus_history import PrometheusUnavailable, query_series
from controlplane.serving.series import Scrape, bucket_starts, deployment_series

RANGES = {"15m": 15 * 60, "1h": 3600, "6h": 6 * 3600, "24h": 24 * 3600, "7d": 7 * 86400, "30d": 30 * 86400}
DEFAULT_RANGE = "1h"
POINTS = 240  # about one per 4 px of a chart


def chart_step(seconds: float) -> float:
    """Seconds per bucket: at least two scrape intervals, so every replica lands in every bucket."""
    scrape_interval = float(settings.CELERY_BEAT_SCHEDULE["scrape-metrics"]["schedule"])
    return float(max(round(seconds / POINTS), round(2 * scrape_interval), 1))


def _local_scrapes(deployment: Deployment, start: float, end: float):
    rows = MetricSample.objects.filter(
        replica__deployment=deployment,
        at__gte=datetime.fromtimestamp(start, UTC),
        at__lte=datetime.fromtimestamp(end, UTC),
    ).values_list(
        "replica_id", "at", "generation_tokens_total", "prefix_cache_queries_total", "prefix_cache_hits_total",
        "ttft_buckets", "prompt_tokens_total", "kv_tiers", "accelerators", "accelerator_hour_price", "busy_seconds",
        "spec_decode_drafts_total", "spec_decode_draft_tokens_total", "spec_decode_accepted_tokens_total",
    )  # fmt: skip
    for replica_id, at, tokens, queries, hits, ttft, prompt_tokens, kv_tiers, *rest in rows.iterator():
        yield Scrape(replica_id, at.timestamp(), tokens, queries, hits, ttft, prompt_tokens, kv_tiers, *rest)


def series_response(request, deployment: Deployment) -> JsonResponse:
    chosen = request.GET.get("range", DEFAULT_RANGE)
    if chosen not in RANGES:
        return JsonResponse({"detail": f"range must be one of {', '.join(RANGES)}"}, status=400)
    end = time.time()
    start = end - RANGES[chosen]
    step = chart_step(RANGES[chosen])
    kept_since = end - setting("SAMPLE_RETENTION_H") * 3600
    source, note = "control plane", ""
    series = None
    if start < kept_since and settings.CHASSIS_PROMETHEUS_URL:
        try:
            series = query_series(
                settings.CHASSIS_PROMETHEUS_URL, deployment.name, bucket_starts(start, end, step), step
            )
            source = "prometheus"
        except PrometheusUnavailable as exc:
            note = f"{exc}; showing the control plane's own samples"
    elif start < kept_since:
        note = (
            f"The control plane keeps {setting('SAMPLE_RETENTION_H'):g} h of samples; "
            "set CHASSIS_PROMETHEUS_URL for longer history."
        )
    if series is None:
        # one step before the range: each replica's first increase needs a baseline scrape
        series = deployment_series(_local_scrapes(deployment, start - step, end), start, end, step)
    return JsonResponse({**series, "range": chosen, "step_s": step, "source": source, "note": note})
