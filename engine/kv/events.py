"""A bounded, sequenced log of prefix-cache changes that routers (the gateway) replay.

Every block stored into or removed from a KV tier -- the device pool, or below it host memory, disk
and the shared store (engine/kv/tiers/) -- appends an event with a monotonically increasing sequence
number and the tier's name. A consumer keeps the last seq it saw and asks for what came after; when
that seq has fallen out of the ring it gets None and must resync from ``snapshot()``. Written by the
engine thread, read from the server's event loop: every method takes the lock.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable

from engine.kv.block_hash import BlockHash

STORED = "stored"
REMOVED = "removed"
CLEARED = "cleared"
DEVICE = "device"  # the device pool's tier; events without a tier (older replicas) are this one's


class KVEventLog:
    def __init__(self, capacity: int = 10_000) -> None:
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, got {capacity}")
        self._events: deque[dict] = deque(maxlen=capacity)
        self._last_seq = 0
        # tier -> insertion-ordered set of the hex hashes it holds now
        self._cached: dict[str, dict[str, None]] = {DEVICE: {}}
        self._lock = threading.Lock()

    @property
    def last_seq(self) -> int:
        with self._lock:
            return self._last_seq

    def stored(self, hashes: Iterable[BlockHash], tier: str = DEVICE) -> None:
        hexes = [h.hex() for h in hashes]
        if hexes:
            with self._lock:
                held = self._cached.setdefault(tier, {})
                for h in hexes:
                    held[h] = None
                self._append(STORED, hexes, tier)

    def removed(self, hashes: Iterable[BlockHash], tier: str = DEVICE) -> None:
        hexes = [h.hex() for h in hashes]
        if hexes:
            with self._lock:
                held = self._cached.setdefault(tier, {})
                for h in hexes:
                    held.pop(h, None)
                self._append(REMOVED, hexes, tier)

    def cleared(self, tier: str = DEVICE) -> None:
        with self._lock:
            self._cached[tier] = {}
            self._append(CLEARED, [], tier)

    def events_since(self, seq: int) -> list[dict] | None:
        """Events with a sequence number greater than ``seq``; None when some of them were dropped."""
        with self._lock:
            if seq >= self._last_seq:
                return []
            oldest = self._events[0]["seq"] if self._events else self._last_seq + 1
            if seq + 1 < oldest:
                return None
            return [dict(e, hashes=list(e["hashes"])) for e in self._events if e["seq"] > seq]

    def snapshot(self) -> tuple[int, list[str]]:
        """The last seq and the device pool's hashes."""
        last_seq, tiers = self.tier_snapshot()
        return last_seq, tiers[DEVICE]

    def tier_snapshot(self) -> tuple[int, dict[str, list[str]]]:
        """The last seq and every tier's hashes (the device's always, other tiers once they had any)."""
        with self._lock:
            return self._last_seq, {tier: list(held) for tier, held in self._cached.items()}

    def _append(self, kind: str, hexes: list[str], tier: str) -> None:
        self._last_seq += 1
        self._events.append({"seq": self._last_seq, "type": kind, "hashes": hexes, "tier": tier})
