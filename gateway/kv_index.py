"""Which replica caches which KV blocks, and how long a prefix each one already holds.

One dict maps a block hash to a bitmask of the replicas that hold it, so matching a request's hash
chain against every replica at once costs one dict lookup per block, not one per block and replica.
Each replica also keeps its own set, used to clear or resync it and to compare with its snapshot.

Blocks are kept per tier: the device pool, and below it host memory, disk and the shared store,
from which a replica onloads a block at a copy's cost instead of recomputing it (KV events name the
tier; an event without one is the device's). A replica matches a request's chain as long as some
tier of it holds each block, and scores each block by the weight of the cheapest tier holding it.

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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

DEVICE = "device"
TIERS = (DEVICE, "host", "disk", "shared")
# What a block held in each tier is worth to a request, relative to one on the device: onloading
# costs a copy (a recompute would cost a forward pass).
DEFAULT_TIER_WEIGHTS: Mapping[str, float] = {DEVICE: 1.0, "host": 0.8, "disk": 0.5, "shared": 0.5}


@dataclass(frozen=True)
class PrefixMatch:
    """Leading blocks of one request that each replica holds in some tier (replica id -> number of
    blocks), and their weighted score (each block weighs its cheapest tier's weight)."""

    total_blocks: int
    matched: dict[str, int]
    scores: dict[str, float] = field(default_factory=dict)

    def best(self) -> int:
        return max(self.matched.values(), default=0)

    def best_score(self) -> float:
        return max(self.scores.values(), default=0.0)


class KVIndex:
    def __init__(
        self, pending_ttl_s: float = 2.0, clock=time.monotonic, pending_max_s: float = 600.0
    ) -> None:
        self._slots: dict[str, int] = {}
        self._free_slots: list[int] = []
        self._blocks: dict[str, dict[bytes, int]] = {tier: {} for tier in TIERS}
        self._by_replica: dict[str, dict[str, set[bytes]]] = {}
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
        self._by_replica[replica_id] = {tier: set() for tier in TIERS}

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
    def store(self, replica_id: str, hashes: Iterable[bytes], tier: str = DEVICE) -> None:
        blocks = self._table(tier)
        bit = self._bit(replica_id)
        held = self._by_replica[replica_id][tier]
        for block_hash in hashes:
            if block_hash not in held:
                held.add(block_hash)
                blocks[block_hash] = blocks.get(block_hash, 0) | bit

    def remove(self, replica_id: str, hashes: Iterable[bytes], tier: str = DEVICE) -> None:
        blocks = self._table(tier)
        bit = self._bit(replica_id)
        held = self._by_replica[replica_id][tier]
        for block_hash in hashes:
            if block_hash in held:
                held.discard(block_hash)
                self._drop_bit(blocks, block_hash, bit)

    def clear(self, replica_id: str, tier: str | None = None) -> None:
        """Forget what the replica holds in ``tier``, or in every tier."""
        bit = self._bit(replica_id)
        for name in TIERS if tier is None else (tier,):
            blocks, held = self._table(name), self._by_replica[replica_id][name]
            for block_hash in held:
                self._drop_bit(blocks, block_hash, bit)
            held.clear()

    def replace(
        self, replica_id: str, hashes: Iterable[bytes], tiers: Mapping[str, Iterable[bytes]] | None = None
    ) -> None:
        """Resync: the replica holds exactly ``hashes`` on the device and ``tiers``' in the others."""
        self.clear(replica_id)
        self.store(replica_id, hashes)
        for tier, held in (tiers or {}).items():
            self.store(replica_id, held, tier)

    def hashes(self, replica_id: str, tier: str = DEVICE) -> set[bytes]:
        return set(self._by_replica.get(replica_id, {}).get(tier, ()))

    def size(self, replica_id: str, tier: str = DEVICE) -> int:
        return len(self._by_replica.get(replica_id, {}).get(tier, ()))

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
    def match(
        self,
        chain: Sequence[bytes],
        replica_ids: Iterable[str],
        weights: Mapping[str, float] = DEFAULT_TIER_WEIGHTS,
    ) -> PrefixMatch:
        """For each replica, the number of leading blocks of ``chain`` some tier of it holds (stop at
        the first block none does) and their score: each block weighs its cheapest tier's weight.
        Pending prefixes count as on the device."""
        self._expire_pending()
        wanted = {rid: self._slots[rid] for rid in replica_ids if rid in self._slots}
        matched = dict.fromkeys(wanted, 0)
        scores = dict.fromkeys(wanted, 0.0)
        # The device first (it carries the pending marks), then each tier that holds anything,
        # cheapest first (highest weight): a block counts in the first one that holds it.
        lower = sorted((t for t in TIERS[1:] if self._blocks[t]), key=lambda t: -weights[t])
        order = sorted([DEVICE, *lower], key=lambda t: -weights[t])
        tables = [self._blocks[t] for t in order]
        device = order.index(DEVICE)
        pending = self._pending

        def credit(layers: tuple[int, ...], run: int) -> None:
            """``run`` blocks in a row where each replica held its block in the same tier."""
            if not run:
                return
            for tier, mask in zip(order, layers, strict=True):
                for rid, slot in wanted.items():
                    if (mask >> slot) & 1:
                        matched[rid] += run
                        scores[rid] += weights[tier] * run

        alive = 0
        for slot in wanted.values():
            alive |= 1 << slot
        layers, run = (), 0
        for block_hash in chain:
            left, now = alive, []
            for i, table in enumerate(tables):
                held = table.get(block_hash, 0)
                if i == device:
                    held |= pending.get(block_hash, 0)
                now.append(left & held)
                left &= ~held
            alive &= ~left
            if not alive:
                break
            if tuple(now) != layers:
                credit(layers, run)
                layers, run = tuple(now), 0
            run += 1
        credit(layers, run)
        return PrefixMatch(total_blocks=len(chain), matched=matched, scores=scores)

    # -- helpers --------------------------------------------------------------------------------
    def _table(self, tier: str) -> dict[bytes, int]:
        table = self._blocks.get(tier)
        if table is None:
            raise ValueError(f"unknown KV tier {tier!r}; known: {', '.join(TIERS)}")
        return table

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
