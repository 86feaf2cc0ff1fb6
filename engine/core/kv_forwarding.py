"""The KV event feed across the process boundary, with the sequence numbers intact.

The core's log records every change since the front end last took them (however many the ring has
dropped meanwhile); the front end replays them, in order, into a log of the same capacity that
started empty like the core's. Both logs number events the same way, so the mirror's ``/kv/events``
and ``/kv/snapshot`` are the ones the core would have answered.
"""

from __future__ import annotations

from collections.abc import Iterable

from engine.core.messages import KVChange
from engine.kv.block_hash import BlockHash
from engine.kv.events import CLEARED, DEVICE, REMOVED, STORED, KVEventLog


class ForwardingKVEventLog(KVEventLog):
    """The core's log. Written and taken from the core's loop thread only."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self._unsent: list[KVChange] = []

    def stored(self, hashes: Iterable[BlockHash], tier: str = DEVICE) -> None:
        hashes = list(hashes)
        super().stored(hashes, tier)
        if hashes:
            self._unsent.append((STORED, hashes, tier))

    def removed(self, hashes: Iterable[BlockHash], tier: str = DEVICE) -> None:
        hashes = list(hashes)
        super().removed(hashes, tier)
        if hashes:
            self._unsent.append((REMOVED, hashes, tier))

    def cleared(self, tier: str = DEVICE) -> None:
        super().cleared(tier)
        self._unsent.append((CLEARED, [], tier))

    def take(self) -> list[KVChange]:
        """The changes since the last call."""
        unsent, self._unsent = self._unsent, []
        return unsent


def replay(log: KVEventLog, changes: list[KVChange]) -> None:
    for kind, hashes, tier in changes:
        if kind == STORED:
            log.stored(hashes, tier)
        elif kind == REMOVED:
            log.removed(hashes, tier)
        else:
            log.cleared(tier)
