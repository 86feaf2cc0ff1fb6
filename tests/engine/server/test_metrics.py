"""vLLM metric names, labelled by model, moving as requests finish and as engine stats change."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from engine.server.metrics import ServerMetrics


@dataclass
class Stats:
    num_running: int = 0
    num_waiting: int = 0
    kv_usage: float = 0.0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    num_preemptions: int = 0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    expert_tokens: dict[str, list[int]] = field(default_factory=dict)
    expert_parallel: dict[str, dict] = field(default_factory=dict)
    spec_decode_num_drafts: int = 0
    spec_decode_num_draft_tokens: int = 0
    spec_decode_num_accepted_tokens: int = 0
    spec_decode_num_accepted_tokens_per_pos: list[int] = field(default_factory=list)
    kv_tiers: dict = field(default_factory=dict)
    busy_seconds: dict = field(default_factory=dict)
    window_blocks_total: int = 0
    window_kv_usage: float = 0.0


@dataclass
class Times:
    arrival_time: float
    first_scheduled_time: float
    first_token_time: float
    finished_time: float


def samples(metrics: ServerMetrics) -> dict[tuple[str, tuple], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_names_labels_and_values():
    stats = Stats()
    metrics = ServerMetrics("tiny", lambda: stats)
    model = (("model_name", "tiny"),)
    before = samples(metrics)
    for name in (
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:num_preemptions_total",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
    ):
        assert before[(name, model)] == 0
    assert before[("vllm:request_success_total", (("finished_reason", "stop"), ("model_name", "tiny")))] == 0

    stats.prompt_tokens, stats.generation_tokens, stats.num_running, stats.kv_usage = 12, 5, 1, 0.25
    metrics.request_finished(Times(10.0, 10.5, 11.0, 13.0), "stop")
    metrics.inter_token_latency.observe(0.02)
    after = samples(metrics)
    assert after[("vllm:prompt_tokens_total", model)] == 12
    assert after[("vllm:num_requests_running", model)] == 1
    assert after[("vllm:kv_cache_usage_perc", model)] == 0.25
    assert after[("vllm:request_success_total", (("finished_reason", "stop"), ("model_name", "tiny")))] == 1
    assert after[("vllm:time_to_first_token_seconds_sum", model)] == 1.0
    assert after[("vllm:request_queue_time_seconds_sum", model)] == 0.5
    assert after[("vllm:e2e_request_latency_seconds_sum", model)] == 3.0
    assert after[("vllm:inter_token_latency_seconds_count", model)] == 1


def test_engine_series_absent_while_loading():
    metrics = ServerMetrics("tiny", lambda: None)
    names = {name for name, _ in samples(metrics)}
    assert "vllm:num_requests_running" not in names
    assert "vllm:time_to_first_token_seconds_count" in names


def test_tokens_per_expert_of_each_moe_layer():
    stats = Stats()
    metrics = ServerMetrics("tiny", lambda: stats)
    assert not any(name.startswith("chassis_moe") for name, _ in samples(metrics))  # a dense model
    stats.expert_tokens = {"layers.0.mlp": [3, 0, 5], "layers.1.mlp": [1, 7, 0]}
    after = samples(metrics)

    def tokens(layer: str, expert: int) -> float:
        labels = (("expert", str(expert)), ("layer", layer), ("model_name", "tiny"))
        return after[("chassis_moe_expert_tokens_total", labels)]

    assert [tokens("layers.0.mlp", e) for e in range(3)] == [3, 0, 5]
    assert [tokens("layers.1.mlp", e) for e in range(3)] == [1, 7, 0]


def test_speculative_decoding_counters_with_vllms_names():
    stats = Stats()
    metrics = ServerMetrics("tiny", lambda: stats)
    assert not any(name.startswith("vllm:spec_decode") for name, _ in samples(metrics))  # speculation off
    stats.spec_decode_num_drafts, stats.spec_decode_num_draft_tokens = 4, 12
    stats.spec_decode_num_accepted_tokens, stats.spec_decode_num_accepted_tokens_per_pos = 7, [4, 2, 1]
    after = samples(metrics)
    model = (("model_name", "tiny"),)
    assert after[("vllm:spec_decode_num_drafts_total", model)] == 4
    assert after[("vllm:spec_decode_num_draft_tokens_total", model)] == 12
    assert after[("vllm:spec_decode_num_accepted_tokens_total", model)] == 7
    per_pos = [
        after[("vllm:spec_decode_num_accepted_tokens_per_pos_total", (*model, ("position", str(p))))]
        for p in range(3)
    ]
    assert per_pos == [4, 2, 1]


def test_per_request_histograms_and_the_dashboards_older_names():
    stats = Stats(kv_usage=0.5)
    metrics = ServerMetrics("tiny", lambda: stats, max_model_len=4096)
    model = (("model_name", "tiny"),)
    metrics.request_finished(Times(10.0, 10.5, 11.0, 13.0), "length", prompt_tokens=7, generation_tokens=5)
    metrics.call_finished(2, 16, [5, 3])
    metrics.inter_token_latency.observe(0.04)
    after = samples(metrics)
    assert after[("vllm:request_prompt_tokens_sum", model)] == 7
    assert after[("vllm:request_generation_tokens_sum", model)] == 5
    assert after[("vllm:request_prefill_time_seconds_sum", model)] == 0.5  # scheduled -> first token
    assert after[("vllm:request_decode_time_seconds_sum", model)] == 2.0  # first token -> finished
    assert after[("vllm:request_inference_time_seconds_sum", model)] == 2.5
    assert after[("vllm:request_time_per_output_token_seconds_sum", model)] == 0.5  # 2 s over 4 gaps
    assert after[("vllm:request_max_num_generation_tokens_sum", model)] == 5
    assert after[("vllm:request_params_n_sum", model)] == 2
    assert after[("vllm:request_params_max_tokens_sum", model)] == 16
    # One gap feeds vLLM's current name and the one its published dashboard reads.
    assert after[("vllm:inter_token_latency_seconds_sum", model)] == 0.04
    assert after[("vllm:time_per_output_token_seconds_sum", model)] == 0.04
    assert after[("vllm:gpu_cache_usage_perc", model)] == after[("vllm:kv_cache_usage_perc", model)] == 0.5
    # Token-count buckets are vLLM's 1-2-5 series up to the context length.
    les = sorted(
        float(dict(labels)["le"]) for name, labels in after if name == "vllm:request_prompt_tokens_bucket"
    )
    assert les[:6] == [1, 2, 5, 10, 20, 50] and les[-2:] == [2000, math.inf]


def test_the_sliding_window_pool_only_where_there_is_one():
    stats = Stats(kv_usage=0.25)
    metrics = ServerMetrics("tiny", lambda: stats)
    model = (("model_name", "tiny"),)
    assert not any(name == "chassis_kv_window_usage_perc" for name, _ in samples(metrics))
    stats.window_blocks_total, stats.window_kv_usage, stats.kv_usage = 400, 0.75, 0.75
    after = samples(metrics)
    assert after[("chassis_kv_window_usage_perc", model)] == 0.75
    assert after[("vllm:kv_cache_usage_perc", model)] == 0.75  # the fuller pool's, for the gateway
