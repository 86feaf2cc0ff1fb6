"""Prometheus metrics of the gateway, on a registry of its own (never the process-global one)."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# Routing decisions take microseconds; the buckets must resolve well below the 1 ms target.
_DECISION_BUCKETS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 5e-2)
_BLOCK_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        m = self._metric
        self.requests = m(
            Counter,
            "requests",
            "Requests forwarded, by model, replica, policy and outcome",
            ["model", "replica", "policy", "outcome"],
        )
        self.decision_seconds = m(
            Histogram,
            "routing_decision_seconds",
            "Time to pick a replica (hash chain, prefix match, policy), tokenization excluded",
            ["policy"],
            buckets=_DECISION_BUCKETS,
        )
        self.decisions = m(
            Counter,
            "routing_decisions",
            "Routing decisions by policy and reason (prefix, load, no_prefix, session, ...)",
            ["policy", "reason"],
        )
        self.tokenize_seconds = m(
            Histogram,
            "tokenize_seconds",
            "Time to render and tokenize a request for prefix matching",
            buckets=_DECISION_BUCKETS,
        )
        self.upstream_errors = m(
            Counter,
            "upstream_errors",
            "Upstream failures, by replica and kind (connect, timeout, status_5xx, draining, stream)",
            ["replica", "kind"],
        )
        self.retries = m(Counter, "retries", "Requests retried on another replica", ["model"])
        self.prefill_phases = m(
            Counter,
            "prefill_phases",
            "Prefill phases of disaggregated requests by outcome: ok, or why the decode replica "
            "prefilled the prompt itself (busy, no_replica, connect, timeout, status_5xx, http_4xx, ...)",
            ["model", "outcome"],
        )
        self.matched_blocks = m(
            Histogram,
            "matched_prefix_blocks",
            "Leading KV blocks of a request already cached on the chosen replica",
            ["model"],
            buckets=_BLOCK_BUCKETS,
        )
        self.in_flight = m(Gauge, "in_flight", "Requests in flight per replica", ["replica"])
        self.ejected = m(
            Gauge, "replica_ejected", "1 while the replica's circuit breaker is open", ["replica"]
        )
        self.ejections = m(
            Counter, "ejections", "Times a replica was ejected by its circuit breaker", ["replica"]
        )
        self.kv_resyncs = m(Counter, "kv_resyncs", "Full KV snapshot resyncs per replica", ["replica"])
        self.kv_blocks = m(
            Gauge, "kv_indexed_blocks", "Blocks in the gateway's index per replica", ["replica"]
        )

    def _metric(self, kind: type, name: str, documentation: str, labels: Sequence[str] = (), **options):
        """A metric ``chassis_gateway_<name>`` on this gateway's own registry."""
        return kind(f"chassis_gateway_{name}", documentation, labels, registry=self.registry, **options)

    def render(self) -> bytes:
        return generate_latest(self.registry)
