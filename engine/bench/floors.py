"""Physical ceilings measured on the device at hand, and the floors they imply for a model.

Every parameter and KV byte comes from ``engine.checkpoint.model_facts`` (the one count of the
codebase); this module only turns them into seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.checkpoint.model_config import ModelConfig
from engine.checkpoint.model_facts import kv_bytes_per_token, parameter_counts, weight_bytes


@dataclass(frozen=True)
class Ceilings:
    copy_bytes_per_s: float  # bytes read + bytes written per second, device to device
    matmul_flops_per_s: float  # dense bf16 matrix product on random data, best of a few shapes


def measure_ceilings(device: str = "cuda") -> Ceilings:
    import torch
    import triton.testing

    n_bytes = 4 << 30
    src = torch.empty(n_bytes // 2, dtype=torch.bfloat16, device=device).normal_()
    dst = torch.empty_like(src)
    copy_ms = triton.testing.do_bench(lambda: dst.copy_(src), warmup=50, rep=300, return_mode="median")
    src = dst = None  # free the 8 GiB before the matmul
    # The best of a square product and the Llama-3.1-8B prefill projections (8,192 tokens): cuBLAS
    # reaches different fractions of peak per shape, and a floor must use the highest rate seen.
    best_flops = 0.0
    for m, k, n in ((8192, 8192, 8192), (8192, 4096, 28672), (8192, 14336, 4096), (8192, 4096, 6144)):
        a = torch.randn(m, k, dtype=torch.bfloat16, device=device)
        b = torch.randn(k, n, dtype=torch.bfloat16, device=device)
        mm_ms = triton.testing.do_bench(lambda a=a, b=b: a @ b, warmup=50, rep=300, return_mode="median")
        best_flops = max(best_flops, 2 * m * k * n / (mm_ms * 1e-3))
        a = b = None
    return Ceilings(copy_bytes_per_s=2 * n_bytes / (copy_ms * 1e-3), matmul_flops_per_s=best_flops)


@dataclass(frozen=True)
class FloorInputs:
    """What a workload needs to report its floor: the model, the ceilings, the weights' dtype."""

    cfg: ModelConfig
    ceilings: Ceilings
    dtype: str = "bfloat16"
    max_num_seqs: int | None = None  # the engine's batch cap: bounds the weight reads from below


def decode_floor_ms(weight_bytes: int, ceilings: Ceilings) -> float:
    """Batch-1 decode reads every weight it multiplies by once per token: those bytes over read bandwidth.

    A device-to-device copy moves each byte twice (read + write), and ``copy_bytes_per_s`` counts
    both, so it is the rate at which bytes stream through HBM.
    """
    return weight_bytes / ceilings.copy_bytes_per_s * 1e3


def active_weight_bytes(cfg: ModelConfig, dtype: str = "bfloat16") -> int:
    """What one token's forward pass reads: model_facts' active parameters (the dense parts, a MoE
    layer's router, shared and top-k experts, the LM head; not the input table, of which it reads a
    row) at ``dtype``. DeepSeek-V2-Lite: 2.45 B x 2 bytes; at 4.08 TB/s, 1.20 ms."""
    return weight_bytes(parameter_counts(cfg).active, dtype)


def prefill_floor_ms(num_params: int, num_tokens: int, ceilings: Ceilings) -> float:
    """``num_params``: the parameters each token multiplies by (model_facts' active count)."""
    return 2 * num_params * num_tokens / ceilings.matmul_flops_per_s * 1e3


def experts_read(cfg: ModelConfig, batch_size: int) -> int:
    """Routed experts of each MoE layer a decode step of ``batch_size`` tokens reads.

    Assumption: routing spreads tokens over the experts (random weights route near-uniformly), so a
    step reads min(num_experts, batch_size x top_k) experts per layer, all of them once
    batch_size x top_k >= num_experts (DeepSeek-V2-Lite and Qwen3-30B-A3B from batch 11 and 16 on).
    """
    if cfg.moe is None:
        return 0
    return min(cfg.moe.num_experts, batch_size * cfg.moe.top_k)


def step_weight_bytes(cfg: ModelConfig, batch_size: int, dtype: str = "bfloat16") -> int:
    """Weight bytes one decode step of ``batch_size`` tokens reads: the active weights plus, per MoE
    layer, the routed experts the batch touches beyond one token's top-k (``experts_read``)."""
    counts = parameter_counts(cfg)
    params = counts.active
    if cfg.moe is not None and cfg.moe.num_experts > cfg.moe.top_k:
        # total - input table - active = (num_experts - top_k) routed experts of every MoE layer
        one_expert_all_layers = (counts.total - counts.input_embedding - counts.active) // (
            cfg.moe.num_experts - cfg.moe.top_k
        )
        params += (experts_read(cfg, batch_size) - cfg.moe.top_k) * one_expert_all_layers
    return weight_bytes(params, dtype)


@dataclass(frozen=True)
class DecodeStepFloor:
    """The least time of one decode step: its weight reads and its batch's KV reads at copy bandwidth."""

    weight_bytes: int
    kv_bytes: int
    copy_bytes_per_s: float

    @property
    def seconds(self) -> float:
        return (self.weight_bytes + self.kv_bytes) / self.copy_bytes_per_s


def decode_step_floor(
    cfg: ModelConfig, context_lens: list[int], ceilings: Ceilings, dtype: str = "bfloat16"
) -> DecodeStepFloor:
    """One step decoding a token for each sequence, each reading ``context_lens[i]`` cached tokens."""
    return DecodeStepFloor(
        weight_bytes=step_weight_bytes(cfg, len(context_lens), dtype),
        kv_bytes=sum(context_lens) * kv_bytes_per_token(cfg, dtype),
        copy_bytes_per_s=ceilings.copy_bytes_per_s,
    )


@dataclass(frozen=True)
class WorkloadFloor:
    """The least time a set of requests can take on this device, from independent bounds.

    * compute: every active-weight FLOP (prompt tokens and generated tokens alike; the LM head once
      per generated token) and the causal attention FLOPs of each prompt, at the measured matmul rate;
    * weight reads (with a batch cap): the decode steps' weight reads at the measured copy rate, at
      least ``step_weight_bytes(cap) / cap`` per generated token (a step's reads grow at most in
      proportion to its tokens) and one ``step_weight_bytes(1)`` per step of the longest output;
      they stream while the matmuls run, so compute and weight reads overlap: the larger counts;
    * memory: each generated token reads its request's whole KV context, at the measured copy rate.
    Decode attention cannot overlap the projections of the same step (they are separate kernels in
    sequence), so the KV reads add. For a dense model the weight reads hide under compute at large
    batches; a mixture of experts reads every expert each step, so they can dominate. It is a lower
    bound, not a model of time.
    """

    compute_s: float
    kv_read_s: float
    weight_read_s: float = 0.0

    @property
    def seconds(self) -> float:
        return max(self.compute_s, self.weight_read_s) + self.kv_read_s


def workload_floor(
    cfg: ModelConfig,
    prompt_lens: list[int],
    output_lens: list[int],
    ceilings: Ceilings,
    dtype: str = "bfloat16",
    max_num_seqs: int | None = None,
) -> WorkloadFloor:
    lm_head = cfg.vocab_size * cfg.hidden_size
    body = parameter_counts(cfg).active - lm_head  # norm weights included: < 0.01 % of the MACs
    # Per (query, key) pair and layer: QK^T over the query/key width, PV over the value width.
    if cfg.mla is not None:
        pair_macs = cfg.num_heads * (cfg.mla.qk_head_dim + cfg.mla.v_head_dim)
    else:
        pair_macs = cfg.num_heads * 2 * cfg.head_dim
    per_token_kv = kv_bytes_per_token(cfg, dtype)
    flops = 0.0
    kv_bytes = 0.0
    for p, o in zip(prompt_lens, output_lens, strict=True):
        forward_tokens = p + o - 1  # the last generated token is never fed back
        flops += 2 * body * forward_tokens + 2 * lm_head * o
        flops += 2 * cfg.num_layers * pair_macs * p * (p + 1) / 2  # the causal prompt
        # generated token j (1-based, j >= 2) attends over p + j - 1 positions
        kv_bytes += per_token_kv * sum(p + j - 1 for j in range(2, o + 1))
    weight_read_s = 0.0
    if max_num_seqs and output_lens:
        cap = min(max_num_seqs, len(output_lens))
        read = max(
            step_weight_bytes(cfg, cap, dtype) / cap * sum(output_lens),
            step_weight_bytes(cfg, 1, dtype) * max(output_lens),
        )
        weight_read_s = read / ceilings.copy_bytes_per_s
    return WorkloadFloor(
        flops / ceilings.matmul_flops_per_s, kv_bytes / ceilings.copy_bytes_per_s, weight_read_s
    )
