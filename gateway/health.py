"""Active health checks and load scraping for one replica.

``/health``: 200 ready, 503 loading or draining (the body says which), anything else or no answer
counts as a failure for the circuit breaker. ``/metrics``: the replica's queue depth and KV usage,
which the load-based policies read.
"""

from __future__ import annotations

import logging

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gateway.replica import Health, Replica, ReplicaLoad

log = logging.getLogger(__name__)

_LOAD_METRICS = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_usage",
}


def parse_load(text: str) -> ReplicaLoad:
    """Sum each load metric over its label sets (one replica may expose several engines)."""
    load = ReplicaLoad()
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            field = _LOAD_METRICS.get(sample.name)
            if field is not None:
                values[field] = values.get(field, 0.0) + float(sample.value)
    for field, value in values.items():
        setattr(load, field, value)
    return load


async def probe(replica: Replica, client: httpx.AsyncClient) -> tuple[bool, bool]:
    """Check one replica and update its state; returns (ejected_now, readmitted_now)."""
    try:
        response = await client.get(f"{replica.url}/health")
    except httpx.HTTPError as exc:
        log.debug("health check of %s failed: %r", replica.replica_id, exc)
        replica.health = Health.DOWN
        return replica.breaker.record_failure(), False
    if response.status_code == 200:
        replica.health = Health.READY
        replica.draining = False
        readmitted = replica.breaker.record_health(True)
        await _scrape(replica, client)
        return False, readmitted
    if response.status_code == 503:
        replica.health = Health.NOT_READY
        replica.draining = "drain" in response.text.lower()
        return False, False
    replica.health = Health.DOWN
    return replica.breaker.record_failure(), False


async def _scrape(replica: Replica, client: httpx.AsyncClient) -> None:
    try:
        response = await client.get(f"{replica.url}/metrics")
        if response.status_code == 200:
            replica.observe_scrape(parse_load(response.text))
    except (httpx.HTTPError, ValueError) as exc:
        log.debug("metrics scrape of %s failed: %r", replica.replica_id, exc)
