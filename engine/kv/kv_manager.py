"""Per-request KV block bookkeeping on top of the block pool; the scheduler's only view of KV memory.

The scheduler asks two questions: "which leading blocks of this request are already cached?" and
"can I get slots for N more tokens?". It never touches free lists. Pure Python: no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from engine.kv.block_hash import BlockHash, hash_block, salt_bytes
from engine.kv.block_pool import Block, BlockPool
from engine.kv.events import KVEventLog
from engine.kv.layout import KVLayout
from engine.kv.window_blocks import WindowBlocks

if TYPE_CHECKING:
    from engine.kv.tiers.connector import TieredKV


class KVRequest(Protocol):
    request_id: str
    cache_salt: str | None

    @property
    def all_token_ids(self) -> list[int]: ...


@dataclass
class PrefixHit:
    blocks: list[Block]
    num_tokens: int  # tokens not computed again: the hit, or its replay start (sliding-window layers)
    num_block_tokens: int = -1  # tokens the blocks hold (-1: num_tokens)
    first_block: int = 0  # the first block's index in the request (a window's hit starts late)

    def __post_init__(self) -> None:
        if self.num_block_tokens < 0:
            self.num_block_tokens = self.num_tokens


class KVCacheManager:
    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        enable_caching: bool = True,
        events: KVEventLog | None = None,
        lower_tiers: TieredKV | None = None,
        write_through: bool = False,
        first_block_id: int = 0,
        layout: KVLayout | None = None,
        num_window_blocks: int = 0,
    ) -> None:
        """``lower_tiers``: where evicted cached blocks go and prefix hits beyond the pool come from;
        ``write_through``: a finished request's computed full blocks go there at once (a prefill
        replica's, for a decode replica to onload), not only on eviction. ``layout``: the KV groups
        (``engine/kv/layout.py``); with a window group, ``num_window_blocks`` is its pool's size
        when full-attention layers keep the main pool, while a model whose every layer is windowed
        has the one pool of ``num_blocks``, windowed, whose blocks are hashed as full attention's
        are: a hit there needs only the blocks of the window before it (``_window_hit``), and no
        KV tier sits below it."""
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        self.block_size = block_size
        self.layout = layout if layout is not None else KVLayout(block_size, (), (), None)
        if self.layout.all_windowed:
            lower_tiers = None  # their onload continues a hit from the first block
        self.enable_caching = enable_caching
        self.pool = BlockPool(num_blocks, enable_caching, events, first_block_id)
        # The window group's blocks: in the one pool, or (beside full-attention layers) their own.
        self.window: WindowBlocks | None = None
        if self.layout.all_windowed:
            self.window = WindowBlocks(self.pool, self.layout)
        elif self.layout.hybrid:
            self.window = WindowBlocks(BlockPool(num_window_blocks, enable_caching=False), self.layout)
        # Per request replaying its window after a hit: positions below this hold their main-group KV.
        self._reused_until: dict[str, int] = {}
        self._blocks: dict[str, list[Block]] = {}
        self._block_ids: dict[str, list[int]] = {}  # the ids of _blocks, grown alongside it
        self._hashes: dict[str, list[BlockHash]] = {}
        self._num_cached_blocks: dict[str, int] = {}
        self.prefix_cache_queries = 0  # tokens looked up
        self.prefix_cache_hits = 0  # tokens found
        self.lower_tiers = lower_tiers if enable_caching else None
        self.write_through = write_through and self.lower_tiers is not None
        if self.lower_tiers is not None:
            self.pool.on_evict = self.lower_tiers.offload
            self.lower_tiers.report_to(self.pool.events)

    @property
    def events(self) -> KVEventLog:
        return self.pool.events

    def block_ids(self, request_id: str) -> list[int]:
        """The request's block ids: a live list that grows as blocks are added; do not mutate it.
        Where every layer is windowed, the held run from ``block_base`` on."""
        if self.layout.all_windowed:
            return self.window.ids(request_id)
        ids = self._block_ids.get(request_id)
        return ids if ids is not None else []

    def block_base(self, request_id: str) -> int:
        """The block index of ``block_ids``' first id (0 unless every layer is windowed)."""
        return self.window.base(request_id) if self.layout.all_windowed else 0

    def window_block_ids(self, request_id: str) -> list[int] | None:
        """The window group's held blocks from ``window_base`` on; None without a separate group."""
        return self.window.ids(request_id) if self.layout.hybrid else None

    def window_base(self, request_id: str) -> int:
        return self.window.base(request_id) if self.layout.hybrid else 0

    def reused_until(self, request_id: str) -> int:
        """Positions below this already hold the main group's KV (a hit being replayed): the step
        recomputing them writes only the window group's."""
        return self._reused_until.get(request_id, 0)

    def window_usage(self) -> float:
        """Share of the window group's own pool in use (0 without one)."""
        return self.window.pool.usage() if self.layout.hybrid else 0.0

    def find_cached_prefix(self, request: KVRequest, record: bool = True) -> PrefixHit:
        """Longest run of leading full blocks already in the cache.

        At least one token is always left to compute, since the last prompt position must run
        through the model to produce logits. ``record``: count the lookup in the hit-rate counters
        (``record_lookup`` counts it later for a caller that asks several pools first).
        """
        if not self.enable_caching:
            return PrefixHit([], 0)
        tokens = request.all_token_ids
        hashes = self._block_hashes(request)
        max_blocks = (len(tokens) - 1) // self.block_size
        if self.layout.all_windowed:
            window_hit = self._window_hit(tokens, hashes, max_blocks)
            if record:
                self.record_lookup(len(tokens), window_hit.num_tokens)
            return window_hit
        hit: list[Block] = []
        parent: BlockHash | None = None
        for i, block_hash in enumerate(hashes[:max_blocks]):
            chunk = tokens[i * self.block_size : (i + 1) * self.block_size]
            block = self.pool.lookup(block_hash, parent, chunk)
            if block is None:
                break
            hit.append(block)
            parent = block_hash
        if self.lower_tiers is not None and len(hit) < max_blocks:
            hit += self._onload(request, hashes[:max_blocks], hit)
        num_block_tokens = len(hit) * self.block_size
        num_tokens = self.layout.replay_start(num_block_tokens)
        if record:
            self.record_lookup(len(tokens), num_tokens)
        return PrefixHit(hit, num_tokens, num_block_tokens)

    def record_lookup(self, num_tokens: int, num_hit_tokens: int) -> None:
        self.prefix_cache_queries += num_tokens
        self.prefix_cache_hits += num_hit_tokens

    def shares_pool(self, request: KVRequest, other: KVRequest) -> bool:
        """Whether freeing ``other``'s blocks can make room for ``request`` (one pool: always)."""
        return True

    def allocate_slots(
        self,
        request: KVRequest,
        num_computed_tokens: int,
        num_new_tokens: int,
        prefix_hit: PrefixHit | None = None,
    ) -> bool:
        """Reserve blocks so tokens up to num_computed + num_new have slots; False (and no change) if
        the pool cannot supply them. ``num_computed_tokens`` includes the prefix hit's tokens."""
        rid = request.request_id
        total_tokens = num_computed_tokens + num_new_tokens
        window = self.window
        if window is not None:
            window.release_behind(rid, num_computed_tokens)
            window_needed = window.needed(rid, num_computed_tokens, total_tokens)
            if window_needed > window.pool.num_free_blocks:
                return False
            if self.layout.all_windowed:
                return self._allocate_windowed(
                    request, num_computed_tokens, total_tokens, window_needed, prefix_hit
                )
        hit_blocks = prefix_hit.blocks if prefix_hit else []
        held = self._blocks.get(rid)
        needed = -(-total_tokens // self.block_size) - (len(held) if held else 0) - len(hit_blocks)
        if held is not None and not hit_blocks and needed <= 0:  # a decode step inside its last block
            self._cache_full_blocks(request, total_tokens)
            if window is not None:
                window.allocate(rid, num_computed_tokens, total_tokens)
            return True
        # Reviving a cached-but-free block takes it off the free list as well.
        revived = sum(1 for b in hit_blocks if b.ref_cnt == 0)
        if needed + revived > self.pool.num_free_blocks:
            return False
        if window is not None:
            window.allocate(rid, num_computed_tokens, total_tokens)
        if prefix_hit is not None and prefix_hit.num_block_tokens > num_computed_tokens:
            self._reused_until[rid] = prefix_hit.num_block_tokens
        self.pool.touch(hit_blocks)
        blocks = self._blocks.setdefault(request.request_id, [])
        ids = self._block_ids.setdefault(request.request_id, [])
        blocks.extend(hit_blocks)
        if hit_blocks:
            self._num_cached_blocks[request.request_id] = len(blocks)
        if needed > 0:
            blocks.extend(self.pool.allocate(needed))
        ids.extend(b.block_id for b in blocks[len(ids) :])
        self._cache_full_blocks(request, total_tokens)
        return True

    def write_through_blocks(self, request: KVRequest, num_computed_tokens: int) -> int:
        """With ``write_through``: write the request's cached full blocks whose KV is computed to every
        tier that lacks them (synchronously: they are readable there when this returns). Returns
        how many blocks the tiers now hold for it."""
        if not self.write_through:
            return 0
        blocks = self._blocks.get(request.request_id, [])
        written = 0
        for block in blocks[: num_computed_tokens // self.block_size]:
            if block.block_hash is None:  # a twin block holds the hash; it is written when its owner ends
                break
            self.lower_tiers.offload(block)
            written += 1
        return written

    def offload_idle_blocks(self) -> int:
        """Write every cached block no request holds to the durable tiers that lack it (a graceful
        shutdown: blocks reach the tiers only on eviction, so what the pool holds would die with the
        process; host memory dies too and is skipped). Most recently freed first: the engine process
        is killed if it has not stopped within its stop timeout (subprocess_client.STOP_TIMEOUT_S),
        and a shutdown cut short should have kept the hottest blocks. Returns how many were offered."""
        if self.lower_tiers is None:
            return 0
        blocks = self.pool.idle_cached_blocks()
        for block in reversed(blocks):
            self.lower_tiers.offload(block, durable_only=True)
        return len(blocks)

    def free(self, request: KVRequest) -> None:
        if self.window is not None:
            self.window.free(request.request_id)
        self._reused_until.pop(request.request_id, None)
        blocks = self._blocks.pop(request.request_id, [])
        self._block_ids.pop(request.request_id, None)
        self.pool.free(reversed(blocks))
        self._hashes.pop(request.request_id, None)
        self._num_cached_blocks.pop(request.request_id, None)

    def trim(self, request: KVRequest, num_tokens: int) -> None:
        """Keep only the blocks that hold the first ``num_tokens`` tokens (speculative decoding's
        rollback of rejected draft tokens). The freed blocks were never hashed: only verified full
        blocks are. The id list is replaced, not shrunk, so a holder of the old list (the CUDA
        graphs' block table) sees a new owner and rewrites the row."""
        if self.window is not None:
            self.window.trim(request.request_id, num_tokens)
        blocks = self._blocks.get(request.request_id)
        keep = -(-num_tokens // self.block_size)
        if blocks is None or len(blocks) <= keep:
            return
        self.pool.free(reversed(blocks[keep:]))
        del blocks[keep:]
        self._block_ids[request.request_id] = [b.block_id for b in blocks]

    def usage(self) -> float:
        """The fuller pool's share in use: a window group's own pool can run dry first."""
        return max(self.pool.usage(), self.window_usage())

    def reset_prefix_cache(self) -> bool:
        return self.pool.reset_prefix_cache()

    def _onload(self, request: KVRequest, hashes: list[BlockHash], hit: list[Block]) -> list[Block]:
        """Continue a device hit with blocks from the lower tiers, copied into fresh pool blocks that
        join the prefix cache. They are left free (revived by ``allocate_slots``, like any cached
        hit); the device hit is held meanwhile so the allocation cannot hand its blocks out."""
        start = len(hit)
        want = self.lower_tiers.count_prefix(hashes[start:])
        if want == 0:
            return []
        self.pool.touch(hit)
        try:
            want = min(want, self.pool.num_free_blocks)
            if want == 0:
                return []
            fresh = self.pool.allocate(want)
            tokens = request.all_token_ids
            size = self.block_size
            idx = range(start, start + want)
            loaded = self.lower_tiers.onload(
                [hashes[i] for i in idx],
                [hashes[i - 1] if i else None for i in idx],
                [tokens[i * size : (i + 1) * size] for i in idx],
                [b.block_id for b in fresh],
                request.cache_salt,
            )
            for i, block in zip(idx[:loaded], fresh, strict=False):
                # A hash the pool already holds (a later block outlived an earlier one) stays
                # uncached here: the copy is still this request's correct KV.
                self.pool.cache(
                    block,
                    hashes[i],
                    hashes[i - 1] if i else None,
                    tokens[i * size : (i + 1) * size],
                    request.cache_salt,
                )
            self.pool.free(reversed(fresh))
            return fresh[:loaded]
        finally:
            self.pool.free(reversed(hit))  # tail first, as requests free: the chain's root goes last

    def _window_hit(self, tokens: list[int], hashes: list[BlockHash], max_blocks: int) -> PrefixHit:
        """Every layer windowed: the longest hit of ``end`` blocks whose last window's blocks (all
        that a step from there reads) are cached, whatever came before them (vLLM's rule)."""
        size = self.block_size
        for end in range(max_blocks, 0, -1):
            first = self.layout.first_needed_block(end * size)
            blocks = []
            for i in range(first, end):
                block = self.pool.lookup(
                    hashes[i], hashes[i - 1] if i else None, tokens[i * size : (i + 1) * size]
                )
                if block is None:
                    break
                blocks.append(block)
            else:
                return PrefixHit(blocks, end * size, first_block=first)
        return PrefixHit([], 0)

    def _allocate_windowed(
        self, request: KVRequest, start: int, total_tokens: int, needed: int, hit: PrefixHit | None
    ) -> bool:
        rid = request.request_id
        if hit is not None and hit.blocks:
            revived = sum(1 for b in hit.blocks if b.ref_cnt == 0)
            if needed + revived > self.pool.num_free_blocks:
                return False
            self.pool.touch(hit.blocks)
            self.window.adopt(rid, hit.first_block, hit.blocks)
            self._num_cached_blocks[rid] = hit.first_block + len(hit.blocks)
        self.window.allocate(rid, start, total_tokens)
        self._cache_full_blocks(request, total_tokens)
        return True

    def _cache_full_blocks(self, request: KVRequest, num_tokens: int) -> None:
        if not self.enable_caching:
            return
        rid = request.request_id
        start = self._num_cached_blocks.get(rid, 0)
        if num_tokens // self.block_size <= start:  # no block became full: nothing to hash
            return
        base = 0
        if self.layout.all_windowed:  # block i of the request is the window's i - base
            base = self.window.base(rid)
            start = max(start, base)
            blocks = self.window.blocks(rid)
        else:
            blocks = self._blocks[rid]
        hashes = self._block_hashes(request)
        tokens = request.all_token_ids
        end = min(num_tokens // self.block_size, len(hashes))
        for i in range(start, end):
            parent = hashes[i - 1] if i else None
            self.pool.cache(
                blocks[i - base],
                hashes[i],
                parent,
                tokens[i * self.block_size : (i + 1) * self.block_size],
                request.cache_salt,
            )
        self._num_cached_blocks[rid] = max(start, end)

    def _block_hashes(self, request: KVRequest) -> list[BlockHash]:
        """Hashes of the request's full blocks, extended incrementally as tokens are appended."""
        hashes = self._hashes.setdefault(request.request_id, [])
        tokens = request.all_token_ids
        extra = salt_bytes(request.cache_salt)
        for i in range(len(hashes), len(tokens) // self.block_size):
            parent = hashes[i - 1] if i else None
            chunk = tokens[i * self.block_size : (i + 1) * self.block_size]
            hashes.append(hash_block(parent, chunk, extra if i == 0 else None))
        return hashes
