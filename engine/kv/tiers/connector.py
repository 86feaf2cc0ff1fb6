"""The KV manager's view of the tiers: offload an evicted block, find and onload a prefix's blocks.

Offload is write-through: an evicted block goes to every tier that lacks it (host memory for speed,
disk and the shared store so it survives a restart and serves the other replicas). Onload looks in
each tier from the fastest, checks the record's parent and tokens, copies it into the device block
and copies a lower tier's hit into the tiers above it. A block is written to a tier before that
tier can return it. On an accelerator an onload only queues its copies on the device's stream: the
step that attends over the blocks is queued after them, so it cannot read a block before its copy
has landed, and the host goes on scheduling and launching that step while the copies run. Pure
Python: the device side is a ``BlockCopier`` (``block_io.BlockIO`` on torch).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from engine.kv.block_hash import BlockHash
from engine.kv.events import KVEventLog
from engine.kv.tiers.protocol import KVTier, ReadsAhead, ReportsChanges, TierStats, tenant_of
from engine.kv.tiers.record import decode_record, encode_record

SWEEP_EVERY_S = 300.0  # expired entries also go when touched; the sweep frees what nobody asks for


class CopiesInFlight(Protocol):
    def seconds(self) -> float | None:
        """How long an onload's copies took, None while the device still runs them."""
        ...


class BlockCopier(Protocol):
    def read_block(self, block_id: int) -> bytearray: ...

    def write_block(self, block_id: int, kv) -> bool:
        """May only queue the copy; ``finish`` ends the onload."""
        ...

    def finish(self) -> CopiesInFlight | None:
        """After this, work queued on the device sees the pages hold what was written. None: the
        copies are done on return (the onload's wall time is its time); else a handle that tells
        how long they took once they have."""
        ...


class EvictedBlock(Protocol):
    block_id: int
    block_hash: BlockHash | None
    parent_hash: BlockHash | None
    token_ids: tuple[int, ...]
    cache_salt: str | None


@dataclass
class TierCounters:
    hit_tokens: int = 0  # prompt tokens onloaded from this tier
    offloads: int = 0  # blocks written
    onloads: int = 0  # blocks read into the device
    onload_bytes: int = 0  # KV bytes of those blocks (counted once their copies have finished)
    # Time of the onloads, each call's split over its tiers by their bytes: onload_bytes / onload_s
    # is a tier's onload bandwidth. On an accelerator, from the device starting the first copy to
    # it finishing the last (tier reads and checks in between included); else the call's wall time.
    onload_s: float = 0.0


class TieredKV:
    def __init__(self, tiers: Sequence[KVTier], copier: BlockCopier, block_size: int) -> None:
        if not tiers:
            raise ValueError("TieredKV needs at least one tier")
        self.tiers = list(tiers)
        self.copier = copier
        self.block_size = block_size
        self.counters = {tier.name: TierCounters() for tier in self.tiers}
        self._next_sweep = 0.0  # the first offload sweeps what a restart found expired
        # Onloads whose copies may still run: (handle, wall time of the call, bytes per tier).
        self._in_flight: list[tuple[CopiesInFlight | None, float, dict[str, int]]] = []

    def report_to(self, events: KVEventLog) -> None:
        """Every change of every tier's contents goes to ``events`` under the tier's name, starting
        with what the tiers hold now (a disk tier's files from before a restart)."""
        for tier in self.tiers:
            if isinstance(tier, ReportsChanges):
                tier.on_stored = partial(events.stored, tier=tier.name)
                tier.on_removed = partial(events.removed, tier=tier.name)
                events.stored(tier.held(), tier.name)

    def offload(self, block: EvictedBlock, durable_only: bool = False) -> None:
        """Called as the pool hands a cached block out for reuse, while its pages still hold its KV.
        ``durable_only``: only to the tiers that outlive the process (at shutdown, not host memory)."""
        if block.block_hash is None:
            return
        if time.monotonic() >= self._next_sweep:
            self.expire()
            self._next_sweep = time.monotonic() + SWEEP_EVERY_S
        targets = [
            tier
            for tier in self.tiers
            if not (durable_only and not getattr(tier, "durable", True))
            and not tier.contains(block.block_hash)
        ]
        if not targets:
            return
        record = encode_record(block.parent_hash, block.token_ids, self.copier.read_block(block.block_id))
        for tier in targets:
            if tier.put(block.block_hash, record, tenant_of(block.cache_salt)):
                self.counters[tier.name].offloads += 1

    def count_prefix(self, hashes: Sequence[BlockHash]) -> int:
        """How many leading ``hashes`` some tier holds (a cheap look, no payload read)."""
        for n, block_hash in enumerate(hashes):
            if not any(tier.contains(block_hash) for tier in self.tiers):
                return n
        return len(hashes)

    def onload(
        self,
        hashes: Sequence[BlockHash],
        parents: Sequence[BlockHash | None],
        token_chunks: Sequence[Sequence[int]],
        block_ids: Sequence[int],
        cache_salt: str | None = None,
    ) -> int:
        """Copy the blocks named by ``hashes`` into ``block_ids``, in order, stopping at the first one
        no tier can supply intact; returns how many were written (all of them finished)."""
        started = time.perf_counter()
        moved: dict[str, int] = {}
        loaded, tenant = len(hashes), tenant_of(cache_salt)
        self._announce(hashes)
        try:
            for n, (block_hash, parent, tokens, block_id) in enumerate(
                zip(hashes, parents, token_chunks, block_ids, strict=True)
            ):
                if not self._onload_one(block_hash, parent, tuple(tokens), block_id, tenant, moved):
                    loaded = n
                    break
        finally:
            copies = self.copier.finish()
            self._announce(())  # what this onload did not take is not read for nothing
        if moved:
            self._in_flight.append((copies, time.perf_counter() - started, moved))
        self._settle()
        return loaded

    def _settle(self) -> None:
        """Count the time of every onload whose copies have finished, split over its tiers by bytes."""
        running = []
        for copies, wall, moved in self._in_flight:
            seconds = wall if copies is None else copies.seconds()
            if seconds is None:
                running.append((copies, wall, moved))
                continue
            total = sum(moved.values())
            for name, nbytes in moved.items():
                self.counters[name].onload_bytes += nbytes
                self.counters[name].onload_s += seconds * nbytes / total
        self._in_flight = running

    def _announce(self, hashes: Sequence[BlockHash]) -> None:
        """Tell each tier that reads ahead which of ``hashes`` it will be asked for: those no
        faster tier holds."""
        for depth, tier in enumerate(self.tiers):
            if isinstance(tier, ReadsAhead):
                upper = self.tiers[:depth]
                tier.prefetch([h for h in hashes if not any(u.contains(h) for u in upper)])

    def _onload_one(
        self,
        block_hash: BlockHash,
        parent,
        tokens: tuple[int, ...],
        block_id: int,
        tenant: str,
        moved: dict[str, int],
    ) -> bool:
        for depth, tier in enumerate(self.tiers):
            payload = tier.get(block_hash)
            if payload is None:
                continue
            record = decode_record(payload)
            if record is None or record.parent_hash != parent or record.token_ids != tokens:
                continue  # a colliding hash or a foreign record: not this block
            if not self.copier.write_block(block_id, record.kv):
                continue
            counters = self.counters[tier.name]
            counters.onloads += 1
            counters.hit_tokens += len(tokens)
            moved[tier.name] = moved.get(tier.name, 0) + record.kv.nbytes
            for upper in self.tiers[:depth]:  # promote: the next hit comes from the fastest tier
                store = getattr(upper, "adopt", upper.put)  # the read buffer itself, where it can
                store(block_hash, payload, tenant)
            return True
        return False

    def expire(self) -> int:
        return sum(tier.expire() for tier in self.tiers)

    def stats(self) -> dict[str, tuple[TierStats, TierCounters]]:
        """Onload bytes and seconds count once the copies have finished."""
        self._settle()
        return {tier.name: (tier.stats(), self.counters[tier.name]) for tier in self.tiers}
