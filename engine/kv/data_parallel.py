"""The KV pools of an expert-parallel replica's ranks, seen by its one scheduler as one manager.

Attention is data parallel: each rank holds the KV of its own requests in its own pool. Rank r's
pool owns block ids ``r * blocks_per_rank ..``, so a scheduled request's block ids say which rank runs
it (``rank_of_block``) and the runner there subtracts the offset. A request is given a rank when it is
admitted: the rank with the longest cached prefix for it among those with room for the rest of its
prompt, then the one with the most free blocks (KV load); the rank holds until the request finishes
or is preempted (re-admission chooses again). Pure Python: no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.kv.events import KVEventLog
from engine.kv.kv_manager import KVCacheManager, KVRequest, PrefixHit


def rank_of_block(block_id: int, blocks_per_rank: int) -> int:
    return block_id // blocks_per_rank


@dataclass
class PoolTotals:
    """The ranks' pools summed, for the engine's stats (what ``BlockPool`` reports for one pool)."""

    num_blocks: int
    num_used_blocks: int
    num_cached_blocks: int

    @property
    def num_free_blocks(self) -> int:
        return self.num_blocks - self.num_used_blocks

    def usage(self) -> float:
        return self.num_used_blocks / self.num_blocks


class DataParallelKV:
    def __init__(
        self,
        num_ranks: int,
        blocks_per_rank: int,
        block_size: int,
        enable_caching: bool = True,
        events: KVEventLog | None = None,
    ) -> None:
        if num_ranks < 1:
            raise ValueError(f"num_ranks must be at least 1, got {num_ranks}")
        self.block_size = block_size
        self.blocks_per_rank = blocks_per_rank
        self.enable_caching = enable_caching
        self.lower_tiers = None
        # One event log for every rank: a gateway routes to the replica, which places the request.
        self._events = events if events is not None else KVEventLog()
        self.ranks = [
            KVCacheManager(
                blocks_per_rank, block_size, enable_caching, self._events, first_block_id=r * blocks_per_rank
            )
            for r in range(num_ranks)
        ]
        self._rank: dict[str, int] = {}

    @property
    def events(self) -> KVEventLog:
        return self._events

    @property
    def pool(self) -> PoolTotals:
        return PoolTotals(
            sum(m.pool.num_blocks for m in self.ranks),
            sum(m.pool.num_used_blocks for m in self.ranks),
            sum(m.pool.num_cached_blocks for m in self.ranks),
        )

    @property
    def prefix_cache_queries(self) -> int:
        return sum(m.prefix_cache_queries for m in self.ranks)

    @property
    def prefix_cache_hits(self) -> int:
        return sum(m.prefix_cache_hits for m in self.ranks)

    def rank_of(self, request_id: str) -> int | None:
        return self._rank.get(request_id)

    def rank_loads(self) -> list[int]:
        """Blocks in use per rank."""
        return [m.pool.num_used_blocks for m in self.ranks]

    def find_cached_prefix(self, request: KVRequest) -> PrefixHit:
        """Chooses the request's rank (see the module's docstring) and returns its hit there."""
        hits = [m.find_cached_prefix(request, record=False) for m in self.ranks]
        tokens = len(request.all_token_ids)

        def preference(r: int) -> tuple:
            m, hit = self.ranks[r], hits[r]
            missing = -(-tokens // self.block_size) - len(hit.blocks)
            fits = missing + sum(1 for b in hit.blocks if b.ref_cnt == 0) <= m.pool.num_free_blocks
            return (fits, hit.num_tokens, m.pool.num_free_blocks, -r)

        rank = max(range(len(self.ranks)), key=preference)
        self._rank[request.request_id] = rank
        self.ranks[rank].record_lookup(tokens, hits[rank].num_tokens)
        return hits[rank]

    def allocate_slots(
        self,
        request: KVRequest,
        num_computed_tokens: int,
        num_new_tokens: int,
        prefix_hit: PrefixHit | None = None,
    ) -> bool:
        return self._manager(request).allocate_slots(request, num_computed_tokens, num_new_tokens, prefix_hit)

    def block_ids(self, request_id: str) -> list[int]:
        rank = self._rank.get(request_id)
        return [] if rank is None else self.ranks[rank].block_ids(request_id)

    # Each rank's pool keeps whole contexts (sliding-window layers too: no window group here).
    def block_base(self, request_id: str) -> int:
        return 0

    def window_block_ids(self, request_id: str) -> list[int] | None:
        return None

    def window_base(self, request_id: str) -> int:
        return 0

    def reused_until(self, request_id: str) -> int:
        return 0

    def window_usage(self) -> float:
        return 0.0

    def free(self, request: KVRequest) -> None:
        self._rank.pop(request.request_id, None)
        for m in self.ranks:  # the others only drop the block hashes its lookups there cached
            m.free(request)

    def trim(self, request: KVRequest, num_tokens: int) -> None:
        self._manager(request).trim(request, num_tokens)

    def shares_pool(self, request: KVRequest, other: KVRequest) -> bool:
        return self._rank.get(request.request_id) == self._rank.get(other.request_id)

    def write_through_blocks(self, request: KVRequest, num_computed_tokens: int) -> int:
        return 0  # no tiers below an expert-parallel replica's pools (EngineConfig refuses them)

    def offload_idle_blocks(self) -> int:
        return 0

    def usage(self) -> float:
        return self.pool.usage()

    def reset_prefix_cache(self) -> bool:
        if any(m.pool.num_used_blocks for m in self.ranks):
            return False
        return all([m.reset_prefix_cache() for m in self.ranks])

    def _manager(self, request: KVRequest) -> KVCacheManager:
        rank = self._rank.get(request.request_id)
        if rank is None:
            rank = self._rank[request.request_id] = int(
                max(range(len(self.ranks)), key=lambda r: (self.ranks[r].pool.num_free_blocks, -r))
            )
        return self.ranks[rank]
