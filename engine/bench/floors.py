"""Physical ceilings measured on the device at hand, and the floors they imply for a model."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Ceilings:
    copy_bytes_per_s: float  # bytes read + bytes written per second, device to device
    matmul_flops_per_s: float  # dense bf16 matrix product on random data


def measure_ceilings(device: str = "cuda") -> Ceilings:
    import torch
    import triton.testing

    n_bytes = 4 << 30
    src = torch.empty(n_bytes // 2, dtype=torch.bfloat16, device=device).normal_()
    dst = torch.empty_like(src)
    copy_ms = triton.testing.do_bench(lambda: dst.copy_(src), warmup=50, rep=300, return_mode="median")
    src = dst = None  # free the 8 GiB before the matmul
    n = 8192
    a = torch.randn(n, n, dtype=torch.bfloat16, device=device)
    b = torch.randn(n, n, dtype=torch.bfloat16, device=device)
    mm_ms = triton.testing.do_bench(lambda: a @ b, warmup=50, rep=300, return_mode="median")
    return Ceilings(
        copy_bytes_per_s=2 * n_bytes / (copy_ms * 1e-3), matmul_flops_per_s=2 * n**3 / (mm_ms * 1e-3)
    )


def decode_floor_ms(weight_bytes: int, ceilings: Ceilings) -> float:
    """Batch-1 decode reads every weight once per token: weight bytes over read bandwidth.

    A device-to-device copy moves each byte twice (read + write), and ``copy_bytes_per_s`` counts
    both, so it is the rate at which bytes stream through HBM.
    """
    return weight_bytes / ceilings.copy_bytes_per_s * 1e3


def prefill_floor_ms(num_params: int, num_tokens: int, ceilings: Ceilings) -> float:
    return 2 * num_params * num_tokens / ceilings.matmul_flops_per_s * 1e3
