"""Benchmark knobs, read from settings when present (which read the environment), else defaults."""

from __future__ import annotations

from django.conf import settings

DEFAULTS = {
    # A scheduled run is `regressed` when a watched figure (TTFT and ITL p50/p99, output tokens/s,
    # prefix-cache hit rate) is worse than the median of the schedule's last REGRESSION_WINDOW
    # successful runs by more than REGRESSION_K scaled MADs, and by at least REGRESSION_MIN_PCT %.
    "REGRESSION_WINDOW": 5,
    "REGRESSION_MIN_RUNS": 3,  # fewer successful runs before it: no verdict (no spread to judge by)
    "REGRESSION_K": 3.0,
    "REGRESSION_MIN_PCT": 10.0,
    "PROGRESS_EVERY_S": 2.0,  # how often a running benchmark saves completed/total
    # A running benchmark without a progress save for this long lost its worker: it is failed.
    "STALE_AFTER_S": 120.0,
    "MAX_SAMPLES": 500,  # per-request samples kept for the charts
    "REQUEST_TIMEOUT_S": 120.0,
    "SCRAPE_TIMEOUT_S": 5.0,
    "API_KEY": "",  # bearer token for the replicas or the gateway, when they require one
}


def setting(name: str):
    return getattr(settings, "CHASSIS_BENCHMARKS", {}).get(name, DEFAULTS[name])


def gateway_url() -> str:
    """When set, runs send their requests through the gateway instead of straight to the replicas."""
    return (getattr(settings, "CHASSIS_GATEWAY_URL", "") or "").rstrip("/")
