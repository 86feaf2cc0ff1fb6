"""What every KV tier offers, whatever holds the bytes (memory, files, a shared store).

A tier maps a block hash to an opaque payload and keeps, per entry, the tenant that wrote it (the
cache salt; ``""`` without one) for quotas. Retention is the tier's own: a byte budget (least
recently used out first), a per-tenant quota and a time-to-live counted from an entry's last write
or hit. ``get`` never returns a payload it cannot vouch for: expired, corrupt or partly written
entries are misses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from engine.kv.block_hash import BlockHash

Clock = Callable[[], float]  # seconds; time.time by default, a fake one in tests


@dataclass(frozen=True)
class Retention:
    budget_bytes: int  # most bytes the tier holds
    ttl_s: float  # an entry unused this long is gone
    tenant_quota_bytes: int | None = None  # most bytes one tenant holds; None: only the budget

    def __post_init__(self) -> None:
        if self.budget_bytes <= 0:
            raise ValueError(f"a tier's byte budget must be positive, got {self.budget_bytes}")
        if self.ttl_s <= 0:
            raise ValueError(f"a tier's time-to-live must be positive, got {self.ttl_s}")
        if self.tenant_quota_bytes is not None and self.tenant_quota_bytes <= 0:
            raise ValueError(f"a tenant quota must be positive, got {self.tenant_quota_bytes}")


@dataclass
class TierStats:
    entries: int = 0
    bytes_held: int = 0
    puts: int = 0
    hits: int = 0  # get calls answered
    misses: int = 0
    evictions: int = 0  # budget and quota
    expirations: int = 0
    corrupt: int = 0  # entries found damaged and dropped
    bytes_by_tenant: dict[str, int] = field(default_factory=dict)


TierHook = Callable[[list[BlockHash]], None]


class ReportsChanges:
    """A tier's two hooks, set by the connector to feed the KV event log (engine/kv/events.py):
    called with the hashes the tier's index gained (a write, a file found) or lost (eviction, expiry,
    a damaged or vanished file, clear). A tier calls them wherever its index changes, not per read."""

    on_stored: TierHook | None = None
    on_removed: TierHook | None = None

    def held(self) -> list[BlockHash]:
        """Every hash the tier holds now (its ledger's)."""
        return list(self._ledger.entries)

    def _report_stored(self, hashes: list[BlockHash]) -> None:
        if hashes and self.on_stored is not None:
            self.on_stored(hashes)

    def _report_removed(self, hashes: list[BlockHash]) -> None:
        if hashes and self.on_removed is not None:
            self.on_removed(hashes)


@runtime_checkable
class KVTier(Protocol):
    name: str  # "host", "disk", "shared": the metrics label

    def put(self, block_hash: BlockHash, payload: bytes | bytearray | memoryview, tenant: str = "") -> bool:
        """Store a copy of ``payload``; False when it cannot (larger than the budget or the quota).
        The payload is readable by ``get`` only once ``put`` has returned."""
        ...

    def get(self, block_hash: BlockHash) -> memoryview | None:
        """The payload, or None (absent, expired, corrupt); a hit refreshes the entry's age."""
        ...

    def contains(self, block_hash: BlockHash) -> bool: ...

    def expire(self) -> int:
        """Drop every entry past its time-to-live; returns how many."""
        ...

    def stats(self) -> TierStats: ...


def tenant_of(cache_salt: str | None) -> str:
    return cache_salt or ""


@runtime_checkable
class ReadsAhead(Protocol):
    """A tier whose reads are slow enough to start early (files): an onload lists the blocks it
    will ``get`` from it, in order, and then an empty list when it is done."""

    def prefetch(self, hashes: Sequence[BlockHash]) -> None: ...
