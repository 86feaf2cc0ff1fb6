"""The bookkeeping every tier shares: which entries exist, their sizes, tenants and last use.

Entries are kept least recently used first, so budget, quota and time-to-live decisions are the
same for memory and files; the tier only removes what the ledger names.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from engine.kv.block_hash import BlockHash
from engine.kv.tiers.protocol import Retention, TierStats


@dataclass
class Entry:
    tenant: str
    nbytes: int
    last_used: float


class Ledger:
    def __init__(self, retention: Retention) -> None:
        self.retention = retention
        self.entries: OrderedDict[BlockHash, Entry] = OrderedDict()
        self.bytes_held = 0
        self.bytes_by_tenant: dict[str, int] = {}

    def fill(self, stats: TierStats) -> TierStats:
        """``stats`` with what the ledger holds now (entries, bytes, bytes per tenant)."""
        stats.entries, stats.bytes_held = len(self.entries), self.bytes_held
        stats.bytes_by_tenant = dict(self.bytes_by_tenant)
        return stats

    def __contains__(self, block_hash: BlockHash) -> bool:
        return block_hash in self.entries

    def fits(self, nbytes: int) -> bool:
        quota = self.retention.tenant_quota_bytes
        return nbytes <= self.retention.budget_bytes and (quota is None or nbytes <= quota)

    def add(self, block_hash: BlockHash, tenant: str, nbytes: int, now: float) -> None:
        self.remove(block_hash)
        self.entries[block_hash] = Entry(tenant, nbytes, now)
        self.bytes_held += nbytes
        self.bytes_by_tenant[tenant] = self.bytes_by_tenant.get(tenant, 0) + nbytes

    def touch(self, block_hash: BlockHash, now: float) -> None:
        self.entries[block_hash].last_used = now
        self.entries.move_to_end(block_hash)

    def remove(self, block_hash: BlockHash) -> Entry | None:
        entry = self.entries.pop(block_hash, None)
        if entry is not None:
            self.bytes_held -= entry.nbytes
            left = self.bytes_by_tenant[entry.tenant] - entry.nbytes
            if left:
                self.bytes_by_tenant[entry.tenant] = left
            else:
                del self.bytes_by_tenant[entry.tenant]
        return entry

    def is_expired(self, block_hash: BlockHash, now: float) -> bool:
        return now - self.entries[block_hash].last_used >= self.retention.ttl_s

    def expired(self, now: float) -> list[BlockHash]:
        return [h for h, e in self.entries.items() if now - e.last_used >= self.retention.ttl_s]

    def victims_for(self, tenant: str, nbytes: int) -> list[BlockHash]:
        """Entries to drop, least recently used first, so ``nbytes`` more of ``tenant`` fit both
        the tenant's quota (its own entries go) and the budget (anyone's go)."""
        out: list[BlockHash] = []
        quota = self.retention.tenant_quota_bytes
        tenant_bytes = self.bytes_by_tenant.get(tenant, 0)
        if quota is not None and tenant_bytes + nbytes > quota:
            for block_hash, entry in self.entries.items():
                if tenant_bytes + nbytes <= quota:
                    break
                if entry.tenant == tenant:
                    out.append(block_hash)
                    tenant_bytes -= entry.nbytes
        held = self.bytes_held - sum(self.entries[h].nbytes for h in out)
        chosen = set(out)
        for block_hash, entry in self.entries.items():
            if held + nbytes <= self.retention.budget_bytes:
                break
            if block_hash not in chosen:
                out.append(block_hash)
                held -= entry.nbytes
        return out
