"""Which replica caches which KV blocks, and how long a prefix each one already holds.

One dict maps a block hash to a bitmask of the replicas that hold it, so matching a request's hash
chain against every replica at once costs one dict lookup per block, not one per block and replica.
Each replica also keeps its own set, used to clear or resync it and to compare with its snapshot.

Besides the blocks the replicas confirmed through their KV events, a request's prefix is marked
*pending* on the replica it was routed to: the next request with the same prefix, arriving before
that replica's events do, then goes to the same place. The mark lasts as long as the request (its
prompt blocks are on the replica while it runs, however long it queues there) and a short TTL after
it ends, time for the replica's events to confirm them; a mark never released lapses after
``pending_max_s``.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class PrefixMatch:
    """Leading blocks of one request that each replica holds (replica id -> number of blocks)."""

    total_blocks: int
    matched: dict[str, int]

    def best(self) -> int:
        return max(self.matched.values(), default=0)


class KVIndex:
    def __init__(
        self, pending_ttl_s: float = 2.0, clock=time.monotonic, pending_max_s: float = 600.0
    ) -> None:
        self._slots: dict[str, int] = {}
        self._free_slots: list[int] = []
        self._blocks: dict[bytes, int] = {}
        self._by_replica: dict[str, set[bytes]] = {}
        self._pending: dict[bytes, int] = {}
        # mark id -> (expiry, replica bit, hashes); a heap of (expiry, id) finds the due ones, and
        # entries whose mark was released early or dropped are skipped when they surface.
        self._marks: dict[int, tuple[float, int, tuple[bytes, ...]]] = {}
        self._mark_heap: list[tuple[float, int]] = []
        self._mark_ids = itertools.count(1)
        self._pending_ttl_s = pending_ttl_s
        self._pending_max_s = pending_max_s
        self._clock = clock

    # -- replicas -------------------------------------------------------------------------------
    def add_replica(self, replica_id: str) -> None:
        if replica_id in self._slots:
            return
        slot = self._free_slots.pop() if self._free_slots else len(self._slots)
        self._slots[replica_id] = slot
        self._by_replica[replica_id] = set()

    def remove_replica(self, replica_id: str) -> None:
        if replica_id not in self._slots:
            return
        self.clear(replica_id)
        bit = 1 << self._slots[replica_id]
        for block_hash in [h for h, mask in self._pending.items() if mask & bit]:
            self._drop_pending_bit(block_hash, bit)
        for mark in [m for m, (_, b, _) in self._marks.items() if b == bit]:
            del self._marks[mark]
        self._free_slots.append(self._slots.pop(replica_id))
        del self._by_replica[replica_id]

    def replicas(self) -> list[str]:
        return list(self._slots)

    # -- confirmed blocks (from KV events) ------------------------------------------------------
    def store(self, replica_id: str, hashes: Iterable[bytes]) -> None:
        bit = self._bit(replica_id)
        held = self._by_replica[replica_id]
        blocks = self._blocks
        for block_hash in hashes:
            if block_hash not in held:
                held.add(block_hash)
                blocks[block_hash] = blocks.get(block_hash, 0) | bit

    def remove(self, replica_id: str, hashes: Iterable[bytes]) -> None:
        bit = self._bit(replica_id)
        held = self._by_replica[replica_id]
        for block_hash in hashes:
            if block_hash in held:
                held.discard(block_hash)
                self._drop_bit(self._blocks, block_hash, bit)

    def clear(self, replica_id: str) -> None:
        bit = self._bit(replica_id)
        held = self._by_replica[replica_id]
        for block_hash in held:
            self._drop_bit(self._blocks, block_hash, bit)
        held.clear()

    def replace(self, replica_id: str, hashes: Iterable[bytes]) -> None:
        """Resync: the replica holds exactly ``hashes`` now."""
        self.clear(replica_id)
        self.store(replica_id, hashes)

    def hashes(self, replica_id: str) -> set[bytes]:
        return set(self._by_replica.get(replica_id, ()))

    def size(self, replica_id: str) -> int:
        return len(self._by_replica.get(replica_id, ()))

    # -- pending prefixes (routed, not yet confirmed) -------------------------------------------
    def mark_pending(self, replica_id: str, hashes: Sequence[bytes]) -> int | None:
        """Count ``hashes`` as held by the replica until ``release_pending`` + TTL; returns the mark's id."""
        if not hashes or self._pending_ttl_s <= 0:
            return None
        bit = self._bit(replica_id)
        for block_hash in hashes:
            self._pending[block_hash] = self._pending.get(block_hash, 0) | bit
        mark = next(self._mark_ids)
        expiry = self._clock() + max(self._pending_max_s, self._pending_ttl_s)
        self._marks[mark] = (expiry, bit, tuple(hashes))
        heapq.heappush(self._mark_heap, (expiry, mark))
        return mark

    def release_pending(self, mark: int | None) -> None:
        """The request behind ``mark`` ended: its prefix stays pending for the TTL, then lapses."""
        entry = self._marks.get(mark) if mark is not None else None
        if entry is None:
            return
        expiry = min(entry[0], self._clock() + self._pending_ttl_s)
        self._marks[mark] = (expiry, entry[1], entry[2])
        heapq.heappush(self._mark_heap, (expiry, mark))

    def _expire_pending(self) -> None:
        now = self._clock()
        heap, marks = self._mark_heap, self._marks
        while heap and heap[0][0] <= now:
            _, mark = heapq.heappop(heap)
            entry = marks.get(mark)
            if entry is None or entry[0] > now:
                continue  # dropped, or surfaced under an expiry it no longer has
            del marks[mark]
            _, bit, hashes = entry
            for block_hash in hashes:
                self._drop_pending_bit(block_hash, bit)

    def _drop_pending_bit(self, block_hash: bytes, bit: int) -> None:
        self._drop_bit(self._pending, block_hash, bit)

    # -- matching -------------------------------------------------------------------------------
    def match(self, chain: Sequence[bytes], replica_ids: Iterable[str]) -> PrefixMatch:
        """For each replica, the number of leading blocks of ``chain`` it holds (stop at first miss)."""
        self._expire_pending()
        wanted = {rid: self._slots[rid] for rid in replica_ids if rid in self._slots}
        matched = dict.fromkeys(wanted, 0)
        alive = 0
        for slot in wanted.values():
            alive |= 1 << slot
        blocks, pending = self._blocks, self._pending
        depth = 0
        for block_hash in chain:
            now_alive = alive & (blocks.get(block_hash, 0) | pending.get(block_hash, 0))
            if now_alive != alive:
                # Replicas whose bit dropped out hold exactly ``depth`` leading blocks.
                for rid, slot in wanted.items():
                    if (alive >> slot) & 1 and not (now_alive >> slot) & 1:
                        matched[rid] = depth
                alive = now_alive
            if not alive:
                break
            depth += 1
        if alive:
            for rid, slot in wanted.items():
                if (alive >> slot) & 1:
                    matched[rid] = depth
        return PrefixMatch(total_blocks=len(chain), matched=matched)

    # -- helpers --------------------------------------------------------------------------------
    def _bit(self, replica_id: str) -> int:
        if replica_id not in self._slots:
            self.add_replica(replica_id)
        return 1 << self._slots[replica_id]

    @staticmethod
    def _drop_bit(table: dict[bytes, int], block_hash: bytes, bit: int) -> None:
        mask = table.get(block_hash, 0) & ~bit
        if mask:
            table[block_hash] = mask
        else:
            table.pop(block_hash, None)
