"""The tiers' changes reach the KV event log under the tier's name: writes as "stored", LRU
evictions, damaged files and other replicas' deletions as "removed"."""

from __future__ import annotations

from dataclasses import dataclass

from engine.kv.block_hash import BlockHash, hash_block
from engine.kv.events import KVEventLog
from engine.kv.tiers.connector import TieredKV
from engine.kv.tiers.disk import DiskTier
from engine.kv.tiers.host import HostMemoryTier
from engine.kv.tiers.protocol import Retention
from engine.kv.tiers.record import encode_record

DAY = 86_400.0
PAGE = 256  # bytes of "KV" per block


@dataclass
class Evicted:
    block_id: int
    block_hash: BlockHash | None
    parent_hash: BlockHash | None
    token_ids: tuple[int, ...]
    cache_salt: str | None = None


class Pages:
    """The device's pages: each block id's KV bytes."""

    def __init__(self) -> None:
        self.pages: dict[int, bytes] = {}

    def read_block(self, block_id: int) -> bytearray:
        return bytearray(self.pages.get(block_id, bytes([block_id % 256]) * PAGE))

    def write_block(self, block_id: int, kv) -> bool:
        self.pages[block_id] = bytes(kv)
        return True

    def finish(self) -> None:
        return None


def block(i: int) -> Evicted:
    return Evicted(block_id=i, block_hash=hash_block(None, [i]), parent_hash=None, token_ids=(i,))


def record_bytes() -> int:
    return len(encode_record(None, (0,), bytearray(PAGE)))


def tiered(*tiers) -> tuple[TieredKV, KVEventLog]:
    events = KVEventLog()
    kv = TieredKV(list(tiers), Pages(), block_size=1)
    kv.report_to(events)
    return kv, events


def by_tier(events: KVEventLog, since: int = 0) -> list[tuple[str, str, list[str]]]:
    return [(e["type"], e["tier"], e["hashes"]) for e in events.events_since(since)]


def test_an_offloaded_block_is_stored_in_every_tier_it_was_written_to(tmp_path):
    kv, events = tiered(HostMemoryTier(Retention(1 << 20, DAY)), DiskTier(tmp_path, Retention(1 << 20, DAY)))
    kv.offload(block(1))
    hexed = block(1).block_hash.hex()
    assert by_tier(events) == [("stored", "host", [hexed]), ("stored", "disk", [hexed])]
    assert events.tier_snapshot()[1] == {"device": [], "host": [hexed], "disk": [hexed]}


def test_a_host_tier_lru_eviction_is_removed_from_the_host_tier():
    host = HostMemoryTier(Retention(2 * record_bytes(), DAY))
    kv, events = tiered(host)
    for i in range(3):
        kv.offload(block(i))
    assert by_tier(events, since=2) == [
        ("removed", "host", [block(0).block_hash.hex()]),
        ("stored", "host", [block(2).block_hash.hex()]),
    ]
    assert set(events.tier_snapshot()[1]["host"]) == {block(1).block_hash.hex(), block(2).block_hash.hex()}


def test_a_damaged_disk_file_found_by_an_onload_is_removed_from_the_disk_tier(tmp_path):
    disk = DiskTier(tmp_path, Retention(1 << 20, DAY))
    kv, events = tiered(disk)
    kv.offload(block(7))
    (path,) = tmp_path.glob("*/*.kvb")
    path.write_bytes(path.read_bytes()[:-1])
    seen = events.last_seq
    assert kv.onload([block(7).block_hash], [None], [(7,)], [0]) == 0
    assert by_tier(events, since=seen) == [("removed", "disk", [block(7).block_hash.hex()])]
    assert events.tier_snapshot()[1]["disk"] == []


def test_blocks_a_disk_tier_held_before_the_connector_are_reported_at_once(tmp_path):
    DiskTier(tmp_path, Retention(1 << 20, DAY)).put(block(3).block_hash, b"x" * 64)
    _, events = tiered(DiskTier(tmp_path, Retention(1 << 20, DAY)))  # a restart
    assert by_tier(events) == [("stored", "disk", [block(3).block_hash.hex()])]


def test_a_shared_rescan_reports_what_other_replicas_wrote_and_deleted(tmp_path):
    other = DiskTier(tmp_path, Retention(1 << 20, DAY), shared=True)
    other.put(block(1).block_hash, b"x" * 64)
    mine = DiskTier(tmp_path, Retention(1 << 20, DAY), shared=True)
    kv, events = tiered(mine)
    seen = events.last_seq
    other.put(block(2).block_hash, b"y" * 64)
    next(tmp_path.glob(f"*/{block(1).block_hash.hex()}.kvb")).unlink()
    mine.rebuild_index()
    assert sorted(by_tier(events, since=seen)) == [
        ("removed", "shared", [block(1).block_hash.hex()]),
        ("stored", "shared", [block(2).block_hash.hex()]),
    ]
