"""Prometheus text exposition, read into {(name, labels): value} for assertions, and a replica's
exposition (KV tiers, cost) for the control plane's scrapes."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families


def samples(text: str) -> dict[tuple, float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(scraped: dict, name: str, **labels) -> float:
    """The sum of ``name``'s samples whose labels include ``labels`` (0 when there are none)."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in scraped.items() if n == name and wanted <= set(ls))


def tiered_exposition(**kv_tiers) -> str:
    """What a replica of model "m" with these KV tiers (engine.outputs.KVTierStats by tier name)
    serves on /metrics: the engine's own collector, rendered; 900 prompt tokens so far."""
    return replica_exposition(kv_tiers=kv_tiers)


def replica_exposition(
    kv_tiers=None,
    accelerators: int = 1,
    accelerator_hour_price: float = 0.0,
    busy_seconds=None,
    speculation: tuple[int, int, list[int]] | None = None,
) -> str:
    """What a replica of model "m" serves on /metrics, through the engine's own collector: 900 prompt
    tokens (10 of them prefix-cache hits) and 400 generated so far, these KV tiers, the accelerators
    it holds, the price per accelerator-hour set and its busy seconds by work (prefill, decode);
    ``speculation``: (drafts, draft tokens, accepted tokens per draft position) verified so far."""
    from engine.outputs import EngineStats
    from engine.server.metrics import ServerMetrics

    drafts, draft_tokens, per_position = speculation or (0, 0, [])
    stats = EngineStats(
        0, 0, 0.0, 8, 0, 40, 10, 0, 900, 400, kv_tiers=kv_tiers or {}, busy_seconds=busy_seconds or {},
        spec_decode_num_drafts=drafts, spec_decode_num_draft_tokens=draft_tokens,
        spec_decode_num_accepted_tokens=sum(per_position), spec_decode_num_accepted_tokens_per_pos=per_position,
    )  # fmt: skip
    metrics = ServerMetrics(
        "m", lambda: stats, accelerators=accelerators, accelerator_hour_price=accelerator_hour_price
    )
    return generate_latest(metrics.registry).decode()
