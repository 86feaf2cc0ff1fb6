"""The engine dashboard: latency, throughput, prefix cache, load and speculative decoding of every
``chassis serve`` replica.

Metric names are vLLM's (engine/server/metrics.py), so the same panels also work on vLLM replicas.
"""

from __future__ import annotations

from dashboards.panels import Panel, Query, Row, dashboard, histogram_quantile, query_variable

UID = "chassis-engine"
SELECTOR = 'model_name=~"$model_name", instance=~"$instance"'
RATE = "[$__rate_interval]"


def _quantiles(metric: str, by: str = "model_name") -> tuple[Query, ...]:
    return tuple(
        Query(histogram_quantile(q, metric, by, SELECTOR), f"p{int(q * 100)} {{{{{by}}}}}")
        for q in (0.5, 0.99)
    )


def _rate(metric: str, by: str = "model_name") -> str:
    return f"sum by ({by}) (rate({metric}{{{SELECTOR}}}{RATE}))"


def _busy(work: str) -> str:
    return f'sum by (model_name) (rate(chassis_engine_busy_seconds_total{{work="{work}", {SELECTOR}}}{RATE}))'


def expert_parallel_row() -> Row:
    """Replicas started with --ep: how evenly the routed tokens land on the ranks' experts."""
    return Row(
        "Expert parallel (replicas started with --ep)",
        [
            Panel(
                "Load imbalance",
                (
                    Query(
                        f"max by (model_name, layer) (chassis_ep_imbalance_ratio{{{SELECTOR}}})",
                        "{{model_name}} {{layer}}",
                    ),
                ),
                unit="short",
                description="Per MoE layer, the busiest rank's routed tokens over the mean rank's (1 is even); "
                "the load balancer (eplb_interval_steps) moves and copies experts to bring it down.",
            ),
            Panel(
                "Routed tokens/s per rank",
                (
                    Query(
                        _rate("chassis_ep_rank_tokens_total", "model_name, rank"),
                        "{{model_name}} rank {{rank}}",
                    ),
                ),
                unit="short",
                description="Tokens the rank's experts processed, all MoE layers together.",
            ),
            Panel(
                "Load balancer moves",
                (
                    Query(
                        f"sum by (model_name) (increase(chassis_ep_rebalances_total{{{SELECTOR}}}{RATE}))",
                        "{{model_name}}",
                    ),
                ),
                unit="short",
                description="Placements applied (experts moved or copied between ranks) per MoE layer, summed.",
            ),
        ],
    )


def cost_row() -> Row:
    """Spend from the price the operator set (accelerator_hour_price) and the accelerators held; each
    kind of token carries the share of spend that its work took of the engine's busy time: prompt
    rows computed (uncached input), generated rows (output), onloads from the KV tiers (cached input;
    a hit in the device pool costs no step time)."""
    accelerators = f"sum by (model_name) (chassis_accelerators{{{SELECTOR}}})"
    per_hour = f"sum by (model_name) (chassis_accelerators{{{SELECTOR}}} * chassis_accelerator_hour_price{{{SELECTOR}}})"
    onload = f"({_rate('chassis_kv_tier_onload_seconds_total')} or {accelerators} * 0)"
    busy = f"({_busy('prefill')} + {_busy('decode')} + {onload})"
    hits = _rate("vllm:prefix_cache_hits_total")
    uncached = f"({_rate('vllm:prompt_tokens_total')} - {hits})"

    def per_million(work: str, tokens: str) -> str:
        return f"{per_hour} / 3600 * {work} / {busy} / {tokens} * 1e6"

    return Row(
        "Cost (price per accelerator-hour: the accelerator_hour_price engine option)",
        [
            Panel(
                "Spend per hour",
                (Query(per_hour, "{{model_name}}"),),
                unit="currencyUSD",
                description="Accelerators held times the price per accelerator-hour the operator set.",
            ),
            Panel(
                "Tokens/s per accelerator",
                (
                    Query(
                        f"{_rate('vllm:generation_tokens_total')} / {accelerators}", "output {{model_name}}"
                    ),
                    Query(f"{_rate('vllm:prompt_tokens_total')} / {accelerators}", "input {{model_name}}"),
                ),
                unit="short",
            ),
            Panel(
                "Cost per million tokens",
                (
                    Query(per_million(_busy("prefill"), uncached), "input, uncached {{model_name}}"),
                    Query(per_million(onload, hits), "input, cached {{model_name}}"),
                    Query(
                        per_million(_busy("decode"), _rate("vllm:generation_tokens_total")),
                        "output {{model_name}}",
                    ),
                ),
                unit="currencyUSD",
                description="Spend over the window shared by the engine's busy time: prompt rows computed, "
                "onloads from the KV tiers, generated rows; idle time is shared the same way. A cached "
                "token served from the device pool costs no step time.",
            ),
        ],
    )


def build() -> dict:
    latency = Row(
        "Latency",
        [
            Panel(
                "Time to first token (p50 / p99)",
                _quantiles("vllm:time_to_first_token_seconds"),
                unit="s",
                description="From arrival to the first generated token, queueing and prefill included.",
            ),
            Panel(
                "Inter-token latency (p50 / p99)",
                _quantiles("vllm:inter_token_latency_seconds"),
                unit="s",
                description="Gap between consecutive output tokens of one request (decode speed).",
            ),
            Panel(
                "End-to-end request latency (p50 / p99)",
                _quantiles("vllm:e2e_request_latency_seconds"),
                unit="s",
            ),
            Panel(
                "Queue time (p50 / p99)",
                _quantiles("vllm:request_queue_time_seconds"),
                unit="s",
                description="Time a request waited before its first scheduling step.",
            ),
        ],
    )
    throughput = Row(
        "Throughput",
        [
            Panel(
                "Output tokens/s",
                (Query(_rate("vllm:generation_tokens_total"), "{{model_name}}"),),
                unit="short",
            ),
            Panel(
                "Prompt tokens/s",
                (Query(_rate("vllm:prompt_tokens_total"), "{{model_name}}"),),
                unit="short",
                description="Prefill tokens processed, prefix-cache hits included.",
            ),
            Panel(
                "Finished requests/s by reason",
                (
                    Query(
                        _rate("vllm:request_success_total", "model_name, finished_reason"),
                        "{{model_name}} {{finished_reason}}",
                    ),
                ),  # fmt: skip
                unit="reqps",
            ),
            Panel(
                "Preemptions/s",
                (Query(_rate("vllm:num_preemptions_total", "instance"), "{{instance}}"),),
                unit="short",
                description="Requests evicted because KV blocks ran out; they recompute later.",
            ),
        ],
    )
    cache = Row(
        "KV cache and load",
        [
            Panel(
                "Prefix-cache hit rate",
                (
                    Query(
                        f"{_rate('vllm:prefix_cache_hits_total')} / {_rate('vllm:prefix_cache_queries_total')}",
                        "{{model_name}}",
                    ),
                ),
                unit="percentunit",
                max_value=1,
                description="Prompt tokens served from cached KV blocks over prompt tokens looked up.",
            ),
            Panel(
                "KV-cache usage",
                (
                    Query(f"max by (instance) (vllm:kv_cache_usage_perc{{{SELECTOR}}})", "{{instance}}"),
                    Query(
                        f"max by (instance) (chassis_kv_window_usage_perc{{{SELECTOR}}})",
                        "{{instance}} sliding-window pool",
                    ),
                ),
                unit="percentunit",
                max_value=1,
                description="The fuller KV pool's share in use; models whose sliding-window layers keep only "
                "their windows (sliding_window_kv) also show that pool of their own.",
            ),
            Panel(
                "Running requests",
                (Query(f"sum by (instance) (vllm:num_requests_running{{{SELECTOR}}})", "{{instance}}"),),
            ),
            Panel(
                "Waiting requests",
                (Query(f"sum by (instance) (vllm:num_requests_waiting{{{SELECTOR}}})", "{{instance}}"),),
            ),
        ],
    )
    tiers = Row(
        "KV tiers (host memory, disk, shared store)",
        [
            Panel(
                "Prompt tokens served per KV tier",
                (
                    Query(
                        f"{_rate('chassis_kv_tier_hit_tokens_total', 'model_name, tier')}"
                        f" / ignoring (tier) group_left {_rate('vllm:prompt_tokens_total')}",
                        "{{model_name}} {{tier}}",
                    ),
                ),
                unit="percentunit",
                max_value=1,
                description="Prompt tokens onloaded from each tier below the device pool over all prompt "
                "tokens; the device pool's own hits are the prefix-cache hit rate.",
            ),
            Panel(
                "Onload bandwidth per tier",
                (
                    Query(
                        f"{_rate('chassis_kv_tier_onload_bytes_total', 'tier')}"
                        f" / {_rate('chassis_kv_tier_onload_seconds_total', 'tier')}",
                        "{{tier}}",
                    ),
                ),
                unit="Bps",
                description="KV bytes read back into the device pool per second spent onloading them.",
            ),
            Panel(
                "Offloaded and onloaded blocks/s per tier",
                (
                    Query(_rate("chassis_kv_tier_offloads_total", "tier"), "offload {{tier}}"),
                    Query(_rate("chassis_kv_tier_onloads_total", "tier"), "onload {{tier}}"),
                ),
                unit="short",
                description="Offloads: blocks written as the device pool evicts them. Onloads: blocks read on a hit.",
            ),
            Panel(
                "Bytes held per tier",
                (
                    Query(
                        f"sum by (instance, tier) (chassis_kv_tier_bytes{{{SELECTOR}}})",
                        "{{instance}} {{tier}}",
                    ),
                ),
                unit="bytes",
                description="A shared tier's bytes are the same store seen by each replica.",
            ),
        ],
    )
    drafts = _rate("vllm:spec_decode_num_drafts_total")
    accepted = _rate("vllm:spec_decode_num_accepted_tokens_total")
    speculation = Row(
        "Speculative decoding",
        [
            Panel(
                "Draft acceptance rate",
                (
                    Query(
                        f"{accepted} / {_rate('vllm:spec_decode_num_draft_tokens_total')}", "{{model_name}}"
                    ),
                ),
                unit="percentunit",
                max_value=1,
                description="Accepted draft tokens over verified draft tokens (replicas with speculation on).",
            ),
            Panel(
                "Mean accepted length",
                (Query(f"1 + {accepted} / {drafts}", "{{model_name}}"),),
                unit="short",
                description="Tokens a speculating request emits per step: its accepted draft tokens plus one.",
            ),
            Panel(
                "Acceptance by draft position",
                (
                    Query(
                        f"{_rate('vllm:spec_decode_num_accepted_tokens_per_pos_total', 'model_name, position')}"
                        f" / ignoring (position) group_left {drafts}",
                        "{{model_name}} position {{position}}",
                    ),
                ),
                unit="percentunit",
                max_value=1,
                description="Share of drafts whose token at this position was accepted.",
            ),
            Panel(
                "Draft tokens/s",
                (Query(_rate("vllm:spec_decode_num_draft_tokens_total"), "{{model_name}}"),),
                unit="short",
                description="Zero while the confidence scheduler finds speculation does not pay (compute-bound).",
            ),
        ],
    )
    variables = [
        query_variable("model_name", "Model", "label_values(vllm:num_requests_running, model_name)"),
        query_variable(
            "instance",
            "Replica",
            'label_values(vllm:num_requests_running{model_name=~"$model_name"}, instance)',
        ),
    ]
    return dashboard(
        UID,
        "Chassis engine",
        "Engine replicas (chassis serve): TTFT, inter-token latency, tokens/s, prefix cache, KV usage, load, "
        "KV tiers, cost per million tokens, speculative decoding, expert-parallel load balance.",
        [latency, throughput, cache, tiers, cost_row(), speculation, expert_parallel_row()],
        variables,
    )
