"""Every KVTier implementation keeps the same promises: bitwise round trips, LRU byte budgets,
per-tenant quotas, time-to-live from last use, and a refusal for what can never fit."""

from __future__ import annotations

import os

import pytest

from engine.kv.block_hash import hash_block
from engine.kv.tiers.disk import DiskTier
from engine.kv.tiers.host import HostMemoryTier
from engine.kv.tiers.protocol import KVTier, Retention

PAYLOAD = 1000
DAY = 86_400.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def block(i: int) -> bytes:
    return hash_block(None, [i])


def payload(i: int, n: int = PAYLOAD) -> bytes:
    return os.urandom(n - 1) + bytes([i % 256])


@pytest.fixture(params=["host", "disk", "shared"])
def make_tier(request, tmp_path):
    """Builds the parametrized tier with a given retention and a fake clock; the file tiers carry
    their header in every entry, so budgets are stated in payload units plus that overhead."""
    clock = FakeClock()

    def make(budget_entries: int = 100, quota_entries: int | None = None, ttl_s: float = 7 * DAY) -> KVTier:
        unit = PAYLOAD + (0 if request.param == "host" else 64)
        retention = Retention(
            budget_bytes=budget_entries * unit,
            ttl_s=ttl_s,
            tenant_quota_bytes=quota_entries * unit if quota_entries else None,
        )
        if request.param == "host":
            return HostMemoryTier(retention, clock=clock)
        return DiskTier(tmp_path / "tier", retention, shared=request.param == "shared", clock=clock)

    make.clock = clock
    return make


def test_round_trip_is_bitwise_and_unknown_hashes_miss(make_tier):
    tier = make_tier()
    assert isinstance(tier, KVTier)
    data = {block(i): payload(i) for i in range(5)}
    for h, p in data.items():
        assert tier.put(h, p, tenant="t")
    for h, p in data.items():
        assert tier.contains(h)
        assert bytes(tier.get(h)) == p
    assert tier.get(block(99)) is None and not tier.contains(block(99))
    stats = tier.stats()
    assert (stats.entries, stats.hits, stats.misses, stats.puts) == (5, 5, 1, 5)
    assert stats.bytes_by_tenant == {"t": stats.bytes_held}


def test_overwrite_replaces_the_payload(make_tier):
    tier = make_tier()
    tier.put(block(1), payload(1))
    newer = payload(2)
    tier.put(block(1), newer)
    assert bytes(tier.get(block(1))) == newer
    assert tier.stats().entries == 1


def test_budget_evicts_least_recently_used(make_tier):
    tier = make_tier(budget_entries=3)
    for i in range(3):
        make_tier.clock.now += 1
        tier.put(block(i), payload(i))
    make_tier.clock.now += 1
    assert tier.get(block(0)) is not None  # now the most recent
    make_tier.clock.now += 1
    tier.put(block(3), payload(3))
    assert [tier.contains(block(i)) for i in range(4)] == [True, False, True, True]
    assert tier.stats().evictions == 1


def test_tenant_quota_evicts_only_that_tenants_blocks(make_tier):
    tier = make_tier(budget_entries=10, quota_entries=2)
    tier.put(block(0), payload(0), tenant="a")
    tier.put(block(1), payload(1), tenant="b")
    make_tier.clock.now += 1
    tier.put(block(2), payload(2), tenant="a")
    make_tier.clock.now += 1
    tier.put(block(3), payload(3), tenant="a")  # a's third: its oldest goes, b's stays
    assert [tier.contains(block(i)) for i in range(4)] == [False, True, True, True]
    by_tenant = tier.stats().bytes_by_tenant
    assert by_tenant["a"] == 2 * by_tenant["b"]


def test_time_to_live_counts_from_last_use(make_tier):
    tier = make_tier(ttl_s=DAY)
    tier.put(block(0), payload(0))
    tier.put(block(1), payload(1))
    make_tier.clock.now += DAY - 10
    assert tier.get(block(0)) is not None  # used: its day starts again
    make_tier.clock.now += 20
    assert tier.get(block(1)) is None
    assert tier.contains(block(0))
    make_tier.clock.now += DAY
    tier.put(block(2), payload(2))
    assert tier.expire() == 1  # block 0; block 2 is fresh
    assert not tier.contains(block(0)) and tier.contains(block(2))
    assert tier.stats().expirations == 2


def test_what_can_never_fit_is_refused(make_tier):
    tier = make_tier(budget_entries=2, quota_entries=1)
    assert not tier.put(block(0), payload(0, n=3 * PAYLOAD))
    assert not tier.contains(block(0))
    assert tier.put(block(1), payload(1))
