"""The file tiers: a damaged file is a miss (and is deleted), never wrong bytes; a restart keeps
entries and their age; replicas sharing a directory see and safely overwrite each other's blocks."""

from __future__ import annotations

import os
import threading

import pytest

from engine.kv.block_hash import hash_block
from engine.kv.tiers import disk
from engine.kv.tiers.disk import DiskTier
from engine.kv.tiers.protocol import Retention

DAY = 86_400.0
RETENTION = Retention(budget_bytes=1 << 20, ttl_s=7 * DAY)


@pytest.fixture(autouse=True, params=[False, True], ids=["buffered", "direct"])
def read_mode(request, monkeypatch):
    """Every test with buffered reads and with O_DIRECT reads of the block files."""
    monkeypatch.setattr(disk, "DIRECT_READS", request.param)


def block(i: int) -> bytes:
    return hash_block(None, [i])


def file_of(tier: DiskTier, block_hash: bytes):
    (path,) = tier.root.glob(f"*/{block_hash.hex()}.kvb")
    return path


def test_flipped_byte_is_a_miss_and_the_file_goes(tmp_path):
    tier = DiskTier(tmp_path, RETENTION)
    tier.put(block(0), os.urandom(4096), tenant="t")
    path = file_of(tier, block(0))
    raw = bytearray(path.read_bytes())
    raw[-100] ^= 0x01
    path.write_bytes(raw)
    assert tier.get(block(0)) is None
    assert not path.exists() and not tier.contains(block(0))
    assert tier.stats().corrupt == 1


def test_truncated_or_extended_file_is_a_miss(tmp_path):
    tier = DiskTier(tmp_path, RETENTION)
    for i, damage in enumerate((lambda raw: raw[:-1], lambda raw: raw[:20], lambda raw: raw + b"\0")):
        tier.put(block(i), os.urandom(4096))
        path = file_of(tier, block(i))
        path.write_bytes(damage(path.read_bytes()))
        assert tier.get(block(i)) is None, i
    assert tier.stats().corrupt == 3


def test_a_damaged_length_field_is_a_miss(tmp_path):
    tier = DiskTier(tmp_path, RETENTION)
    tier.put(block(0), os.urandom(4096))
    path = file_of(tier, block(0))
    raw = bytearray(path.read_bytes())
    raw[4 + 1 + 16 + 2 + 7] = 0xFF  # the payload length's top byte: an absurd size
    path.write_bytes(raw)
    assert tier.get(block(0)) is None and not path.exists()


def test_a_file_under_another_hashs_name_is_a_miss(tmp_path):
    tier = DiskTier(tmp_path, RETENTION)
    tier.put(block(0), os.urandom(256))
    tier.put(block(1), os.urandom(256))
    file_of(tier, block(1)).write_bytes(file_of(tier, block(0)).read_bytes())
    assert tier.get(block(1)) is None
    assert tier.get(block(0)) is not None


def test_restart_rebuilds_the_index_from_the_files(tmp_path):
    now = [1_700_000_000.0]
    tier = DiskTier(tmp_path, RETENTION, clock=lambda: now[0])
    payloads = {block(i): os.urandom(512) for i in range(4)}
    for h, p in payloads.items():
        tier.put(h, p, tenant="tenant-a" if h == block(0) else "")
    now[0] += 6 * DAY
    tier.get(block(0))  # the others are six days old
    (tmp_path / file_of(tier, block(3)).parent.name / "not-a-block.kvb").write_bytes(b"junk")

    now[0] += 2 * DAY
    again = DiskTier(tmp_path, RETENTION, clock=lambda: now[0])
    assert bytes(again.get(block(0))) == payloads[block(0)]
    assert again.get(block(1)) is None  # eight days unused: past the week
    assert again.expire() == 2
    assert again.stats().entries == 1 and set(again.stats().bytes_by_tenant) == {"tenant-a"}


def test_replicas_sharing_a_directory_see_each_others_blocks(tmp_path):
    one = DiskTier(tmp_path, RETENTION, shared=True)
    two = DiskTier(tmp_path, RETENTION, shared=True)
    data = os.urandom(2048)
    one.put(block(0), data)
    assert two.contains(block(0))
    assert bytes(two.get(block(0))) == data


def test_replicas_sharing_a_directory_keep_it_within_one_budget_together(tmp_path):
    """Each replica alone would count only its own files and fill a budget of its own; a put rescans
    once SHARED_RESCAN_S have passed, so the store overshoots by at most what the other replica wrote
    since its last scan (one block per second of the fake clock here)."""
    now = [0.0]
    file_bytes = len(disk.encode_file(block(0), "t", bytes(4096))) + 4096
    retention = Retention(budget_bytes=16 * file_bytes, ttl_s=7 * DAY)
    tiers = [DiskTier(tmp_path, retention, shared=True, clock=lambda: now[0]) for _ in range(2)]
    held = []
    for i in range(64):
        now[0] += 1.0
        assert tiers[i % 2].put(block(i), os.urandom(4096), tenant="t")
        held.append(sum(p.stat().st_size for p in tmp_path.glob("*/*.kvb")))
    assert max(held) <= retention.budget_bytes + (disk.SHARED_RESCAN_S + 1) * file_bytes
    assert held[-1] >= retention.budget_bytes // 2
    assert tiers[0].stats().bytes_held <= retention.budget_bytes + file_bytes


def test_a_rescan_drops_what_another_replica_deleted_and_keeps_each_tenant(tmp_path):
    now = [0.0]
    one = DiskTier(tmp_path, RETENTION, shared=True, clock=lambda: now[0])
    two = DiskTier(tmp_path, RETENTION, shared=True, clock=lambda: now[0])
    one.put(block(0), os.urandom(1024), tenant="a")
    one.put(block(1), os.urandom(1024), tenant="b")
    two.rebuild_index()
    file_of(two, block(0)).unlink()
    two.put(block(2), os.urandom(1024), tenant="c")
    now[0] += disk.SHARED_RESCAN_S
    one.put(block(3), os.urandom(1024), tenant="a")
    assert not one.contains(block(0)) and one.contains(block(2))
    assert set(one.stats().bytes_by_tenant) == {"a", "b", "c"} and one.stats().entries == 3


def test_concurrent_writers_of_one_block_leave_a_whole_file(tmp_path):
    """Writers race on one hash while a reader polls it: every read is a miss or one whole payload."""
    tiers = [DiskTier(tmp_path, RETENTION, shared=True) for _ in range(4)]
    payloads = [bytes([i]) * 65536 for i in range(4)]
    reads: list[bytes | None] = []
    done = threading.Event()

    def write(i: int) -> None:
        for _ in range(20):
            tiers[i].put(block(0), payloads[i])

    def read() -> None:
        reader = DiskTier(tmp_path, RETENTION, shared=True)
        while not done.is_set():
            got = reader.get(block(0))
            reads.append(None if got is None else bytes(got))

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    done.set()
    reader.join()
    assert all(r is None or r in payloads for r in reads)
    assert bytes(tiers[0].get(block(0))) in payloads
    assert not list(tmp_path.glob("*/.*.tmp"))


def test_announced_blocks_are_read_ahead_and_a_damaged_one_is_still_a_miss(tmp_path):
    tier = DiskTier(tmp_path, RETENTION)
    payloads = [os.urandom(1024) for _ in range(20)]  # more than the read-ahead window
    for i, payload in enumerate(payloads):
        tier.put(block(i), payload)
    path = file_of(tier, block(3))
    path.write_bytes(path.read_bytes()[:-1])
    tier.prefetch([block(i) for i in range(20)])
    got = [tier.get(block(i)) for i in range(20)]
    assert got[3] is None and not path.exists() and tier.stats().corrupt == 1
    assert all(bytes(g) == p for i, (g, p) in enumerate(zip(got, payloads, strict=True)) if i != 3)
    tier.prefetch([])
    assert tier.get(block(5)) is not None  # without an announcement: read on the spot
