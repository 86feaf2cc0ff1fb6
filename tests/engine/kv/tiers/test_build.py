"""EngineConfig's tier settings: which tiers an engine gets, with what retention, and what is refused."""

from __future__ import annotations

import pytest
import torch

from engine.config import WEEK_S, EngineConfig
from engine.kv.tiers.build import MIB, build_tiers


def test_tiers_fastest_first_with_their_retention(tmp_path):
    config = EngineConfig(
        "/m",
        kv_host_cache_mib=8,
        kv_disk_cache_dir=str(tmp_path / "disk"),
        kv_shared_cache_dir=str(tmp_path / "shared"),
        kv_shared_cache_mib=32,
        kv_tenant_quota_mib=2,
    )
    tiers = build_tiers(config, torch.device("cpu"))
    assert [t.name for t in tiers] == ["host", "disk", "shared"]
    host, disk, shared = (t._ledger.retention for t in tiers)
    assert (host.budget_bytes, host.tenant_quota_bytes) == (8 * MIB, 2 * MIB)
    assert disk.ttl_s == shared.ttl_s == WEEK_S and host.ttl_s < WEEK_S
    assert shared.budget_bytes == 32 * MIB and tiers[2].shared and not tiers[1].shared


def test_no_tier_unless_one_is_set():
    assert not EngineConfig("/m").kv_tiers_enabled
    assert build_tiers(EngineConfig("/m"), torch.device("cpu")) == []


@pytest.mark.parametrize(
    "options",
    [
        {"kv_host_cache_mib": -1},
        {"kv_disk_cache_mib": 0},
        {"kv_tenant_quota_mib": 0},
        {"kv_disk_cache_ttl_s": 0},
        {"kv_host_cache_ttl_s": "long"},
        {"kv_host_cache_mib": 8, "tensor_parallel_size": 2},
    ],
)
def test_bad_tier_settings_are_refused(options):
    with pytest.raises(ValueError, match="kv_|KV tiers"):
        EngineConfig("/m", **options)
