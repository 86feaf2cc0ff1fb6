"""/metrics carries each KV tier's hits, holdings and block traffic, labelled by tier."""

from __future__ import annotations

from prometheus_client import generate_latest

from engine.outputs import EngineStats, KVTierStats
from engine.server.metrics import ServerMetrics
from tests.support.exposition import samples, value


def engine_stats(**kv_tiers: KVTierStats) -> EngineStats:
    return EngineStats(0, 0, 0.0, 8, 0, 0, 0, 0, 0, 0, kv_tiers=kv_tiers)


def test_per_tier_series():
    stats = engine_stats()
    metrics = ServerMetrics("tiny", lambda: stats)

    def scrape() -> dict:
        return samples(generate_latest(metrics.registry).decode())

    assert not any(name.startswith("chassis_kv_tier") for name, _ in scrape())  # no tiers
    stats = engine_stats(host=KVTierStats(64, 5, 4, 5, 5000), disk=KVTierStats(16, 5, 1, 5, 5200))
    after = scrape()
    assert value(after, "chassis_kv_tier_hit_tokens_total", tier="host") == 64
    assert value(after, "chassis_kv_tier_hit_tokens_total", tier="disk") == 16
    assert value(after, "chassis_kv_tier_offloads_total", tier="disk") == 5
    assert value(after, "chassis_kv_tier_onloads_total", tier="host") == 4
    assert value(after, "chassis_kv_tier_bytes", tier="disk", model_name="tiny") == 5200
    assert value(after, "chassis_kv_tier_blocks", tier="host") == 5
