"""A bounded, sequenced log of prefix-cache changes that routers (the gateway) replay.

Every block stored into or removed from the prefix cache appends an event with a monotonically
increasing sequence number. A consumer keeps the last seq it saw and asks for what came after; when
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


class KVEventLog:
    def __init__(self, capacity: int = 10_000) -> None:
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, got {capacity}")
        self._events: deque[dict] = deque(maxlen=capacity)
        self._last_seq = 0
        self._cached: dict[str, None] = {}  # insertion-ordered set of hex hashes now cached
        self._lock = threading.Lock()

    @property
    def last_seq(self) -> int:
        with self._lock:
            return self._last_seq

    def stored(self, hashes: Iterable[BlockHash]) -> None:
        hexes = [h.hex() for h in hashes]
        if hexes:
            with self._lock:
                for h in hexes:
                    self._cached[h] = None
                self._append(STORED, hexes)

    def removed(self, hashes: Iterable[BlockHash]) -> None:
        hexes = [h.hex() for h in hashes]
        if hexes:
            with self._lock:
                for h in hexes:
                    self._cached.pop(h, None)
                self._append(REMOVED, hexes)

    def cleared(self) -> None:
        with self._lock:
            self._cached.clear()
            self._append(CLEARED, [])

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
        with self._lock:
            return self._last_seq, list(self._cached)

    def _append(self, kind: str, hexes: list[str]) -> None:
        self._last_seq += 1
        self._events.append({"seq": self._last_seq, "type": kind, "hashes": hexes})
