"""Prometheus metrics with vLLM's names and meanings, so existing vLLM dashboards work unchanged.

Latency histograms and finished-request counts are recorded by the server as requests end.
Token, prefix-cache and preemption counters and the load gauges are read from the engine's own
cumulative ``stats()`` at scrape time (a custom collector), so they can never drift from it.
Everything lives in a per-app ``CollectorRegistry``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

# vLLM's bucket boundaries (seconds).
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
               20.0, 40.0, 80.0)  # fmt: skip
REQUEST_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                   120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
PARAMS_N_BUCKETS = (1, 2, 5, 10, 20)
DEFAULT_MAX_MODEL_LEN = 131072  # token-count buckets when the replica does not say its context length
FINISHED_REASONS = ("stop", "length", "abort")
# Field names come from clients: the label takes this many distinct names, then "other".
IGNORED_FIELD_LABELS = 64
IGNORED_FIELD_MAX_LEN = 64


def buckets_1_2_5(limit: int) -> tuple[int, ...]:
    """1, 2, 5, 10, 20, 50, ... up to ``limit``: vLLM's buckets for token counts."""
    found, scale = [], 1
    while True:
        for step in (1, 2, 5):
            if step * scale > limit:
                return tuple(found)
            found.append(step * scale)
        scale *= 10


class _Observers:
    """One ``observe`` feeding several histograms: an inter-token gap goes to vLLM's current name and
    to the name its published dashboard still reads (``time_per_output_token_seconds``)."""

    def __init__(self, *children) -> None:
        self._children = children

    def observe(self, value: float) -> None:
        for child in self._children:
            child.observe(value)


# Per KV tier (engine/kv/tiers/): metric name, help, EngineStats.kv_tiers field, family type.
KV_TIER_METRICS = (
    (
        "chassis_kv_tier_hit_tokens",
        "Prompt tokens onloaded from a KV tier instead of recomputed.",
        "hit_tokens",
        CounterMetricFamily,
    ),
    (
        "chassis_kv_tier_offloads",
        "KV blocks written to a tier (evicted from the device pool).",
        "offloads",
        CounterMetricFamily,
    ),
    (
        "chassis_kv_tier_onloads",
        "KV blocks read from a tier into the device pool.",
        "onloads",
        CounterMetricFamily,
    ),
    (
        "chassis_kv_tier_onload_bytes",
        "KV bytes read from a tier into the device pool.",
        "onload_bytes",
        CounterMetricFamily,
    ),
    (
        "chassis_kv_tier_onload_seconds",
        "Seconds spent onloading KV blocks from a tier (onload bytes over this: its bandwidth).",
        "onload_seconds",
        CounterMetricFamily,
    ),
    ("chassis_kv_tier_bytes", "Bytes a KV tier holds.", "bytes_held", GaugeMetricFamily),
    ("chassis_kv_tier_blocks", "KV blocks a tier holds.", "entries", GaugeMetricFamily),
)


class _EngineStatsCollector(Collector):
    def __init__(self, model_name: str, stats: Callable[[], Any | None]):
        self._model_name = model_name
        self._stats = stats

    def collect(self):
        stats = self._stats()
        if stats is None:  # engine still loading
            return
        labels = [self._model_name]

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            family = CounterMetricFamily(name, doc, labels=["model_name"])
            family.add_metric(labels, value)
            return family

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, doc, labels=["model_name"])
            family.add_metric(labels, value)
            return family

        yield counter("vllm:prompt_tokens", "Number of prefill tokens processed.", stats.prompt_tokens)
        yield counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", stats.generation_tokens
        )
        yield counter("vllm:num_preemptions", "Cumulative number of preemptions.", stats.num_preemptions)
        yield counter(
            "vllm:prefix_cache_queries", "Prefix cache queries, in tokens.", stats.prefix_cache_queries
        )
        yield counter("vllm:prefix_cache_hits", "Prefix cache hits, in tokens.", stats.prefix_cache_hits)
        yield gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.", stats.num_running
        )
        yield gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", stats.num_waiting
        )
        yield gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", stats.kv_usage)
        yield gauge(  # the older name, which vLLM's published Grafana dashboard still reads
            "vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", stats.kv_usage
        )
        if stats.window_blocks_total:  # sliding-window layers keep their windows in a pool of their own
            yield gauge(
                "chassis_kv_window_usage_perc",
                "Usage of the sliding-window layers' own KV pool. 1 means 100 percent usage.",
                stats.window_kv_usage,
            )
        if stats.spec_decode_num_accepted_tokens_per_pos:  # speculative decoding is on
            yield counter(
                "vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", stats.spec_decode_num_drafts
            )
            yield counter(
                "vllm:spec_decode_num_draft_tokens",
                "Number of draft tokens.",
                stats.spec_decode_num_draft_tokens,
            )
            yield counter(
                "vllm:spec_decode_num_accepted_tokens",
                "Number of accepted tokens.",
                stats.spec_decode_num_accepted_tokens,
            )
            per_pos = CounterMetricFamily(
                "vllm:spec_decode_num_accepted_tokens_per_pos",
                "Accepted tokens per draft position.",
                labels=["model_name", "position"],
            )
            for position, count in enumerate(stats.spec_decode_num_accepted_tokens_per_pos):
                per_pos.add_metric([self._model_name, str(position)], count)
            yield per_pos
        if stats.expert_tokens:  # a mixture-of-experts model: its load balance per layer
            experts = CounterMetricFamily(
                "chassis_moe_expert_tokens",
                "Tokens routed to each expert of each mixture-of-experts layer.",
                labels=["model_name", "layer", "expert"],
            )
            for layer, counts in stats.expert_tokens.items():
                for expert, count in enumerate(counts):
                    experts.add_metric([self._model_name, layer, str(expert)], count)
            yield experts
        if stats.expert_parallel:  # experts split over ranks (engine/distributed/expert_parallel.py)
            yield from self._expert_parallel_families(stats.expert_parallel)
        if stats.kv_tiers:  # KV tiers below the device pool (engine/kv/tiers/)
            yield from self._kv_tier_families(stats.kv_tiers)
        busy = CounterMetricFamily(
            "chassis_engine_busy_seconds",
            "Step time spent on prompt rows (work=prefill) and generated rows (work=decode), each step "
            "shared among its rows.",
            labels=["model_name", "work"],
        )
        for work in ("prefill", "decode"):
            busy.add_metric([self._model_name, work], stats.busy_seconds.get(work, 0.0))
        yield busy

    def _expert_parallel_families(self, layers: dict[str, dict]):
        rank_tokens = CounterMetricFamily(
            "chassis_ep_rank_tokens",
            "Expert parallel: tokens routed to each rank's experts, per MoE layer (under its current placement).",
            labels=["model_name", "layer", "rank"],
        )
        imbalance = GaugeMetricFamily(
            "chassis_ep_imbalance_ratio",
            "Expert parallel: the busiest rank's routed tokens over the mean rank's, per MoE layer.",
            labels=["model_name", "layer"],
        )
        moves = CounterMetricFamily(
            "chassis_ep_rebalances",
            "Expert parallel: placements the load balancer applied, per MoE layer.",
            labels=["model_name", "layer"],
        )
        for layer, report in layers.items():
            for rank, tokens in enumerate(report["rank_tokens"]):
                rank_tokens.add_metric([self._model_name, layer, str(rank)], tokens)
            imbalance.add_metric([self._model_name, layer], report["imbalance_ratio"])
            moves.add_metric([self._model_name, layer], report["moves"])
        yield from (rank_tokens, imbalance, moves)

    def _kv_tier_families(self, tiers):
        for name, doc, attr, kind in KV_TIER_METRICS:
            family = kind(name, doc, labels=["model_name", "tier"])
            for tier, values in tiers.items():
                family.add_metric([self._model_name, tier], getattr(values, attr))
            yield family


class ServerMetrics:
    def __init__(
        self,
        model_name: str,
        stats: Callable[[], Any | None],
        max_model_len: int | None = None,
        batch_invariant: bool = False,
        accelerators: int = 1,
        accelerator_hour_price: float = 0.0,
    ):
        self.registry = CollectorRegistry(auto_describe=True)
        self.model_name = model_name
        common = {"labelnames": ["model_name"], "registry": self.registry}
        token_buckets = buckets_1_2_5(max_model_len or DEFAULT_MAX_MODEL_LEN)
        self._ttft = Histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
            buckets=TTFT_BUCKETS, **common,
        )  # fmt: skip
        self._itl = Histogram(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
            buckets=ITL_BUCKETS, **common,
        )  # fmt: skip
        self._e2e = Histogram(
            "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
            buckets=REQUEST_BUCKETS, **common,
        )  # fmt: skip
        self._queue = Histogram(
            "vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
            buckets=REQUEST_BUCKETS, **common,
        )  # fmt: skip
        self._tpot = Histogram(
            "vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds "
            "(the older name of inter_token_latency_seconds).", buckets=ITL_BUCKETS, **common,
        )  # fmt: skip
        self._request_tpot = Histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.", buckets=ITL_BUCKETS, **common,
        )  # fmt: skip
        self._prefill_time = Histogram(
            "vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.",
            buckets=REQUEST_BUCKETS, **common,
        )  # fmt: skip
        self._decode_time = Histogram(
            "vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.",
            buckets=REQUEST_BUCKETS, **common,
        )  # fmt: skip
        self._inference_time = Histogram(
            "vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.",
            buckets=REQUEST_BUCKETS, **common,
        )  # fmt: skip
        self._prompt_tokens = Histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.",
            buckets=token_buckets, **common,
        )  # fmt: skip
        self._generation_tokens = Histogram(
            "vllm:request_generation_tokens", "Number of generation tokens processed.",
            buckets=token_buckets, **common,
        )  # fmt: skip
        self._max_generation_tokens = Histogram(
            "vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.", buckets=token_buckets, **common,
        )  # fmt: skip
        self._params_max_tokens = Histogram(
            "vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.",
            buckets=token_buckets, **common,
        )  # fmt: skip
        self._params_n = Histogram(
            "vllm:request_params_n", "Histogram of the n request parameter.",
            buckets=PARAMS_N_BUCKETS, **common,
        )  # fmt: skip
        self._success = Counter(
            "vllm:request_success", "Count of successfully processed requests.",
            labelnames=["model_name", "finished_reason"], registry=self.registry,
        )  # fmt: skip
        for reason in FINISHED_REASONS:  # export zeros so dashboards see every series from the start
            self._success.labels(model_name, reason)
        # Children created up front so every series is exported (as zero) before the first request.
        self.inter_token_latency = _Observers(self._itl.labels(model_name), self._tpot.labels(model_name))
        for histogram in (
            self._request_tpot, self._prefill_time, self._decode_time, self._inference_time,
            self._prompt_tokens, self._generation_tokens, self._max_generation_tokens,
            self._params_max_tokens, self._params_n,
        ):  # fmt: skip
            histogram.labels(model_name)
        self._ttft_child = self._ttft.labels(model_name)
        self._queue_child = self._queue.labels(model_name)
        self._e2e_child = self._e2e.labels(model_name)
        self._ignored_fields = Counter(
            "chassis_ignored_request_fields", "Top-level request fields ignored because this server "
            "does not know them (vLLM or newer API extras that change nothing).",
            labelnames=["api", "field"], registry=self.registry,
        )  # fmt: skip
        self._ignored_field_names: set[str] = set()
        Gauge(
            "chassis_batch_invariant", "1 when the engine runs in batch-invariant mode (a request's tokens "
            "and logprobs do not depend on what shares its batch), else 0.", **common,
        ).labels(model_name).set(1 if batch_invariant else 0)  # fmt: skip
        Gauge(
            "chassis_accelerators",
            "Accelerators this replica holds (tensor-parallel x expert-parallel size).",
            **common,
        ).labels(model_name).set(accelerators)
        Gauge(
            "chassis_accelerator_hour_price", "Price of one accelerator-hour the operator set "
            "(accelerator_hour_price); 0: not set.", **common,
        ).labels(model_name).set(accelerator_hour_price)  # fmt: skip
        self.registry.register(_EngineStatsCollector(model_name, stats))

    def fields_ignored(self, api: str, fields: list[str]) -> None:
        for name in fields:
            if name not in self._ignored_field_names:
                if (
                    len(self._ignored_field_names) >= IGNORED_FIELD_LABELS
                    or len(name) > IGNORED_FIELD_MAX_LEN
                ):
                    name = "other"
                else:
                    self._ignored_field_names.add(name)
            self._ignored_fields.labels(api, name).inc()

    def call_finished(self, n: int, max_tokens: int | None, generated: list[int]) -> None:
        """Record one API call of ``n`` choices, each of which generated ``generated[i]`` tokens."""
        model = self.model_name
        self._params_n.labels(model).observe(n)
        if max_tokens is not None:
            self._params_max_tokens.labels(model).observe(max_tokens)
        if generated:
            self._max_generation_tokens.labels(model).observe(max(generated))

    def request_finished(
        self,
        times: Any | None,
        finish_reason: str | None,
        prompt_tokens: int | None = None,
        generation_tokens: int | None = None,
    ) -> None:
        """Record one finished engine request; ``times`` is its RequestOutput.metrics (None if unknown)."""
        self._success.labels(self.model_name, finish_reason or "abort").inc()
        if prompt_tokens is not None:
            self._prompt_tokens.labels(self.model_name).observe(prompt_tokens)
        if generation_tokens is not None:
            self._generation_tokens.labels(self.model_name).observe(generation_tokens)
        if times is None:
            return
        arrival = getattr(times, "arrival_time", None)
        if arrival is None:
            return
        first_token = getattr(times, "first_token_time", None)
        scheduled = getattr(times, "first_scheduled_time", None)
        finished = getattr(times, "finished_time", None)
        if first_token is not None:
            self._ttft_child.observe(max(0.0, first_token - arrival))
        if scheduled is not None:
            self._queue_child.observe(max(0.0, scheduled - arrival))
        if finished is not None:
            self._e2e_child.observe(max(0.0, finished - arrival))
        model = self.model_name
        if scheduled is not None and first_token is not None:
            self._prefill_time.labels(model).observe(max(0.0, first_token - scheduled))
        if first_token is not None and finished is not None:
            self._decode_time.labels(model).observe(max(0.0, finished - first_token))
            if generation_tokens is not None and generation_tokens > 1:
                tpot = (finished - first_token) / (generation_tokens - 1)
                self._request_tpot.labels(model).observe(max(0.0, tpot))
        if scheduled is not None and finished is not None:
            self._inference_time.labels(model).observe(max(0.0, finished - scheduled))
