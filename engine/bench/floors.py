"""Physical ceilings measured on the device at hand, and the floors they imply for a model."""

from __future__ import annotations

from dataclasses import dataclass


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


def decode_floor_ms(weight_bytes: int, ceilings: Ceilings) -> float:
    """Batch-1 decode reads every weight once per token: weight bytes over read bandwidth.

    A device-to-device copy moves each byte twice (read + write), and ``copy_bytes_per_s`` counts
    both, so it is the rate at which bytes stream through HBM.
    """
    return weight_bytes / ceilings.copy_bytes_per_s * 1e3


def prefill_floor_ms(num_params: int, num_tokens: int, ceilings: Ceilings) -> float:
    return 2 * num_params * num_tokens / ceilings.matmul_flops_per_s * 1e3


@dataclass(frozen=True)
class WorkloadFloor:
    """The least time a set of requests can take on this device, from two independent bounds.

    * compute: every projection FLOP (prompt tokens and generated tokens alike; the LM head once per
      generated token) and the causal attention FLOPs of each prompt, at the measured matmul rate;
    * memory: each generated token reads its request's whole KV context, at the measured copy rate.
    Decode attention cannot overlap the projections of the same step (they are separate kernels in
    sequence), so the two add. Weight reads are left out: at batch sizes that saturate compute,
    one read per step is hidden under the step's matmuls. It is a lower bound, not a model of time.
    """

    compute_s: float
    kv_read_s: float

    @property
    def seconds(self) -> float:
        return self.compute_s + self.kv_read_s


def workload_floor(
    config: dict,
    prompt_lens: list[int],
    output_lens: list[int],
    ceilings: Ceilings,
    bytes_per_element: int = 2,
) -> WorkloadFloor:
    from engine.bench.random_arch import attention_widths, layer_projection_params

    h, layers, vocab = (config[k] for k in ("hidden_size", "num_hidden_layers", "vocab_size"))
    q, kv = attention_widths(config)
    layer_macs = layer_projection_params(config)
    flops = 0.0
    kv_bytes = 0.0
    kv_bytes_per_token = layers * 2 * kv * bytes_per_element
    for p, o in zip(prompt_lens, output_lens, strict=True):
        forward_tokens = p + o - 1  # the last generated token is never fed back
        flops += 2 * layer_macs * layers * forward_tokens + 2 * vocab * h * o
        flops += 2 * 2 * layers * q * p * (p + 1) / 2  # QK^T and PV over the causal prompt
        # generated token j (1-based, j >= 2) attends over p + j - 1 positions
        kv_bytes += kv_bytes_per_token * sum(p + j - 1 for j in range(2, o + 1))
    return WorkloadFloor(flops / ceilings.matmul_flops_per_s, kv_bytes / ceilings.copy_bytes_per_s)
