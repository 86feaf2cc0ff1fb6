"""The KV manager with a window group (engine/kv/window_blocks.py): windowed layers' blocks leave the
request as its window moves on and return to their pool; a prefix hit beside full-attention layers
is reused by those and replayed from the layout's replay start for the windowed ones; where every
layer is windowed, a hit needs only the cached blocks of the window before it."""

from engine.kv.kv_manager import KVCacheManager
from engine.kv.layout import KVLayout
from engine.kv.specs import FullAttentionSpec, SlidingWindowSpec
from tests.support.kv_requests import KVRequestStub as Req

BS = 4
SHAPE = dict(block_size=BS, dtype="float32", num_kv_heads=1, head_dim=4)
WINDOW = 8


def _hybrid(margin: int = 4, window_blocks: int = 16) -> KVCacheManager:
    layout = KVLayout.from_specs(
        [SlidingWindowSpec(**SHAPE, window=WINDOW), FullAttentionSpec(**SHAPE)], "bounded-replay", margin
    )
    return KVCacheManager(64, BS, layout=layout, num_window_blocks=window_blocks)


def _decode(kv: KVCacheManager, req: Req, steps: int) -> list[int]:
    """Feed ``steps`` more tokens one at a time; the windowed layers' blocks held after each."""
    held = []
    for _ in range(steps):
        start = len(req.all_token_ids)
        req.all_token_ids.append(7)
        assert kv.allocate_slots(req, start, 1)
        held.append(kv.window.num_held(req.request_id))
    return held


def test_windowed_blocks_leave_as_the_window_moves_and_return_to_their_pool():
    kv = _hybrid()
    req = Req("a", list(range(1, 21)))
    assert kv.allocate_slots(req, 0, 20)
    assert kv.window.num_held("a") == 5 and kv.window_base("a") == 0
    held = _decode(kv, req, 40)
    # Window and one block: positions start - 8 .. start span at most 3 blocks of 4.
    assert max(held) <= WINDOW // BS + 1
    assert kv.window_base("a") == (len(req.all_token_ids) - 1 - WINDOW) // BS
    assert kv.window.pool.num_used_blocks == kv.window.num_held("a")
    assert len(kv.block_ids("a")) == -(-len(req.all_token_ids) // BS)  # full attention keeps it all
    kv.free(req)
    assert kv.window.pool.num_used_blocks == 0 and kv.pool.num_used_blocks == 0


def test_a_hit_reuses_full_attention_blocks_and_replays_the_window_group():
    kv = _hybrid(margin=4)
    first = Req("a", list(range(1, 42)))
    assert kv.allocate_slots(first, 0, 41)
    full_ids = list(kv.block_ids("a"))
    kv.free(first)
    second = Req("b", list(range(1, 42)) + [99, 98])
    hit = kv.find_cached_prefix(second)
    assert hit.num_block_tokens == 40  # ten cached blocks of the main group
    assert hit.num_tokens == (40 - WINDOW - 4) // BS * BS == 28  # replay from here
    assert kv.allocate_slots(second, hit.num_tokens, len(second.all_token_ids) - hit.num_tokens, hit)
    assert kv.block_ids("b")[:10] == full_ids[:10]  # the same blocks, not recomputed
    assert kv.reused_until("b") == 40  # the replayed positions below write no main-group KV
    assert kv.window_base("b") == 28 // BS and kv.window.num_held("b") == -(-43 // BS) - 28 // BS
    assert kv.prefix_cache_hits == 28


def test_window_pool_exhaustion_fails_the_allocation_without_a_change():
    kv = _hybrid(window_blocks=4)
    req = Req("a", list(range(1, 25)))
    assert not kv.allocate_slots(req, 0, 24)  # six window blocks wanted, four in the pool
    assert kv.pool.num_used_blocks == 0 and kv.window.pool.num_used_blocks == 0


def test_trim_returns_rejected_draft_blocks_of_both_groups():
    kv = _hybrid()
    req = Req("a", list(range(1, 13)))
    assert kv.allocate_slots(req, 0, 12)
    assert kv.allocate_slots(req, 12, 6)  # a token and a 5-token draft: two blocks more each
    kv.trim(req, 13)
    assert len(kv.block_ids("a")) == 4
    assert kv.window.base("a") + kv.window.num_held("a") == 4


def test_all_windowed_hit_needs_only_the_windows_blocks():
    layout = KVLayout.from_specs([SlidingWindowSpec(**SHAPE, window=WINDOW)] * 2, "bounded-replay", 140)
    kv = KVCacheManager(32, BS, layout=layout)
    first = Req("a", list(range(1, 42)))
    assert kv.allocate_slots(first, 0, 41)
    _decode(kv, first, 10)  # the first blocks leave the window, keeping their hashes
    kv.free(first)
    second = Req("b", list(range(1, 42)) + [99])
    hit = kv.find_cached_prefix(second)
    assert hit.num_tokens == 40 and hit.first_block == (40 - WINDOW) // BS
    assert kv.allocate_slots(second, 40, 2, hit)
    assert kv.block_base("b") == hit.first_block
    assert kv.block_ids("b")[: len(hit.blocks)] == [b.block_id for b in hit.blocks]
    # With that window's blocks evicted, the hit falls back to the longest one whose window's
    # blocks are still cached (the blocks before it need not be).
    kv.free(second)
    for block in hit.blocks:
        kv.pool._uncache(block)
    shorter = kv.find_cached_prefix(Req("c", list(range(1, 42)) + [5]))
    assert shorter.num_tokens == 32 and shorter.first_block == (32 - WINDOW) // BS
