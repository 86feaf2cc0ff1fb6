"""A block offloaded to a tier and onloaded into another block id is the same bits in every layer."""

from __future__ import annotations

import pytest
import torch

from engine.kv.block_hash import hash_chain
from engine.kv.block_pool import Block
from engine.kv.specs import FullAttentionSpec, MLASpec
from engine.kv.tiers.block_io import BlockIO
from engine.kv.tiers.connector import TieredKV
from engine.kv.tiers.disk import DiskTier
from engine.kv.tiers.host import HostMemoryTier
from engine.kv.tiers.protocol import Retention
from engine.kv.tiers.record import encode_record

SPECS = [
    FullAttentionSpec(block_size=4, dtype="bfloat16", num_kv_heads=2, head_dim=8),
    MLASpec(block_size=4, dtype="bfloat16", kv_lora_rank=16, rope_head_dim=4),
    FullAttentionSpec(block_size=4, dtype="float32", num_kv_heads=1, head_dim=4),
]
RETENTION = Retention(budget_bytes=1 << 20, ttl_s=3600)


def random_caches(num_blocks: int = 6) -> list[torch.Tensor]:
    """Caches filled with arbitrary bit patterns (NaNs and all), so only a bitwise copy matches."""
    gen = torch.Generator().manual_seed(0)
    out = []
    for spec in SPECS:
        dtype = getattr(torch, spec.dtype)
        shape = spec.cache_shape(num_blocks)
        bits = torch.randint(
            0, 256, (torch.Size(shape).numel() * spec.itemsize,), generator=gen, dtype=torch.uint8
        )
        out.append(bits.view(dtype).view(shape))
    return out


def block_bits(caches: list[torch.Tensor], block_id: int) -> list[torch.Tensor]:
    return [
        (c[:, block_id] if c.dim() == 5 else c[block_id]).contiguous().view(-1).view(torch.uint8)
        for c in caches
    ]


def cached_block(block_id: int, tokens: list[int], salt: str | None = None) -> Block:
    (h,) = hash_chain(tokens, 4)
    return Block(block_id, block_hash=h, token_ids=tuple(tokens), cache_salt=salt)


@pytest.fixture(params=["host", "disk"])
def tier(request, tmp_path):
    return HostMemoryTier(RETENTION) if request.param == "host" else DiskTier(tmp_path, RETENTION)


def test_offload_then_onload_into_another_block_is_bitwise(tier):
    caches = random_caches()
    io = BlockIO(caches, SPECS)
    tiered = TieredKV([tier], io, block_size=4)
    block = cached_block(2, [5, 6, 7, 8], salt="t")
    before = block_bits(caches, 2)
    tiered.offload(block)
    assert tier.stats().bytes_by_tenant.keys() == {"t"}
    assert tiered.onload([block.block_hash], [None], [[5, 6, 7, 8]], [5], "t") == 1
    assert all(torch.equal(a, b) for a, b in zip(before, block_bits(caches, 5), strict=True))
    assert not torch.equal(block_bits(caches, 2)[0], block_bits(caches, 4)[0])  # the others untouched
    counters = tiered.counters[tier.name]
    assert (counters.offloads, counters.onloads, counters.hit_tokens) == (1, 1, 4)


def test_a_record_whose_tokens_differ_is_a_miss(tier):
    caches = random_caches()
    tiered = TieredKV([tier], BlockIO(caches, SPECS), block_size=4)
    block = cached_block(1, [1, 2, 3, 4])
    tiered.offload(block)
    target = block_bits(caches, 3)
    assert tiered.onload([block.block_hash], [None], [[1, 2, 3, 9]], [3]) == 0  # a colliding hash
    assert all(torch.equal(a, b) for a, b in zip(target, block_bits(caches, 3), strict=True))


def test_a_lower_tier_hit_is_promoted_to_the_tier_above(tmp_path):
    caches = random_caches()
    host, disk = HostMemoryTier(RETENTION), DiskTier(tmp_path, RETENTION)
    tiered = TieredKV([host, disk], BlockIO(caches, SPECS), block_size=4)
    block = cached_block(0, [9, 9, 9, 9])
    disk.put(block.block_hash, encode_record(None, block.token_ids, BlockIO(caches, SPECS).read_block(0)))
    assert not host.contains(block.block_hash)
    assert tiered.onload([block.block_hash], [None], [[9, 9, 9, 9]], [4]) == 1
    assert host.contains(block.block_hash)
    assert tiered.counters["disk"].hit_tokens == 4 and tiered.counters["host"].hit_tokens == 0


@pytest.mark.parametrize("direct", [False, True], ids=["buffered", "direct"])
def test_a_promoted_block_keeps_the_buffer_its_file_was_read_into(tmp_path, monkeypatch, direct):
    """One allocation per block read from disk (into the shared allocator's memory), none more for
    the host tier's copy: the host tier keeps the read buffer, and serves the same bits later."""
    from engine.kv.tiers import disk as disk_module
    from engine.kv.tiers.pinned import PinnedBuffers

    monkeypatch.setattr(disk_module, "DIRECT_READS", direct)
    caches = random_caches()
    buffers, calls = PinnedBuffers(pin=False), []

    def allocate(n):
        calls.append(n)
        return buffers(n)

    host = HostMemoryTier(RETENTION, allocate=allocate)
    disk = DiskTier(tmp_path, RETENTION, allocate=allocate)
    tiered = TieredKV([host, disk], BlockIO(caches, SPECS), block_size=4)
    blocks = [cached_block(b, [b] * 4) for b in (0, 1)]
    for b in blocks:
        disk.put(
            b.block_hash, encode_record(None, b.token_ids, BlockIO(caches, SPECS).read_block(b.block_id))
        )
    expected = [block_bits(caches, b) for b in (0, 1)]
    for b, target in zip(blocks, (4, 5), strict=True):
        assert tiered.onload([b.block_hash], [None], [b.token_ids], [target]) == 1
    assert len(calls) == 2 and host.contains(blocks[0].block_hash) and host.contains(blocks[1].block_hash)
    for b, target in zip(blocks, (2, 3), strict=True):  # now from the host tier
        assert tiered.onload([b.block_hash], [None], [b.token_ids], [target]) == 1
    assert tiered.counters["host"].hit_tokens == 8 and len(calls) == 2
    for want, target in zip(expected, (2, 3), strict=True):
        assert all(torch.equal(a, c) for a, c in zip(want, block_bits(caches, target), strict=True))


def test_a_damaged_disk_block_stops_the_onload_there(tmp_path):
    caches = random_caches()
    disk = DiskTier(tmp_path, RETENTION)
    tiered = TieredKV([disk], BlockIO(caches, SPECS), block_size=4)
    tokens = list(range(8))
    first, second = hash_chain(tokens, 4)
    tiered.offload(Block(0, block_hash=first, token_ids=(0, 1, 2, 3)))
    tiered.offload(Block(1, block_hash=second, parent_hash=first, token_ids=(4, 5, 6, 7)))
    (path,) = tmp_path.glob(f"*/{second.hex()}.kvb")
    path.write_bytes(path.read_bytes()[:-3])
    assert tiered.count_prefix([first, second]) == 2  # the header still reads: a cheap look cannot tell
    assert tiered.onload([first, second], [None, first], [tokens[:4], tokens[4:]], [4, 5]) == 1


def test_a_staged_onload_of_more_blocks_than_the_staging_buffer_holds_is_bitwise(monkeypatch):
    """The accelerator's path (one copy per block into a staging buffer, scattered per part), on
    the CPU: three blocks through a two-block staging buffer land in their own block ids."""
    import engine.kv.tiers.block_io as block_io

    caches = random_caches()
    probe = BlockIO(caches, SPECS)
    monkeypatch.setattr(block_io, "STAGING_BYTES", 2 * probe.block_bytes)
    io = BlockIO(caches, SPECS, staged=True)
    payloads = [io.read_block(b) for b in (0, 1, 2)]
    expected = [block_bits(caches, b) for b in (0, 1, 2)]
    for block_id, kv in zip((5, 3, 4), payloads, strict=True):
        assert io.write_block(block_id, kv)
    io.finish()
    for block_id, bits in zip((5, 3, 4), expected, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(bits, block_bits(caches, block_id), strict=True))


class RunningCopies:
    """An accelerator's onload still copying until the test says it is done."""

    def __init__(self) -> None:
        self.took: float | None = None

    def seconds(self) -> float | None:
        return self.took


def test_an_onload_counts_its_bytes_and_time_once_its_copies_have_finished():
    host = HostMemoryTier(RETENTION)
    io = BlockIO(random_caches(), SPECS)
    copies = RunningCopies()
    io.finish = lambda: copies  # the CPU copier's own finish returns None (done on return)
    tiered = TieredKV([host], io, 4)
    tiered.offload(cached_block(0, [0, 1, 2, 3]))
    (h,) = hash_chain([0, 1, 2, 3], 4)
    assert tiered.onload([h], [None], [[0, 1, 2, 3]], [5]) == 1
    assert tiered.stats()["host"][1].onload_bytes == 0  # still copying: not counted yet
    copies.took = 0.002
    counters = tiered.stats()["host"][1]
    assert (counters.onload_bytes, counters.onload_s) == (io.block_bytes, 0.002)
    assert tiered.stats()["host"][1].onload_bytes == io.block_bytes  # counted once


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the asynchronous path is CUDA's")
def test_a_cuda_onload_returns_before_its_copies_and_the_next_kernel_sees_the_blocks():
    caches = [c.cuda() for c in random_caches()]
    io = BlockIO(caches, SPECS)
    host = HostMemoryTier(
        RETENTION, allocate=lambda n: torch.empty(n, dtype=torch.uint8, pin_memory=True).numpy()
    )
    tiered = TieredKV([host], io, 4)
    chain = hash_chain(list(range(12)), 4)
    for i, h in enumerate(chain):
        tiered.offload(Block(i, block_hash=h, parent_hash=chain[i - 1] if i else None,
                             token_ids=tuple(range(4 * i, 4 * i + 4))))  # fmt: skip
    expected = [block_bits(caches, b) for b in (0, 1, 2)]
    parents, chunks = [None, *chain[:-1]], [range(0, 4), range(4, 8), range(8, 12)]
    # A first onload allocates the staging buffer: a fresh cudaMalloc may wait for the device.
    assert tiered.onload(chain, parents, chunks, [5, 3, 4]) == 3
    torch.cuda.synchronize()
    before = tiered.stats()["host"][1].onload_bytes
    torch.cuda._sleep(1_000_000_000)  # ~0.5 s of a busy stream: the onload can only queue its copies
    assert tiered.onload(chain, parents, chunks, [3, 4, 5]) == 3
    assert tiered.stats()["host"][1].onload_bytes == before  # returned without waiting for the device
    got = [block_bits(caches, b) for b in (3, 4, 5)]  # queued after the copies on the same stream
    for want, have in zip(expected, got, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(want, have, strict=True))
    assert tiered.stats()["host"][1].onload_bytes == before + 3 * io.block_bytes  # .cpu() above waited
    assert tiered.stats()["host"][1].onload_s > 0
