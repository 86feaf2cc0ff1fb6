from dataclasses import dataclass, field

from engine.kv.block_hash import hash_chain, salt_bytes
from engine.kv.kv_manager import KVCacheManager


@dataclass
class Req:
    request_id: str
    all_token_ids: list[int] = field(default_factory=list)
    cache_salt: str | None = None


def _run_prefill(kv, req):
    hit = kv.find_cached_prefix(req)
    assert kv.allocate_slots(req, hit.num_tokens, len(req.all_token_ids) - hit.num_tokens, hit)
    return hit


def test_prefix_hit_covers_full_blocks_only_and_counts_tokens():
    kv = KVCacheManager(num_blocks=10, block_size=4)
    first = Req("a", list(range(10)))  # 2 full blocks + 2 tokens
    assert _run_prefill(kv, first).num_tokens == 0
    second = Req("b", list(range(9)) + [99])
    hit = _run_prefill(kv, second)
    assert hit.num_tokens == 8
    assert kv.block_ids("b")[:2] == kv.block_ids("a")[:2]
    assert kv.block_ids("b")[2] != kv.block_ids("a")[2]
    assert kv.prefix_cache_queries == 20 and kv.prefix_cache_hits == 8


def test_at_least_one_token_is_left_to_compute():
    kv = KVCacheManager(num_blocks=10, block_size=4)
    _run_prefill(kv, Req("a", list(range(8))))
    assert kv.find_cached_prefix(Req("b", list(range(8)))).num_tokens == 4


def test_hashes_match_the_shared_block_hash_chain_and_events():
    kv = KVCacheManager(num_blocks=10, block_size=4)
    req = Req("a", list(range(12)), cache_salt="tenant-1")
    _run_prefill(kv, req)
    expected = [h.hex() for h in hash_chain(req.all_token_ids, 4, extra=salt_bytes("tenant-1"))]
    last_seq, cached = kv.events.snapshot()
    assert cached == expected and last_seq == 3
    # another salt shares nothing
    assert kv.find_cached_prefix(Req("b", list(range(12)), cache_salt="tenant-2")).num_tokens == 0


def test_free_keeps_hashes_until_blocks_are_reused_then_logs_removal():
    kv = KVCacheManager(num_blocks=4, block_size=4)
    a = Req("a", list(range(8)))
    _run_prefill(kv, a)
    kv.free(a)
    assert kv.pool.num_free_blocks == 4
    assert kv.find_cached_prefix(Req("a2", list(range(9)))).num_tokens == 8
    seq = kv.events.last_seq
    b = Req("b", list(range(100, 116)))  # needs all 4 blocks: evicts both cached ones
    _run_prefill(kv, b)
    events = kv.events.events_since(seq)
    removed = [h for e in events if e["type"] == "removed" for h in e["hashes"]]
    assert len(removed) == 2
    assert kv.find_cached_prefix(Req("a3", list(range(9)))).num_tokens == 0


def test_allocation_fails_without_side_effects_when_pool_is_short():
    kv = KVCacheManager(num_blocks=3, block_size=4)
    a = Req("a", list(range(8)))
    _run_prefill(kv, a)
    b = Req("b", list(range(50, 62)))
    assert not kv.allocate_slots(b, 0, 12)
    assert kv.pool.num_free_blocks == 1 and kv.block_ids("b") == []


def test_decode_growth_caches_blocks_as_they_fill():
    kv = KVCacheManager(num_blocks=4, block_size=4)
    req = Req("a", [1, 2, 3])
    assert kv.allocate_slots(req, 0, 3)
    req.all_token_ids.append(4)
    assert kv.allocate_slots(req, 3, 1)
    assert kv.pool.num_cached_blocks == 1
    req.all_token_ids.append(5)
    assert kv.allocate_slots(req, 4, 1)
    assert len(kv.block_ids("a")) == 2


def test_caching_disabled_reports_no_hits():
    kv = KVCacheManager(num_blocks=10, block_size=4, enable_caching=False)
    _run_prefill(kv, Req("a", list(range(10))))
    assert kv.find_cached_prefix(Req("b", list(range(10)))).num_tokens == 0
    assert kv.events.last_seq == 0


def test_a_salt_with_a_lone_surrogate_is_a_salt_like_any_other():
    # Strict UTF-8 refuses "\ud800"; hashing it crashed the engine core's loop (the whole replica).
    kv = KVCacheManager(num_blocks=10, block_size=4)
    _run_prefill(kv, Req("a", list(range(8)), cache_salt="\ud800"))
    assert kv.find_cached_prefix(Req("b", list(range(9)), cache_salt="\ud800")).num_tokens == 8
    assert kv.find_cached_prefix(Req("c", list(range(9)), cache_salt="\udc00")).num_tokens == 0
