"""The KV manager with tiers below its pool (pure Python: a dict stands in for the device caches)."""

from __future__ import annotations

from engine.kv.kv_manager import KVCacheManager
from engine.kv.tiers.connector import TieredKV
from engine.kv.tiers.host import HostMemoryTier
from engine.kv.tiers.protocol import Retention
from engine.kv.tiers.record import decode_record
from tests.support.kv_requests import KVRequestStub as Req

BS = 4


class FakeDevice:
    """Each block id's "pages": the token ids written there, so a test sees what KV a block holds."""

    def __init__(self) -> None:
        self.pages: dict[int, bytes] = {}

    def read_block(self, block_id: int) -> bytearray:
        return bytearray(self.pages[block_id])

    def write_block(self, block_id: int, kv) -> bool:
        self.pages[block_id] = bytes(kv)
        return True

    def finish(self) -> None:
        pass


def make(num_blocks: int):
    device = FakeDevice()
    tiered = TieredKV([HostMemoryTier(Retention(1 << 20, 3600))], device, BS)
    return KVCacheManager(num_blocks, BS, lower_tiers=tiered), device, tiered


def run(kv, device, req):
    """Prefill and finish a request, "computing" each new block's pages from its tokens."""
    hit = kv.find_cached_prefix(req)
    assert kv.allocate_slots(req, hit.num_tokens, len(req.all_token_ids) - hit.num_tokens, hit)
    ids = kv.block_ids(req.request_id)
    for i in range(hit.num_tokens // BS, len(ids)):
        device.pages[ids[i]] = bytes(req.all_token_ids[i * BS : (i + 1) * BS])
    pages = [device.pages[b] for b in ids]
    kv.free(req)
    return hit, pages


def test_an_evicted_prefix_comes_back_from_the_tier_with_its_pages():
    kv, device, tiered = make(num_blocks=4)
    prefix = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    _, first_pages = run(kv, device, Req("a", prefix + [13]))
    run(kv, device, Req("filler", list(range(100, 116))))  # all four blocks: the prefix is evicted
    assert tiered.counters["host"].offloads == 3  # the full prefix blocks; the tail is partial
    hit, pages = run(kv, device, Req("b", prefix + [99]))
    assert hit.num_tokens == 12
    assert pages[:3] == first_pages[:3]
    assert tiered.counters["host"].hit_tokens == 12
    assert kv.prefix_cache_hits == 12


def test_the_device_part_of_a_hit_is_not_handed_out_to_onload_the_rest():
    kv, device, tiered = make(num_blocks=4)
    prefix = list(range(1, 13))
    run(kv, device, Req("a", prefix + [13]))  # 4 blocks: 3 full prefix blocks and the tail
    # 3 blocks: takes the tail's block and the prefix's last two (the tail end goes first), leaving
    # the prefix's first block cached on the device.
    run(kv, device, Req("filler", list(range(100, 110))))
    hit, pages = run(kv, device, Req("b", prefix + [99]))
    assert hit.num_tokens == 12 and tiered.counters["host"].hit_tokens == 8
    assert pages[:3] == [bytes(prefix[i : i + BS]) for i in (0, 4, 8)]
    assert len(set(b.block_id for b in hit.blocks)) == 3


def test_onload_stops_where_the_pool_runs_out():
    kv, device, tiered = make(num_blocks=4)
    prefix = list(range(1, 13))
    run(kv, device, Req("a", prefix + [13]))
    run(kv, device, Req("filler", list(range(100, 116))))
    holder = Req("holder", list(range(200, 208)))
    kv.allocate_slots(holder, 0, 8)  # 2 of 4 blocks stay taken
    hit = kv.find_cached_prefix(Req("b", prefix + [99]))
    assert hit.num_tokens == 8  # only two blocks could be onloaded
    assert [device.pages[b.block_id] for b in hit.blocks] == [bytes(prefix[:4]), bytes(prefix[4:8])]


def test_a_graceful_shutdown_writes_the_pools_idle_cached_blocks_to_disk_not_host_memory(tmp_path):
    from engine.kv.tiers.disk import DiskTier

    device = FakeDevice()
    host = HostMemoryTier(Retention(1 << 20, 3600))
    tiered = TieredKV([host, DiskTier(tmp_path / "disk", Retention(1 << 20, 3600))], device, BS)
    kv = KVCacheManager(8, BS, lower_tiers=tiered)
    prefix = list(range(1, 13))
    run(kv, device, Req("a", prefix + [13]))  # 3 full cached blocks, idle once it ends
    held = Req("held", list(range(100, 109)))
    kv.allocate_slots(held, 0, 9)  # a running request's 2 full blocks: not offered, still computing
    assert tiered.counters["disk"].offloads == 0
    assert kv.offload_idle_blocks() == 3
    assert tiered.counters["disk"].offloads == 3 and tiered.counters["host"].offloads == 0
    # A fresh process (empty pool and host memory) over the same directory serves the prefix.
    device2 = FakeDevice()
    restarted = TieredKV(
        [HostMemoryTier(Retention(1 << 20, 3600)), DiskTier(tmp_path / "disk", Retention(1 << 20, 3600))],
        device2,
        BS,
    )
    kv2 = KVCacheManager(8, BS, lower_tiers=restarted)
    hit, pages = run(kv2, device2, Req("b", prefix + [99]))
    assert hit.num_tokens == 12 and restarted.counters["disk"].hit_tokens == 12
    assert pages[:3] == [bytes(prefix[i : i + BS]) for i in (0, 4, 8)]
    assert kv.offload_idle_blocks() == 3 and tiered.counters["disk"].offloads == 3  # nothing twice


def test_without_tiers_a_shutdown_offloads_nothing():
    kv = KVCacheManager(4, BS)
    run(kv, FakeDevice(), Req("a", list(range(1, 10))))
    assert kv.offload_idle_blocks() == 0


def test_a_shutdown_writes_the_most_recently_freed_blocks_first():
    class Recording(HostMemoryTier):
        durable = True

        def __init__(self):
            super().__init__(Retention(1 << 20, 3600))
            self.order = []

        def put(self, block_hash, payload, tenant=""):
            self.order.append(bytes(decode_record(memoryview(payload)).kv))
            return super().put(block_hash, payload, tenant)

    device, tier = FakeDevice(), Recording()
    kv = KVCacheManager(8, BS, lower_tiers=TieredKV([tier], device, BS))
    run(kv, device, Req("old", [1, 2, 3, 4, 9]))
    run(kv, device, Req("new", [5, 6, 7, 8, 9]))
    kv.offload_idle_blocks()
    assert tier.order == [bytes([5, 6, 7, 8]), bytes([1, 2, 3, 4])]
