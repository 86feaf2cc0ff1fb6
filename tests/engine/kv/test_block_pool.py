import pytest

from engine.kv.block_hash import hash_block
from engine.kv.block_pool import BlockPool, NoFreeBlocksError


def test_allocate_and_free_track_counts():
    pool = BlockPool(4)
    blocks = pool.allocate(3)
    assert pool.num_free_blocks == 1 and pool.usage() == 0.75
    assert all(b.ref_cnt == 1 for b in blocks)
    with pytest.raises(NoFreeBlocksError):
        pool.allocate(2)
    pool.free(blocks)
    assert pool.num_free_blocks == 4
    with pytest.raises(RuntimeError, match="freed more often"):
        pool.free(blocks[:1])


def test_touch_shares_a_block_and_revives_a_freed_one():
    pool = BlockPool(2)
    (block,) = pool.allocate(1)
    pool.touch([block])
    assert block.ref_cnt == 2
    pool.free([block])
    assert pool.num_free_blocks == 1  # still held once
    pool.free([block])
    assert pool.num_free_blocks == 2
    pool.touch([block])
    assert pool.num_free_blocks == 1 and block.ref_cnt == 1


def test_cached_block_is_verified_on_lookup():
    pool = BlockPool(2)
    (block,) = pool.allocate(1)
    h = hash_block(None, [1, 2])
    assert pool.cache(block, h, None, [1, 2])
    assert pool.lookup(h, None, [1, 2]) is block
    assert pool.lookup(h, None, [1, 3]) is None  # same hash, other tokens: a collision, not a hit
    assert pool.lookup(h, b"x" * 16, [1, 2]) is None  # other parent
    assert not pool.cache(pool.allocate(1)[0], h, None, [1, 2])  # first holder keeps the hash


def test_freed_cached_blocks_are_evicted_least_recently_freed_first():
    pool = BlockPool(3)
    a, b, c = pool.allocate(3)
    for i, blk in enumerate((a, b, c)):
        pool.cache(blk, bytes([i]) * 16, None, [i])
    pool.free([b])
    pool.free([a])
    pool.free([c])
    assert pool.num_cached_blocks == 3  # freed blocks keep their hash
    (reused,) = pool.allocate(1)
    assert reused is b and reused.block_hash is None
    assert pool.lookup(bytes([0]) * 16, None, [0]) is a
    assert pool.lookup(bytes([1]) * 16, None, [1]) is None


def test_caching_disabled_never_hits():
    pool = BlockPool(2, enable_caching=False)
    (block,) = pool.allocate(1)
    assert not pool.cache(block, b"h" * 16, None, [1])
    assert pool.lookup(b"h" * 16, None, [1]) is None


def test_reset_prefix_cache_only_when_idle():
    pool = BlockPool(2)
    (block,) = pool.allocate(1)
    pool.cache(block, b"h" * 16, None, [1])
    assert not pool.reset_prefix_cache()
    pool.free([block])
    assert pool.reset_prefix_cache()
    assert pool.num_cached_blocks == 0
    assert pool.events.snapshot()[1] == []
