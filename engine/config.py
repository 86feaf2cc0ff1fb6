"""One validated configuration object for an engine instance, passed explicitly everywhere.

``EngineConfig`` is the only place an engine setting is declared: each field carries its help text
and, where it has them, its choices and extra flag spellings (field metadata). ``chassis serve``'s
engine flags are generated from the fields (``engine/config_cli.py``), ``LLM(model_dir, **overrides)``
takes the same defaults, and the control plane checks a deployment's engine options against them.
No torch at module level: the control plane imports this module.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field
from pathlib import Path
from typing import Any

from engine import env

DEVICES = ("auto", "cpu", "cuda", "npu")
DTYPES = ("auto", "float32", "bfloat16", "float16")
# "dummy" fills weights with seeded random values instead of reading safetensors: benchmarks of real
# architectures need no weight files, and weight values do not change speed at fixed output lengths.
LOAD_FORMATS = ("auto", "dummy")
# A GGUF file's Q4_0/Q4_1 projection weights: dequantized to the engine's dtype on load (as
# transformers loads them), or kept 4-bit on a CPU (engine/layers/int4_weight.py).
GGUF_WEIGHTS = ("dequantize", "int4")
# The value sets of the kernel and collective switches; kernels/_common.py, engine/layers/linear.py
# and engine/distributed/symmetric_all_reduce.py accept the same ones (a test checks they agree).
KERNEL_MODES = ("auto", "torch", "triton")
GEMV_MODES = ("auto", "cublas", "triton")
CPU_WEIGHT_LAYOUTS = ("auto", "row-major")
SHARED_EXPERTS_MODES = ("auto", "fused", "separate")
LAUNCH_OVERLAP_MODES = ("auto", "off")
MOE_GRAPH_MODES = ("auto", "off")
TP_ALL_REDUCE_MODES = ("auto", "nccl", "symmetric")
# Speculative decoding (engine/spec/): where drafts come from, and how long each one is.
SPECULATIVE_METHODS = ("off", "ngram", "draft_model", "mtp")
SPECULATIVE_SCHEDULING = ("confidence", "fixed")
# Prefill/decode disaggregation: a prefill replica writes the KV of every finished request's full
# blocks through to its tiers before it answers; a decode replica finds it there on admission.
KV_ROLES = ("mixed", "prefill", "decode")
# What sliding-window layers keep (engine/kv/layout.py): only their window, a prefix hit then
# recomputing their window plus a margin ("bounded-replay", DeepSeek's) or the whole prompt
# ("full-replay", exact); or, as full-attention layers do, the whole context ("full-context").
SLIDING_WINDOW_KV_MODES = ("bounded-replay", "full-replay", "full-context")
# Without a memory probe on CPU we size the pool for every sequence at full length, capped so a
# careless max_model_len cannot allocate gigabytes of host memory.
CPU_MAX_DEFAULT_BLOCKS = 4096
WEEK_S = 7 * 86_400.0


def setting(
    default: Any,
    help: str,
    *,
    choices: tuple[str, ...] | None = None,
    aliases: tuple[str, ...] = (),
    negative_aliases: tuple[str, ...] = (),
    positional: bool = False,
) -> Any:
    """A field with what its flag needs: ``aliases`` are extra spellings of the flag, a bool field's
    ``negative_aliases`` extra spellings of its ``--no-`` form (both keep older command lines working)."""
    metadata = {
        "help": help,
        "choices": choices,
        "aliases": aliases,
        "negative_aliases": negative_aliases,
        "positional": positional,
    }
    return field(default=default, metadata=metadata)


@dataclass
class EngineConfig:
    model_dir: str | Path = setting(
        MISSING, "checkpoint directory (config.json, safetensors, tokenizer)", positional=True
    )
    device: str = setting(
        "auto", "where the model runs; auto: cuda if visible, else npu, else cpu", choices=DEVICES
    )
    dtype: str = setting("auto", "weights and activations; auto: the checkpoint's dtype", choices=DTYPES)
    block_size: int = setting(16, "tokens per KV block")
    max_num_batched_tokens: int = setting(2048, "token budget of one step")
    max_num_seqs: int = setting(64, "most sequences in one batch")
    admission_batch: int = setting(
        1,
        "while more requests wait than seats are free, admit them only once this many seats are free "
        "(or this many steps after the last admission), so their prompts share one step: a step that "
        "carries a prompt chunk runs its decode rows without CUDA graphs; 1 admits at every step "
        "(lowest time to first token)",
    )
    max_model_len: int | None = setting(None, "context length (default: the checkpoint's)")
    enable_prefix_caching: bool = setting(
        True, "reuse the KV blocks of prompt prefixes seen before", negative_aliases=("--no-prefix-caching",)
    )
    sliding_window_kv: str = setting(
        "bounded-replay",
        "KV of sliding-window layers: bounded-replay keeps each request's window only, and after a "
        "prefix-cache hit or a preemption recomputes for those layers only the window plus "
        "swa_replay_margin tokens (full-attention layers reuse their cached blocks; exact when the "
        "margin covers the windowed layers' reach); full-replay keeps the window only and recomputes "
        "the whole prompt for those layers (exact); full-context keeps the whole context (exact, "
        "the most memory)",
        choices=SLIDING_WINDOW_KV_MODES,
    )
    swa_replay_margin: int = setting(
        140, "bounded-replay: tokens recomputed before a prefix hit's last window for sliding-window layers"
    )
    num_gpu_blocks: int | None = setting(
        None, "KV blocks (default: sized from memory, engine/runner/kv_sizing.py)"
    )
    gpu_memory_utilization: float = setting(0.9, "share of the accelerator's memory the engine may fill")
    seed: int = setting(0, "seed of the generator that seeds sampled requests which bring none")
    tensor_parallel_size: int = setting(
        1, "ranks (accelerators) one replica spans; one process per rank", aliases=("--tp",)
    )
    expert_parallel_size: int = setting(
        1,
        "ranks a mixture-of-experts replica spans with its routed experts split over them and attention "
        "data parallel (each rank its own requests and KV); one process per rank; equals "
        "data_parallel_size",
        aliases=("--ep",),
    )
    data_parallel_size: int = setting(
        1,
        "attention ranks of an expert-parallel replica, each with its own share of the requests and its "
        "own KV pool (a dense model scales by replicas instead)",
        aliases=("--dp",),
    )
    eplb_interval_steps: int = setting(
        0,
        "expert-parallel load balancer: recompute the experts' placement from the routing statistics "
        "every this many steps; 0: off (experts stay in contiguous shares)",
    )
    eplb_window_steps: int = setting(1000, "steps of routing statistics the load balancer plans from")
    eplb_extra_slots: int = setting(
        1, "expert slots per rank beyond its share, for copies of hot experts (load balancer)"
    )
    kv_event_capacity: int = setting(
        50_000,
        "KV events kept for /kv/events (a gateway that falls further behind resyncs from /kv/snapshot); "
        "the KV tiers add an event per block they store or drop",
    )
    accelerator_hour_price: float = setting(
        0.0,
        "price of one accelerator-hour (any currency), exported for the cost panels with the replica's "
        "accelerator count (tensor_parallel_size); 0: not set",
    )
    # KV tiers below the device pool (engine/kv/tiers/): cached blocks the pool evicts go to each
    # tier set here, and prefix hits continue from them.
    kv_host_cache_mib: int = setting(
        0, "host memory (MiB, pinned on CUDA) for KV blocks evicted from the device pool; 0: no host tier"
    )
    kv_host_cache_ttl_s: float = setting(86_400.0, "seconds a host-tier KV block stays unused before it goes")
    kv_disk_cache_dir: str | None = setting(
        None, "directory of this replica's KV block files, kept across restarts; unset: no disk tier"
    )
    kv_disk_cache_mib: int = setting(10_240, "MiB of KV block files in kv_disk_cache_dir")
    kv_disk_cache_ttl_s: float = setting(WEEK_S, "seconds a disk-tier KV block stays unused before it goes")
    kv_shared_cache_dir: str | None = setting(
        None, "directory of KV block files shared by the replicas of a deployment; unset: no shared tier"
    )
    kv_shared_cache_mib: int = setting(
        10_240, "MiB of KV block files in kv_shared_cache_dir, all replicas together"
    )
    kv_shared_cache_ttl_s: float = setting(
        WEEK_S, "seconds a shared-tier KV block stays unused before it goes"
    )
    kv_tenant_quota_mib: int | None = setting(
        None, "most MiB of KV blocks one tenant (cache_salt) holds in each tier; unset: only the tier's size"
    )
    kv_role: str = setting(
        "mixed",
        "mixed: prefill and decode here; prefill: write each finished request's full KV blocks through "
        "to the tiers (kv_shared_cache_dir) before answering, for a decode replica to onload; decode: "
        "the replica a gateway sends requests to after a prefill replica (needs kv_shared_cache_dir)",
        choices=KV_ROLES,
    )
    load_format: str = setting(
        "auto", "dummy: random weights (benchmarks of a config-only directory)", choices=LOAD_FORMATS
    )
    gguf_weights: str = setting(
        "dequantize",
        "a GGUF checkpoint's Q4_0/Q4_1 projection weights: dequantize: float weights, as transformers "
        "loads them; int4: kept 4-bit on a CPU and multiplied by torch's int4 kernel (an eighth of the "
        "bytes a float32 weight reads; fast with dtype bfloat16, slow with float32); other tensors and "
        "other devices load dequantized",
        choices=GGUF_WEIGHTS,
    )
    enforce_eager: bool = setting(False, "CUDA: skip capturing decode steps as CUDA graphs")
    max_cudagraph_capture_size: int | None = setting(
        None,
        "CUDA: rows of the largest decode graph (a row per token of a decode or verify step; larger "
        "steps run eagerly); default: max_num_seqs, times 1 + num_speculative_tokens when an ngram or "
        "draft_model proposer drafts (so whole verify steps replay), at most max_num_batched_tokens",
    )
    moe_graphs: str = setting(
        "off",
        "CUDA: auto: the mixture-of-experts blocks of steps that run eagerly (prompt chunks, mixed "
        "steps) replay CUDA graphs captured per token count up to max_num_batched_tokens (one GPU, "
        "not batch-invariant, not with enforce_eager); off (default: on the H200 auto gave the same "
        "2,048-token prefill and no measured gain elsewhere): every such step launches them one by one",
        choices=MOE_GRAPH_MODES,
    )
    warm_up: bool = setting(
        True, "CUDA: compile every step shape's kernels at start (engine/core/warm_up.py)"
    )
    # Schedule and launch step N+1 before reading step N's samples (overlaps host work with the
    # GPU). None: on for CUDA, off elsewhere (where there is no device queue to overlap with).
    async_scheduling: bool | None = setting(
        None, "launch step N+1 before reading step N's samples (default: on for CUDA, off elsewhere)"
    )
    speculative_method: str = setting(
        "off",
        "speculative decoding's proposer: ngram (prompt lookup, no weights), draft_model "
        "(--speculative-model, same tokenizer) or mtp (the checkpoint's own MTP layers)",
        choices=SPECULATIVE_METHODS,
    )
    speculative_model: str | None = setting(
        None, "the draft model's checkpoint (speculative_method draft_model)"
    )
    num_speculative_tokens: int = setting(5, "longest draft a request may verify in one step")
    speculative_scheduling: str = setting(
        "confidence",
        "confidence: draft lengths per request and step from the proposer's confidence, the request's "
        "acceptance and the measured step time (off when compute-bound); fixed: always the longest draft",
        choices=SPECULATIVE_SCHEDULING,
    )
    batch_invariant: bool = setting(
        False,
        "every reduction in an order fixed by the request's own tokens (one Triton GEMM config for all "
        "batch sizes, one paged-attention kernel for prefill and decode): the same prompt and seed give "
        "the same tokens and logprobs whatever shares the batch, at some cost in throughput",
    )
    # The switches below are process-wide once an engine starts (engine/switches.py applies them).
    # None: the environment variable's value (engine/env.py), else auto.
    kernels: str | None = setting(
        None,
        "auto: Triton on CUDA tensors, torch references elsewhere; torch: references everywhere; "
        "triton: Triton everywhere (CPU tensors only under TRITON_INTERPRET=1)",
        choices=KERNEL_MODES,
    )
    gemv: str | None = setting(
        None,
        "decode-sized products (<= 8 rows): auto: the Triton GEMV where the measured table says it "
        "beat cuBLAS on this GPU model; cublas: never; triton: wherever Triton runs",
        choices=GEMV_MODES,
    )
    gemv_table: str | None = setting(
        None, "GEMV choices measured by scripts/gpu/bench_decode_kernels.py; else kernels/gemv_table.json"
    )
    cpu_weight_layout: str = setting(
        "auto",
        "fp32 weights on a CPU: auto: a weight with at least as many outputs as inputs is stored "
        "column-major, where MKL's one-row product reads it faster (engine/layers/cpu_weight_layout.py); "
        "row-major: every weight as loaded",
        choices=CPU_WEIGHT_LAYOUTS,
    )
    shared_experts: str = setting(
        "auto",
        "a mixture of experts' shared experts (DeepSeek): fused: run as extra routed experts at weight 1 "
        "(one expert kernel per layer instead of two GEMVs and an add; single GPU, no expert parallel); "
        "separate: their own MLP; auto: fused where the Triton expert kernels run",
        choices=SHARED_EXPERTS_MODES,
    )
    launch_overlap: str = setting(
        "auto",
        "Triton kernels on Hopper and later GPUs: auto: launched with programmatic dependent launch, so "
        "each may start while the one before it finishes and waits on the GPU for its inputs (hides "
        "most of the gap between a decode step's small kernels); off: every launch waits for the last",
        choices=LAUNCH_OVERLAP_MODES,
    )
    mla_split_floor: int = setting(
        64,
        "latent attention decode below 16 sequences: the fewest of a sequence's own keys each of the "
        "kernel's splits takes (0: every split shares the keys). Above 0 a short context in a decode "
        "graph's wide block tables leaves the later splits empty, stored and reduced by no one (64: "
        "DeepSeek-V2-Lite's batch-1 decode on the H200 at 0.468 of its floor, against 0.412 at 0 and "
        "0.445 at 128)",
    )
    tp_all_reduce: str | None = setting(
        None,
        "small tensor-parallel all-reduces: auto: symmetric memory where it works on every rank (at two "
        "ranks, whichever was faster at start), else NCCL; nccl; symmetric: fail if it cannot be used",
        choices=TP_ALL_REDUCE_MODES,
    )

    def __post_init__(self) -> None:
        self.model_dir = Path(self.model_dir)
        choices = self.choices()
        for name in env.VARIABLES:
            if getattr(self, name) is None:
                setattr(self, name, _environment_default(name, choices.get(name)))
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        _require_positive("block_size", self.block_size)
        _require_positive("max_num_batched_tokens", self.max_num_batched_tokens)
        _require_positive("max_num_seqs", self.max_num_seqs)
        _require_positive("admission_batch", self.admission_batch)
        _require_positive("kv_event_capacity", self.kv_event_capacity)
        _require_positive("num_speculative_tokens", self.num_speculative_tokens)
        if self.speculative_method == "draft_model" and not self.speculative_model:
            raise ValueError("speculative_method draft_model needs speculative_model (the draft checkpoint)")
        if self.max_model_len is not None:
            _require_positive("max_model_len", self.max_model_len)
        if self.max_cudagraph_capture_size is not None:
            _require_positive("max_cudagraph_capture_size", self.max_cudagraph_capture_size)
        if self.num_gpu_blocks is not None:
            _require_positive("num_gpu_blocks", self.num_gpu_blocks)
        self._check_kv_tiers()
        self._check_price()
        if (
            not isinstance(self.swa_replay_margin, int)
            or isinstance(self.swa_replay_margin, bool)
            or (self.swa_replay_margin < 0)
        ):
            raise ValueError(f"swa_replay_margin must be 0 or more, got {self.swa_replay_margin!r}")
        if (
            not isinstance(self.mla_split_floor, int)
            or isinstance(self.mla_split_floor, bool)
            or self.mla_split_floor < 0
        ):
            raise ValueError(f"mla_split_floor must be 0 or more, got {self.mla_split_floor!r}")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        # Whether the model splits this many ways (heads, MLP rows) is checked when it loads.
        _require_positive("tensor_parallel_size", self.tensor_parallel_size)
        self._check_expert_parallel()
        if not isinstance(self.seed, int):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")
        for name in ("enable_prefix_caching", "enforce_eager", "warm_up", "batch_invariant"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.batch_invariant and self.tensor_parallel_size != 1:
            raise ValueError(
                "batch_invariant works with tensor_parallel_size 1 only (an all-reduce's summation order "
                "follows the message size, i.e. the batch)"
            )
        if self.async_scheduling is not None and not isinstance(self.async_scheduling, bool):
            raise ValueError(f"async_scheduling must be true, false or None, got {self.async_scheduling!r}")

    def _check_expert_parallel(self) -> None:
        for name in ("expert_parallel_size", "data_parallel_size", "eplb_window_steps"):
            _require_positive(name, getattr(self, name))
        for name in ("eplb_interval_steps", "eplb_extra_slots"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be 0 or more, got {value!r}")
        ep, dp = self.expert_parallel_size, self.data_parallel_size
        if ep != dp:
            raise ValueError(
                f"expert_parallel_size ({ep}) must equal data_parallel_size ({dp}): every rank runs "
                "attention for its own requests and holds a share of the experts"
            )
        if ep > 1 and self.tensor_parallel_size != 1:
            raise ValueError("expert_parallel_size > 1 works with tensor_parallel_size 1 only (for now)")
        if ep > 1 and self.speculative_method != "off":
            raise ValueError("expert_parallel_size > 1 works without speculative decoding (for now)")
        if ep > 1 and self.kv_tiers_enabled:
            raise ValueError("KV tiers below the device pool work with expert_parallel_size 1 only (for now)")
        if ep > 1 and self.batch_invariant:
            raise ValueError(
                "batch_invariant works with expert_parallel_size 1 only (an expert's rows arrive from "
                "every rank, in an order that follows the other ranks' batches)"
            )

    @property
    def world_size(self) -> int:
        """Processes (accelerators) one replica spans."""
        return self.tensor_parallel_size * self.expert_parallel_size

    def _check_price(self) -> None:
        price = self.accelerator_hour_price
        if isinstance(price, bool) or not isinstance(price, (int, float)) or not 0 <= price < float("inf"):
            raise ValueError(f"accelerator_hour_price must be a finite number >= 0, got {price!r}")

    def _check_kv_tiers(self) -> None:
        if not isinstance(self.kv_host_cache_mib, int) or self.kv_host_cache_mib < 0:
            raise ValueError(f"kv_host_cache_mib must be 0 or more, got {self.kv_host_cache_mib!r}")
        for name in ("kv_disk_cache_mib", "kv_shared_cache_mib"):
            _require_positive(name, getattr(self, name))
        if self.kv_tenant_quota_mib is not None:
            _require_positive("kv_tenant_quota_mib", self.kv_tenant_quota_mib)
        for name in ("kv_host_cache_ttl_s", "kv_disk_cache_ttl_s", "kv_shared_cache_ttl_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        if self.kv_role != "mixed" and not (self.kv_shared_cache_dir and self.enable_prefix_caching):
            raise ValueError(
                f"kv_role {self.kv_role} needs kv_shared_cache_dir (the KV moves between prefill and "
                "decode replicas through it) and prefix caching"
            )
        if self.kv_tiers_enabled and self.tensor_parallel_size != 1:
            raise ValueError("KV tiers below the device pool work with tensor_parallel_size 1 only (for now)")

    @property
    def kv_tiers_enabled(self) -> bool:
        return bool(self.kv_host_cache_mib or self.kv_disk_cache_dir or self.kv_shared_cache_dir)

    @classmethod
    def choices(cls) -> dict[str, tuple[str, ...]]:
        """Field name -> the values it accepts, for every field that has a fixed set."""
        fields = cls.__dataclass_fields__.values()
        return {f.name: f.metadata["choices"] for f in fields if f.metadata.get("choices")}

    def resolved_async_scheduling(self, device_type: str) -> bool:
        if self.async_scheduling is None:
            return device_type == "cuda"
        return self.async_scheduling

    def resolved_device(self) -> str:
        """'auto' becomes cuda when a CUDA device is visible, npu when torch_npu sees one, else cpu;
        an explicit device that is not usable here raises DeviceUnavailable (engine/device_runtime.py)."""
        from engine.device_runtime import resolve_device

        return resolve_device(self.device)


def _environment_default(name: str, choices: tuple[str, ...] | None) -> str | None:
    """A switch left unset takes its environment variable's value; a mode without one is auto."""
    value = env.environment_default(name)
    if choices is None:
        return value  # a path (gemv_table): None keeps the built-in default
    if value is None:
        return "auto"
    if value.lower() not in choices:
        raise ValueError(f"{env.variable_for(name)}={value!r} is not one of {', '.join(choices)}")
    return value.lower()


def _require_positive(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
