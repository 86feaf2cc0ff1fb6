"""Fixed-size KV blocks: free list, reference counts and the prefix cache's hash -> block map.

A block whose reference count drops to zero goes to the tail of the free queue but keeps its hash,
so a later request with the same prefix can revive it; allocation takes blocks from the head, which
makes eviction least-recently-freed first. Only when a cached block is handed out again does it lose
its hash (and a "removed" event is logged). Pure Python: no torch.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from engine.kv.block_hash import BlockHash
from engine.kv.events import KVEventLog


@dataclass(eq=False)
class Block:
    block_id: int
    ref_cnt: int = 0
    block_hash: BlockHash | None = None
    parent_hash: BlockHash | None = None
    token_ids: tuple[int, ...] = field(default_factory=tuple)  # kept to verify a hash hit
    cache_salt: str | None = None  # the tenant whose chain the hash belongs to (tier quotas)


class NoFreeBlocksError(RuntimeError):
    pass


class BlockPool:
    def __init__(
        self,
        num_blocks: int,
        enable_caching: bool = True,
        events: KVEventLog | None = None,
        first_block_id: int = 0,
    ) -> None:
        """``first_block_id``: the pool's ids are ``first_block_id ..`` (an expert-parallel replica's
        ranks each own a range of one id space, ``engine/kv/data_parallel.py``)."""
        if num_blocks <= 0:
            raise ValueError(f"num_blocks must be positive, got {num_blocks}")
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.events = events if events is not None else KVEventLog()
        self.blocks = [Block(first_block_id + i) for i in range(num_blocks)]
        self._free: OrderedDict[int, Block] = OrderedDict((b.block_id, b) for b in self.blocks)
        self._cached: dict[BlockHash, Block] = {}
        # Called with each cached block as it is handed out for reuse, while its pages still hold
        # its KV: the lower tiers' offload (engine/kv/tiers/connector.py).
        self.on_evict: Callable[[Block], None] | None = None

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self._free)

    @property
    def num_cached_blocks(self) -> int:
        return len(self._cached)

    def usage(self) -> float:
        return self.num_used_blocks / self.num_blocks

    def allocate(self, n: int) -> list[Block]:
        if n > len(self._free):
            raise NoFreeBlocksError(f"asked for {n} blocks, {len(self._free)} free")
        out = []
        evicted = []
        for _ in range(n):
            _, block = self._free.popitem(last=False)
            if block.block_hash is not None:
                evicted.append(block.block_hash)
                if self.on_evict is not None:
                    self.on_evict(block)
                self._uncache(block)
            block.ref_cnt = 1
            out.append(block)
        self.events.removed(evicted)
        return out

    def idle_cached_blocks(self) -> list[Block]:
        """Cached blocks no request holds (their KV is complete), least recently freed first."""
        return [b for b in self._free.values() if b.block_hash is not None]

    def touch(self, blocks: Iterable[Block]) -> None:
        """Take a reference on blocks found in the prefix cache (reviving them if they were free)."""
        for block in blocks:
            if block.ref_cnt == 0:
                del self._free[block.block_id]
            block.ref_cnt += 1

    def free(self, blocks: Iterable[Block]) -> None:
        """Drop one reference each; pass a request's blocks tail-first so its tail is evicted first."""
        for block in blocks:
            if block.ref_cnt <= 0:
                raise RuntimeError(f"block {block.block_id} freed more often than it was taken")
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                self._free[block.block_id] = block

    def lookup(
        self, block_hash: BlockHash, parent_hash: BlockHash | None, token_ids: Sequence[int]
    ) -> Block | None:
        """The cached block for this hash, verified against its parent and tokens (hashes can collide)."""
        if not self.enable_caching:
            return None
        block = self._cached.get(block_hash)
        if block is None or block.parent_hash != parent_hash or block.token_ids != tuple(token_ids):
            return None
        return block

    def cache(
        self,
        block: Block,
        block_hash: BlockHash,
        parent_hash: BlockHash | None,
        token_ids: Sequence[int],
        cache_salt: str | None = None,
    ) -> bool:
        """Register a full block under its hash; False when another block already holds that hash."""
        if not self.enable_caching or block.block_hash is not None:
            return False
        if block_hash in self._cached:
            return False
        block.block_hash = block_hash
        block.parent_hash = parent_hash
        block.token_ids = tuple(token_ids)
        block.cache_salt = cache_salt
        self._cached[block_hash] = block
        self.events.stored([block_hash])
        return True

    def reset_prefix_cache(self) -> bool:
        """Forget every cached hash; refused (False) while any block is still referenced."""
        if self.num_used_blocks:
            return False
        for block in list(self._cached.values()):
            self._uncache(block)
        self.events.cleared()
        return True

    def _uncache(self, block: Block) -> None:
        self._cached.pop(block.block_hash, None)
        block.block_hash = None
        block.parent_hash = None
        block.token_ids = ()
        block.cache_salt = None
