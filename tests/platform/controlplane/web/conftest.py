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


@pytest.fixture
def make_costed_deployment(make_deployment):
    """A deployment of one replica scraped every 10 s for 5 minutes, doing what
    tests/dashboards/test_cost_panels.py's replica does: 2 accelerators at ``price`` an hour; per
    second 600 output and 1,200 prompt tokens, 300 of them prefix-cache hits; busy 0.3 s prefill,
    0.6 s decode, 0.1 s onloading from the host tier."""
    from controlplane.serving.models import MetricSample, Replica
    from django.utils import timezone

    def make(name: str, price: float = 3.6):
        deployment = make_deployment(name, replicas=1)
        replica = Replica.create_for(deployment, "t", "t")
        now = timezone.now()
        for seconds_ago in range(300, -1, -10):
            elapsed = 300 - seconds_ago
            MetricSample.objects.create(
                replica=replica, at=now - timedelta(seconds=seconds_ago),
                generation_tokens_total=600.0 * elapsed, prompt_tokens_total=1200.0 * elapsed,
                prefix_cache_hits_total=300.0 * elapsed, accelerators=2, accelerator_hour_price=price,
                busy_seconds={"prefill": 0.3 * elapsed, "decode": 0.6 * elapsed},
                kv_tiers={"host": {"hit_tokens": 0.0, "onload_bytes": 0.0, "onload_seconds": 0.1 * elapsed,
                                   "bytes_held": 0.0}},
            )  # fmt: skip
        return deployment

    return make


@pytest.fixture
def speculating_deployment(make_deployment):
    """Two replicas scraped every 10 s for 5 minutes: one verifies 4 drafts of 4 tokens a second and
    accepts 12 of them, the other 2 drafts of 2 tokens and accepts 1 (13 of 20 draft tokens in all,
    6 drafts: a mean accepted length of 1 + 13 / 6)."""
    from controlplane.serving.models import MetricSample, Replica
    from django.utils import timezone

    deployment = make_deployment("speculating", replicas=2)
    now = timezone.now()
    for replica, (drafts, tokens, accepted) in (
        (Replica.create_for(deployment, "t", "t"), (4, 16, 12)),
        (Replica.create_for(deployment, "t", "t"), (2, 4, 1)),
    ):
        for seconds_ago in range(300, -1, -10):
            elapsed = 300 - seconds_ago
            MetricSample.objects.create(
                replica=replica, at=now - timedelta(seconds=seconds_ago), spec_decode_drafts_total=drafts * elapsed,
                spec_decode_draft_tokens_total=tokens * elapsed, spec_decode_accepted_tokens_total=accepted * elapsed,
            )  # fmt: skip
    return deployment
