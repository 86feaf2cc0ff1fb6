"""Keep the gateway's KV index of one replica in step with the replica's own prefix cache.

The replica numbers its KV events; we poll ``/kv/events?after=SEQ``. Any doubt about having seen
every event -- HTTP 410 (our seq fell out of its log), a gap in the numbers, a replica whose
``last_seq`` went backwards or whose id changed (it restarted), or any error talking to it -- makes
the next poll a full resync from ``/kv/snapshot``.

Events and snapshots name the KV tier of their blocks ("device", "host", "disk", "shared"); an event
without one is the device's (older replicas). A tier this gateway does not know is skipped, not
resynced over: a newer replica's extra tier would otherwise resync it forever.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from gateway.kv_index import DEVICE, TIERS, KVIndex
from gateway.metrics import GatewayMetrics

log = logging.getLogger(__name__)


class ResyncNeeded(Exception):
    pass


@dataclass(eq=False)
class KVFollower:
    replica_id: str
    url: str
    index: KVIndex
    client: httpx.AsyncClient
    metrics: GatewayMetrics | None = None
    on_block_size: Callable[[int], object] | None = None  # told the replica's KV block size
    seq: int | None = field(default=None, init=False)  # None: next poll is a snapshot
    remote_id: str | None = field(default=None, init=False)
    resyncs: int = field(default=0, init=False)

    async def poll_once(self) -> int:
        """One poll (or resync); returns the number of events applied."""
        try:
            if self.seq is None:
                await self._resync()
                return 0
            return await self._events()
        except ResyncNeeded as why:
            log.info("kv index of %s: resync (%s)", self.replica_id, why)
            self.seq = None
            return 0
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            # Unreachable or nonsense: whatever it holds when it comes back is re-read in full.
            log.debug("kv events of %s failed: %r", self.replica_id, exc)
            self.seq = None
            raise

    async def run(self, interval_s: float) -> None:
        backoff = interval_s
        while True:
            try:
                applied = await self.poll_once()
                backoff = interval_s
                if applied == 0:
                    await asyncio.sleep(interval_s)
            except (httpx.HTTPError, ValueError, KeyError, TypeError):
                backoff = min(max(backoff * 2, interval_s), 2.0)
                await asyncio.sleep(backoff)

    async def _resync(self) -> None:
        response = await self.client.get(f"{self.url}/kv/snapshot")
        response.raise_for_status()
        data = response.json()
        self._check_header(data)
        lower = {
            tier: [bytes.fromhex(h) for h in hashes]
            for tier, hashes in (data.get("tiers") or {}).items()
            if self._known(tier)
        }
        self.index.replace(self.replica_id, [bytes.fromhex(h) for h in data["hashes"]], lower)
        self.seq = int(data["last_seq"])
        self.remote_id = data.get("replica_id")
        self.resyncs += 1
        if self.metrics is not None:
            self.metrics.kv_resyncs.labels(self.replica_id).inc()
            self.metrics.kv_blocks.labels(self.replica_id).set(self.index.size(self.replica_id))

    async def _events(self) -> int:
        response = await self.client.get(f"{self.url}/kv/events", params={"after": self.seq})
        if response.status_code == 410:
            raise ResyncNeeded("events fell out of the replica's log")
        response.raise_for_status()
        data = response.json()
        self._check_header(data)
        if data.get("replica_id") != self.remote_id:
            raise ResyncNeeded("replica id changed")
        if int(data["last_seq"]) < self.seq:
            raise ResyncNeeded("replica's sequence went backwards (restarted)")
        applied = 0
        for event in data["events"]:
            seq = int(event["seq"])
            if seq <= self.seq:
                continue
            if seq != self.seq + 1:
                raise ResyncNeeded(f"gap: expected seq {self.seq + 1}, got {seq}")
            self._apply(event)
            self.seq = seq
            applied += 1
        if applied and self.metrics is not None:
            self.metrics.kv_blocks.labels(self.replica_id).set(self.index.size(self.replica_id))
        return applied

    def _apply(self, event: dict) -> None:
        kind, tier = event["type"], event.get("tier", DEVICE)
        if kind not in ("stored", "removed", "cleared"):
            raise ResyncNeeded(f"unknown event type {kind!r}")
        if not self._known(tier):
            return
        if kind == "stored":
            self.index.store(self.replica_id, [bytes.fromhex(h) for h in event["hashes"]], tier)
        elif kind == "removed":
            self.index.remove(self.replica_id, [bytes.fromhex(h) for h in event["hashes"]], tier)
        else:
            self.index.clear(self.replica_id, tier)

    def _known(self, tier: str) -> bool:
        if tier in TIERS:
            return True
        log.debug("kv events of %s: skipping unknown tier %r", self.replica_id, tier)
        return False

    def _check_header(self, data: dict) -> None:
        block_size = data.get("block_size")
        if block_size is not None and self.on_block_size is not None:
            self.on_block_size(int(block_size))
