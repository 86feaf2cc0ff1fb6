"""Routing policies: given the routable replicas of a deployment and a request, pick one.

Policies see plain ``Replica`` objects and a ``RoutingRequest``; they never do I/O, so a decision
costs microseconds and is tested without any server.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gateway.config import PolicyConfig
from gateway.kv_index import KVIndex, PrefixMatch
from gateway.replica import Replica


@dataclass
class RoutingRequest:
    session_key: str | None = None
    # Block-hash chain of the rendered prompt; computed lazily, only cache_aware asks for it.
    chain_factory: Callable[[], Sequence[bytes]] | None = None


@dataclass(frozen=True)
class Decision:
    replica: Replica
    matched_blocks: int = 0
    total_blocks: int = 0
    reason: str = ""
    pending_mark: int | None = None  # the pool's pending-prefix mark, released when the request ends


class Policy:
    name = "base"

    def __init__(self, config: PolicyConfig) -> None:
        self.config = config

    def choose(self, candidates: Sequence[Replica], request: RoutingRequest) -> Decision:
        raise NotImplementedError

    def least_loaded(self, candidates: Sequence[Replica]) -> Replica:
        weight = self.config.kv_usage_weight
        return min(candidates, key=lambda r: (r.load(weight), r.requests_served))


class RoundRobin(Policy):
    name = "round_robin"

    def __init__(self, config: PolicyConfig) -> None:
        super().__init__(config)
        self._next = 0

    def choose(self, candidates: Sequence[Replica], request: RoutingRequest) -> Decision:
        ordered = sorted(candidates, key=lambda r: r.replica_id)
        replica = ordered[self._next % len(ordered)]
        self._next += 1
        return Decision(replica, reason="round_robin")


class LeastLoad(Policy):
    name = "least_load"

    def choose(self, candidates: Sequence[Replica], request: RoutingRequest) -> Decision:
        return Decision(self.least_loaded(candidates), reason="least_load")


class CacheAware(Policy):
    """Longest cached prefix wins, unless its replica is busier than the least loaded by > margin.
    A prefix's length is weighted by the KV tier each block sits in (device, host, disk, shared)."""

    name = "cache_aware"

    def __init__(self, config: PolicyConfig, index: KVIndex) -> None:
        super().__init__(config)
        self.index = index
        self.weights = config.weights()

    def choose(self, candidates: Sequence[Replica], request: RoutingRequest) -> Decision:
        chain = request.chain_factory() if request.chain_factory else ()
        weight = self.config.kv_usage_weight
        loads = {r.replica_id: r.load(weight) for r in candidates}
        least = min(candidates, key=lambda r: (loads[r.replica_id], r.requests_served))
        if not chain:
            return Decision(least, reason="no_prefix")
        match: PrefixMatch = self.index.match(chain, loads, self.weights)
        best_score = match.best_score()
        if best_score == 0:
            return Decision(least, 0, match.total_blocks, reason="no_prefix")
        # Only replicas within the margin of the least loaded one may take it; among those, the
        # best-scored prefix, then the lightest load. A hot prefix that has spilled over to several
        # replicas is thereby spread across all of them instead of melting the first.
        ceiling = loads[least.replica_id] + self.config.load_margin
        allowed = [r for r in candidates if loads[r.replica_id] <= ceiling]
        best = max(
            allowed,
            key=lambda r: (match.scores.get(r.replica_id, 0.0), -loads[r.replica_id], -r.requests_served),
        )
        score = match.scores.get(best.replica_id, 0.0)
        reason = "prefix" if score == best_score else "load"
        return Decision(best, match.matched.get(best.replica_id, 0), match.total_blocks, reason=reason)


class Session(Policy):
    """Sticky by session key through rendezvous hashing: when the chosen replica goes away, only
    its sessions move, and they come back when it returns. Requests without a key use least load."""

    name = "session"

    def choose(self, candidates: Sequence[Replica], request: RoutingRequest) -> Decision:
        if not request.session_key:
            return Decision(self.least_loaded(candidates), reason="no_session")
        key = request.session_key.encode("utf-8", "surrogatepass")  # any string a client sent

        def weight(replica: Replica) -> bytes:
            return hashlib.blake2b(key + b"\x00" + replica.replica_id.encode(), digest_size=8).digest()

        return Decision(max(candidates, key=weight), reason="session")


def make_policy(config: PolicyConfig, index: KVIndex) -> Policy:
    if config.name == "cache_aware":
        return CacheAware(config, index)
    return {"round_robin": RoundRobin, "least_load": LeastLoad, "session": Session}[config.name](config)
