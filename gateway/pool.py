"""One served model: its replicas, their KV index, its policy, and the routing decision."""

from __future__ import annotations

import dataclasses
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from gateway.chain import prompt_hash_chain
from gateway.config import BreakerConfig, ModelRoute
from gateway.kv_index import KVIndex
from gateway.metrics import GatewayMetrics
from gateway.policies import Decision, Policy, RoutingRequest, make_policy
from gateway.replica import Replica

_RESPONSE_ID = re.compile(rb'"id"\s*:\s*"(resp[-_][A-Za-z0-9_-]+)"')
RESPONSE_OWNERS_KEPT = 100_000


class ModelPool:
    def __init__(
        self,
        route: ModelRoute,
        breaker: BreakerConfig,
        metrics: GatewayMetrics,
        pending_ttl_s: float = 2.0,
        tokenizer_factory: Callable[[str], object] | None = None,
    ) -> None:
        self.name = route.name
        self.route = route
        self.breaker_config = breaker
        self.metrics = metrics
        self.index = KVIndex(pending_ttl_s=pending_ttl_s)
        self.policy: Policy = make_policy(route.policy, self.index)
        self.replicas: dict[str, Replica] = {}
        # Learned from the replicas' KV events; every replica of a deployment shares one block size.
        self.block_size: int | None = None
        self.tokenizer = None
        self._tokenizer_factory = tokenizer_factory
        # Responses-API ids -> the replica that stores them (previous_response_id lives there only).
        self.response_owner: OrderedDict[str, str] = OrderedDict()
        # The model's /v1/models card as a replica last described it (gateway/models.py).
        self.card: dict | None = None
        self.update(route)

    @property
    def wants_prefix(self) -> bool:
        return self.policy.name == "cache_aware"

    def update(self, route: ModelRoute) -> tuple[list[Replica], list[Replica]]:
        """Adopt a new route; keeps the state of replicas that stay. Returns (added, removed)."""
        if route.policy != self.route.policy:
            self.policy = make_policy(route.policy, self.index)
        if route.tokenizer != self.route.tokenizer or (self.tokenizer is None and route.tokenizer):
            self.tokenizer = None
            if route.tokenizer and self._tokenizer_factory is not None:
                self.tokenizer = self._tokenizer_factory(route.tokenizer)
        self.route = route
        wanted = {spec.replica_id: spec for spec in route.replicas}
        removed = [r for rid, r in self.replicas.items() if rid not in wanted or wanted[rid] != r.spec]
        for replica in removed:
            del self.replicas[replica.replica_id]
            self.index.remove_replica(replica.replica_id)
        added = []
        for rid, spec in wanted.items():
            if rid not in self.replicas:
                self.replicas[rid] = Replica.create(spec, self.breaker_config)
                self.index.add_replica(rid)
                added.append(self.replicas[rid])
        return added, removed

    def routable(self, exclude: Sequence[str] = ()) -> list[Replica]:
        return [r for r in self.replicas.values() if r.routable and r.replica_id not in exclude]

    @property
    def disaggregated(self) -> bool:
        """Prefill and decode replicas: each generation goes to a prefill replica, then a decode one."""
        roles = {spec.role for spec in self.route.replicas}
        return "prefill" in roles and bool(roles - {"prefill"})

    def serving(self, exclude: Sequence[str] = ()) -> list[Replica]:
        """Replicas that may serve a whole request: all but the prefill ones, unless none of the
        others is left, when a prefill replica (an engine like any other) serves rather than fail."""
        candidates = self.routable(exclude)
        others = [r for r in candidates if r.spec.role != "prefill"]
        return others or candidates

    def prefilling(self, exclude: Sequence[str] = ()) -> list[Replica]:
        return [r for r in self.routable(exclude) if r.spec.role == "prefill"]

    def prefill_saturated(self) -> bool:
        """Whether even the least loaded prefill replica is busier than the least loaded decode
        replica by more than the policy's load margin: a prefill phase would then wait in its queue
        longer than the decode replica takes to prefill, so the request skips it (as mixed)."""
        prefill = self.prefilling()
        decode = [r for r in self.routable() if r.spec.role != "prefill"]
        if not prefill or not decode:
            return False
        weight, margin = self.route.policy.kv_usage_weight, self.route.policy.load_margin
        return min(r.load(weight) for r in prefill) > min(r.load(weight) for r in decode) + margin

    def chain_for(self, token_ids: Sequence[int] | None, salt: bytes | None) -> list[bytes]:
        if not token_ids or not self.block_size:
            return []
        return prompt_hash_chain(token_ids, self.block_size, salt)

    def decide(
        self,
        token_ids: Sequence[int] | None = None,
        salt: bytes | None = None,
        session_key: str | None = None,
        exclude: Sequence[str] = (),
        previous_response_id: str | None = None,
        prefill: bool = False,
    ) -> Decision | None:
        """The replica for a request (``prefill``: for its prefill phase, among prefill replicas)."""
        start = time.perf_counter()
        candidates = self.prefilling(exclude) if prefill else self.serving(exclude)
        if not candidates:
            return None
        if previous_response_id:
            owned = self.decide_owner(previous_response_id, exclude)
            if owned is not None:
                return owned
        chain: list[bytes] = []

        def chain_factory() -> list[bytes]:
            chain.extend(self.chain_for(token_ids, salt))
            return chain

        decision = self.policy.choose(candidates, RoutingRequest(session_key, chain_factory))
        if chain:
            mark = self.index.mark_pending(decision.replica.replica_id, chain)
            decision = dataclasses.replace(decision, pending_mark=mark)
        self.metrics.decision_seconds.labels(self.policy.name).observe(time.perf_counter() - start)
        self.metrics.decisions.labels(self.policy.name, decision.reason).inc()
        if self.wants_prefix:
            self.metrics.matched_blocks.labels(self.name).observe(decision.matched_blocks)
        return decision

    def decide_owner(self, response_id: str, exclude: Sequence[str] = ()) -> Decision | None:
        """The replica that stores a Responses-API id (it lives there only), if it is routable."""
        owner = self.response_owner.get(response_id)
        for replica in self.routable(exclude):
            if replica.replica_id == owner:
                return Decision(replica, reason="response_owner")
        return None

    def decide_by_load(self, exclude: Sequence[str] = ()) -> Decision | None:
        """For requests whose answer no cache changes (token counting): the least loaded replica."""
        candidates = self.routable(exclude)
        if not candidates:
            return None
        return Decision(self.policy.least_loaded(candidates), reason="load_only")

    def request_ended(self, decision: Decision) -> None:
        self.index.release_pending(decision.pending_mark)

    def remember_response(self, first_chunk: bytes, replica_id: str) -> None:
        """Note which replica produced a Responses-API id (found in the first chunk it sent)."""
        found = _RESPONSE_ID.search(first_chunk)
        if found:
            self.response_owner[found.group(1).decode()] = replica_id
            while len(self.response_owner) > RESPONSE_OWNERS_KEPT:
                self.response_owner.popitem(last=False)

    def describe(self) -> dict:
        return {
            "model": self.name,
            "policy": self.policy.name,
            "block_size": self.block_size,
            "tokenizer": self.route.tokenizer,
            "disaggregated": self.disaggregated,
            "replicas": [
                dict(r.describe(), role=r.spec.role, kv_blocks=self.index.size(r.replica_id))
                for r in self.replicas.values()
            ],
        }
