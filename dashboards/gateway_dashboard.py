"""The gateway dashboard: where requests go, how fast routing decides, and what fails upstream.

Metric names come from gateway/metrics.py (prometheus_client adds ``_total`` to counters).
"""

from __future__ import annotations

from dashboards.panels import Panel, Query, Row, dashboard, histogram_quantile, query_variable

UID = "chassis-gateway"
RATE = "[$__rate_interval]"
MODEL = 'model=~"$model"'


def build() -> dict:
    traffic = Row(
        "Traffic",
        [
            Panel(
                "Requests/s by replica",
                (
                    Query(
                        f"sum by (replica) (rate(chassis_gateway_requests_total{{{MODEL}}}{RATE}))",
                        "{{replica}}",
                    ),
                ),
                unit="reqps",
            ),
            Panel(
                "Requests/s by policy",
                (
                    Query(
                        f"sum by (policy) (rate(chassis_gateway_requests_total{{{MODEL}}}{RATE}))",
                        "{{policy}}",
                    ),
                ),
                unit="reqps",
            ),
            Panel(
                "Requests/s by outcome",
                (
                    Query(
                        f"sum by (outcome) (rate(chassis_gateway_requests_total{{{MODEL}}}{RATE}))",
                        "{{outcome}}",
                    ),
                ),
                unit="reqps",
            ),
            Panel(
                "In-flight requests by replica",
                (Query("sum by (replica) (chassis_gateway_in_flight)", "{{replica}}"),),
            ),
        ],
    )
    routing = Row(
        "Routing",
        [
            Panel(
                "Routing decision time (p50 / p99)",
                tuple(
                    Query(
                        histogram_quantile(q, "chassis_gateway_routing_decision_seconds", "policy", ""),
                        f"p{int(q * 100)} {{{{policy}}}}",
                    )
                    for q in (0.5, 0.99)
                ),
                unit="s",
                description="Hash chain, prefix match and policy; tokenization excluded.",
            ),
            Panel(
                "Routing decisions/s by reason",
                (
                    Query(
                        f"sum by (policy, reason) (rate(chassis_gateway_routing_decisions_total{RATE}))",
                        "{{policy}} {{reason}}",
                    ),
                ),  # fmt: skip
            ),
            Panel(
                "Matched prefix blocks (p50 / p99)",
                tuple(
                    Query(
                        histogram_quantile(q, "chassis_gateway_matched_prefix_blocks", "model", MODEL),
                        f"p{int(q * 100)} {{{{model}}}}",
                    )  # fmt: skip
                    for q in (0.5, 0.99)
                ),
                description="Leading KV blocks of a request already cached on the replica it went to.",
            ),
            Panel(
                "Tokenize time (p99)",
                (
                    Query(
                        histogram_quantile(0.99, "chassis_gateway_tokenize_seconds", "instance", ""),
                        "{{instance}}",
                    ),
                ),
                unit="s",
            ),
        ],
    )
    failures = Row(
        "Upstream failures",
        [
            Panel(
                "Upstream errors/s by replica and kind",
                (
                    Query(
                        f"sum by (replica, kind) (rate(chassis_gateway_upstream_errors_total{RATE}))",
                        "{{replica}} {{kind}}",
                    ),
                ),  # fmt: skip
            ),
            Panel(
                "Retries/s",
                (
                    Query(
                        f"sum by (model) (rate(chassis_gateway_retries_total{{{MODEL}}}{RATE}))", "{{model}}"
                    ),
                ),
            ),
            Panel(
                "Ejected replicas (circuit breaker open)",
                (Query("max by (replica) (chassis_gateway_replica_ejected)", "{{replica}}"),),
                max_value=1,
            ),
            Panel(
                "KV index blocks by replica",
                (Query("sum by (replica) (chassis_gateway_kv_indexed_blocks)", "{{replica}}"),),
                description="Blocks the gateway's prefix index holds per replica (fed by KV events).",
            ),
        ],
    )
    variables = [query_variable("model", "Model", "label_values(chassis_gateway_requests_total, model)")]
    return dashboard(
        UID,
        "Chassis gateway",
        "The gateway (chassis gateway): requests by replica and policy, routing time, upstream errors.",
        [traffic, routing, failures],
        variables,
    )
