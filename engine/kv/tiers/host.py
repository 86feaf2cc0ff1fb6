"""Host-memory tier: payload copies in buffers from an allocator, least recently used out first.

The engine passes an allocator of pinned (page-locked) buffers on CUDA, so onloading is a direct
DMA; elsewhere plain ``bytearray``s. A buffer is filled before the entry is published, so a reader
never sees a partial payload.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from engine.kv.block_hash import BlockHash
from engine.kv.tiers.ledger import Ledger
from engine.kv.tiers.protocol import Clock, ReportsChanges, Retention, TierStats

Buffer = bytearray | memoryview


class HostMemoryTier(ReportsChanges):
    durable = False  # gone with the process: a shutdown does not write to it

    def __init__(
        self,
        retention: Retention,
        allocate: Callable[[int], Buffer] = bytearray,
        clock: Clock = time.time,
        name: str = "host",
    ) -> None:
        self.name = name
        self._ledger = Ledger(retention)
        self._buffers: dict[BlockHash, Buffer] = {}
        self._allocate = allocate
        self._clock = clock
        self._stats = TierStats()

    def put(self, block_hash: BlockHash, payload, tenant: str = "") -> bool:
        return self._store(block_hash, memoryview(payload).cast("B"), tenant, copy=True)

    def _store(self, block_hash: BlockHash, data: memoryview, tenant: str, copy: bool) -> bool:
        if not self._ledger.fits(data.nbytes):
            return False
        self._drop(block_hash)  # replaced: reported stored again below, not removed
        victims = self._ledger.victims_for(tenant, data.nbytes)
        self._discard(victims)
        self._stats.evictions += len(victims)
        buffer = data
        if copy:
            buffer = self._allocate(data.nbytes)
            memoryview(buffer).cast("B")[:] = data
        self._buffers[block_hash] = buffer
        self._ledger.add(block_hash, tenant, data.nbytes, self._clock())
        self._stats.puts += 1
        self._report_stored([block_hash])
        return True

    def adopt(self, block_hash: BlockHash, payload, tenant: str = "") -> bool:
        """``put`` without the copy: the tier keeps ``payload`` itself, which nobody may write
        again (a lower tier's freshly read buffer, from this tier's kind of allocator)."""
        return self._store(block_hash, memoryview(payload).cast("B"), tenant, copy=False)

    def get(self, block_hash: BlockHash) -> memoryview | None:
        if not self._live(block_hash):
            self._stats.misses += 1
            return None
        self._ledger.touch(block_hash, self._clock())
        self._stats.hits += 1
        return memoryview(self._buffers[block_hash]).cast("B")

    def contains(self, block_hash: BlockHash) -> bool:
        return self._live(block_hash)

    def expire(self) -> int:
        expired = self._ledger.expired(self._clock())
        self._discard(expired)
        self._stats.expirations += len(expired)
        return len(expired)

    def stats(self) -> TierStats:
        return self._ledger.fill(self._stats)

    def clear(self) -> None:
        """Drop every entry (a benchmark's "not in host memory" case; evictions are not counted)."""
        self._discard(list(self._buffers))

    def _live(self, block_hash: BlockHash) -> bool:
        if block_hash not in self._ledger:
            return False
        if self._ledger.is_expired(block_hash, self._clock()):
            self._discard([block_hash])
            self._stats.expirations += 1
            return False
        return True

    def _discard(self, hashes: list[BlockHash]) -> None:
        """Drop entries and report them removed: every removal but a replacement comes here."""
        for block_hash in hashes:
            self._drop(block_hash)
        self._report_removed(hashes)

    def _drop(self, block_hash: BlockHash) -> None:
        self._ledger.remove(block_hash)
        self._buffers.pop(block_hash, None)
