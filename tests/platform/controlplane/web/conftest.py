"""Fixtures of the deployment page's tests."""

from datetime import timedelta

import pytest


@pytest.fixture
def tiered_deployment(make_deployment):
    """A deployment of one replica scraped every 10 s for 5 minutes: 100 prompt tokens/s, 30 of them
    onloaded from host memory at 2 GB/s, 10 from disk with no onload recorded; host holds 1 GB, disk 4 GB."""
    from controlplane.serving.models import MetricSample, Replica
    from django.utils import timezone

    deployment = make_deployment("tiered", replicas=1)
    replica = Replica.create_for(deployment, "t", "t")
    now = timezone.now()
    for seconds_ago in range(300, -1, -10):
        at = now - timedelta(seconds=seconds_ago)
        elapsed = 300 - seconds_ago
        kv_tiers = {
            "host": {"hit_tokens": 30.0 * elapsed, "onload_bytes": 2e8 * elapsed, "onload_seconds": 0.1 * elapsed,
                     "bytes_held": 1e9},
            "disk": {"hit_tokens": 10.0 * elapsed, "onload_bytes": 0.0, "onload_seconds": 0.0, "bytes_held": 4e9},
        }  # fmt: skip
        MetricSample.objects.create(
            replica=replica, at=at, prompt_tokens_total=100.0 * elapsed, kv_tiers=kv_tiers
        )
    return deployment
