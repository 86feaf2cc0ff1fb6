"""The tiers an EngineConfig asks for, fastest first, and the connector over the runner's caches."""

from __future__ import annotations

import torch

from engine.config import EngineConfig
from engine.kv.specs import KVCacheSpec
from engine.kv.tiers.block_io import BlockIO
from engine.kv.tiers.connector import TieredKV
from engine.kv.tiers.disk import DiskTier
from engine.kv.tiers.host import HostMemoryTier
from engine.kv.tiers.pinned import PinnedBuffers
from engine.kv.tiers.protocol import KVTier, Retention

MIB = 1 << 20


def build_tiers(config: EngineConfig, device: torch.device) -> list[KVTier]:
    quota = config.kv_tenant_quota_mib * MIB if config.kv_tenant_quota_mib else None
    tiers: list[KVTier] = []
    # One allocator for every tier: a file tier's read buffer can then be kept by the host tier.
    allocate = PinnedBuffers() if device.type == "cuda" else bytearray
    if config.kv_host_cache_mib:
        retention = Retention(config.kv_host_cache_mib * MIB, config.kv_host_cache_ttl_s, quota)
        tiers.append(HostMemoryTier(retention, allocate=allocate))
    if config.kv_disk_cache_dir:
        retention = Retention(config.kv_disk_cache_mib * MIB, config.kv_disk_cache_ttl_s, quota)
        tiers.append(DiskTier(config.kv_disk_cache_dir, retention, allocate=allocate))
    if config.kv_shared_cache_dir:
        retention = Retention(config.kv_shared_cache_mib * MIB, config.kv_shared_cache_ttl_s, quota)
        tiers.append(DiskTier(config.kv_shared_cache_dir, retention, shared=True, allocate=allocate))
    return tiers


def build_tiered_kv(
    config: EngineConfig, device: torch.device, caches: list[torch.Tensor], specs: list[KVCacheSpec]
) -> TieredKV | None:
    if not (config.kv_tiers_enabled and config.enable_prefix_caching):
        return None
    return TieredKV(build_tiers(config, device), BlockIO(caches, specs), config.block_size)
