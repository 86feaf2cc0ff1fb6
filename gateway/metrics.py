"""Prometheus metrics of the gateway, on a registry of its own (never the process-global one)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# Routing decisions take microseconds; the buckets must resolve well below the 1 ms target.
_DECISION_BUCKETS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 5e-2)
_BLOCK_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "chassis_gateway_requests",
            "Requests forwarded, by model, replica, policy and outcome",
            ["model", "replica", "policy", "outcome"],
            registry=r,
        )
        self.decision_seconds = Histogram(
            "chassis_gateway_routing_decision_seconds",
            "Time to pick a replica (hash chain, prefix match, policy), tokenization excluded",
            ["policy"],
            buckets=_DECISION_BUCKETS,
            registry=r,
        )
        self.decisions = Counter(
            "chassis_gateway_routing_decisions",
            "Routing decisions by policy and reason (prefix, load, no_prefix, session, ...)",
            ["policy", "reason"],
            registry=r,
        )
        self.tokenize_seconds = Histogram(
            "chassis_gateway_tokenize_seconds",
            "Time to render and tokenize a request for prefix matching",
            buckets=_DECISION_BUCKETS,
            registry=r,
        )
        self.upstream_errors = Counter(
            "chassis_gateway_upstream_errors",
            "Upstream failures, by replica and kind (connect, timeout, status_5xx, draining, stream)",
            ["replica", "kind"],
            registry=r,
        )
        self.retries = Counter(
            "chassis_gateway_retries", "Requests retried on another replica", ["model"], registry=r
        )
        self.matched_blocks = Histogram(
            "chassis_gateway_matched_prefix_blocks",
            "Leading KV blocks of a request already cached on the chosen replica",
            ["model"],
            buckets=_BLOCK_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge(
            "chassis_gateway_in_flight", "Requests in flight per replica", ["replica"], registry=r
        )
        self.ejected = Gauge(
            "chassis_gateway_replica_ejected",
            "1 while the replica's circuit breaker is open",
            ["replica"],
            registry=r,
        )
        self.ejections = Counter(
            "chassis_gateway_ejections",
            "Times a replica was ejected by its circuit breaker",
            ["replica"],
            registry=r,
        )
        self.kv_resyncs = Counter(
            "chassis_gateway_kv_resyncs", "Full KV snapshot resyncs per replica", ["replica"], registry=r
        )
        self.kv_blocks = Gauge(
            "chassis_gateway_kv_indexed_blocks",
            "Blocks in the gateway's index per replica",
            ["replica"],
            registry=r,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
