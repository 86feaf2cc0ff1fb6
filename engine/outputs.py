"""What the engine hands back: per-step request outputs, engine-wide stats."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.sampling.sampler import Logprob

__all__ = ["EngineStats", "KVTierStats", "Logprob", "RequestMetrics", "RequestOutput"]


@dataclass
class RequestMetrics:
    """time.monotonic() instants; None until the event happened."""

    arrival_time: float
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    finished_time: float | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    new_token_ids: list[int]  # delta since the previous output of this request
    token_ids: list[int]  # cumulative generated tokens
    new_text: str  # delta
    text: str  # cumulative
    new_logprobs: list[Logprob] | None  # delta; None when logprobs were not requested
    finished: bool
    finish_reason: str | None  # "stop" | "length" | "abort" once finished
    stop_reason: int | str | None  # the stop token id or stop string that ended it (None for EOS)
    num_cached_tokens: int
    metrics: RequestMetrics


@dataclass(frozen=True)
class KVTierStats:
    """One KV tier below the device pool (engine/kv/tiers/): cumulative counts, current holdings."""

    hit_tokens: int  # prompt tokens onloaded from it instead of recomputed
    offloads: int  # blocks written to it
    onloads: int  # blocks read from it into the device pool
    entries: int
    bytes_held: int
    onload_bytes: int = 0  # KV bytes read from it into the device pool
    onload_seconds: float = 0.0  # the time those onloads took (onload_bytes / onload_seconds: bandwidth)


@dataclass
class EngineStats:
    num_running: int
    num_waiting: int
    kv_usage: float  # fraction of KV blocks in use, 0..1 (of the fuller pool, engine/kv/layout.py)
    num_blocks_total: int
    num_blocks_used: int
    prefix_cache_queries: int  # tokens, cumulative
    prefix_cache_hits: int  # tokens, cumulative
    num_preemptions: int  # cumulative
    prompt_tokens: int  # cumulative
    generation_tokens: int  # cumulative
    # Per mixture-of-experts layer (module name), tokens routed to each expert, cumulative; read at
    # most every ROUTING_REFRESH_S (engine_core), as reading it waits for the device.
    expert_tokens: dict[str, list[int]] = field(default_factory=dict)
    # Expert parallel, per MoE layer: "rank_tokens" (list), "imbalance_ratio", "moves" (Executor.expert_parallel_report).
    expert_parallel: dict[str, dict] = field(default_factory=dict)
    # Speculative decoding (cumulative; all zero with it off): drafts verified, their tokens, the
    # accepted ones, and per draft position how often it was accepted (vLLM's names).
    spec_decode_num_drafts: int = 0
    spec_decode_num_draft_tokens: int = 0
    spec_decode_num_accepted_tokens: int = 0
    spec_decode_num_accepted_tokens_per_pos: list[int] = field(default_factory=list)
    kv_tiers: dict[str, KVTierStats] = field(default_factory=dict)  # by tier name: host, disk, shared
    # The sliding-window layers' own pool beside full attention's (0 blocks: no such pool).
    window_blocks_total: int = 0
    window_kv_usage: float = 0.0
    # Step time shared among the rows it ran, cumulative: "prefill" (prompt rows), "decode" (engine/core/busy_time.py).
    busy_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def spec_decode_acceptance_rate(self) -> float | None:
        if not self.spec_decode_num_draft_tokens:
            return None
        return self.spec_decode_num_accepted_tokens / self.spec_decode_num_draft_tokens

    @property
    def spec_decode_mean_accepted_length(self) -> float | None:
        """Tokens emitted per verified draft: the accepted ones plus the one every step samples."""
        if not self.spec_decode_num_drafts:
            return None
        return 1.0 + self.spec_decode_num_accepted_tokens / self.spec_decode_num_drafts


@dataclass
class GenerationOutput:
    """One finished request, as ``LLM.generate`` returns it."""

    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str | None
    stop_reason: int | str | None
    num_cached_tokens: int
    logprobs: list[Logprob] | None = None
    metrics: RequestMetrics | None = None
