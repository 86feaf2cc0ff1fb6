"""The queries of vLLM's published Grafana dashboard, as data: panel title -> its targets' PromQL.

Source: vllm-project/vllm, examples/online_serving/prometheus_grafana/grafana.json (commit
004f771f3a6b49597546b05c7d83686d1e121fa0), the dashboard vLLM's docs tell operators to import.
Grafana's variables stay as written there: ``$model_name`` and ``$__rate_interval``.
"""

from __future__ import annotations

SOURCE = "vllm-project/vllm examples/online_serving/prometheus_grafana/grafana.json @ 004f771f"

_M = '{model_name="$model_name"}'


def _latency(metric: str) -> list[str]:
    """The dashboard's four quantiles and mean of one latency histogram."""
    bucket = f'{metric}_bucket{{model_name="$model_name"}}'
    quantiles = [
        f"histogram_quantile({q}, sum by(le) (rate({bucket}[$__rate_interval])))"
        for q in ("0.99", "0.95", "0.9", "0.5")
    ]
    mean = f"rate({metric}_sum{_M}[$__rate_interval])\n/\nrate({metric}_count{_M}[$__rate_interval])"
    return [*quantiles, mean]


PANELS: dict[str, list[str]] = {
    "E2E Request Latency": _latency("vllm:e2e_request_latency_seconds"),
    "Token Throughput": [
        f"rate(vllm:prompt_tokens_total{_M}[$__rate_interval])",
        f"rate(vllm:generation_tokens_total{_M}[$__rate_interval])",
    ],
    "Time Per Output Token Latency": _latency("vllm:time_per_output_token_seconds"),
    "Scheduler State": [f"vllm:num_requests_running{_M}", f"vllm:num_requests_waiting{_M}"],
    "Time To First Token Latency": _latency("vllm:time_to_first_token_seconds"),
    "Cache Utilization": [f"vllm:gpu_cache_usage_perc{_M}"],
    "Request Prompt Length": [
        f"sum by(le) (increase(vllm:request_prompt_tokens_bucket{_M}[$__rate_interval]))"
    ],
    "Request Generation Length": [
        f"sum by(le) (increase(vllm:request_generation_tokens_bucket{_M}[$__rate_interval]))"
    ],
    "Finish Reason": [
        f"sum by(finished_reason) (increase(vllm:request_success_total{_M}[$__rate_interval]))"
    ],
    "Queue Time": [f"rate(vllm:request_queue_time_seconds_sum{_M}[$__rate_interval])"],
    "Requests Prefill and Decode Time": [
        f"rate(vllm:request_prefill_time_seconds_sum{_M}[$__rate_interval])",
        f"rate(vllm:request_decode_time_seconds_sum{_M}[$__rate_interval])",
    ],
    "Max Generation Token in Sequence Group": [
        f"rate(vllm:request_max_num_generation_tokens_sum{_M}[$__rate_interval])"
    ],
}
