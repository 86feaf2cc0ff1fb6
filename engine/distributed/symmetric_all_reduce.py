"""Small all-reduces through PyTorch's symmetric memory instead of NCCL (CUDA only).

A decode step at tensor_parallel_size=k all-reduces two hidden-sized rows per layer (64 per step
for a 32-layer model), each a few KiB: NCCL's latency, not bandwidth, is the cost. Every rank keeps
one buffer that all ranks can read (``torch.distributed._symmetric_memory``); torch's one-shot
all-reduce copies a rank's input into its buffer, waits for the others at a barrier in device
memory, and sums every rank's buffer in rank order, so all ranks get the same bits. It needs no
NVLink multicast (which stays off on shared hosts) and may be captured in a CUDA graph.

``EngineConfig.tp_all_reduce`` (set here by ``set_mode`` when the engine builds, on every rank):
``auto`` (default: symmetric memory where it initialises and passes a
check on every rank, else NCCL; at two ranks, where both give the same bits, whichever was faster in
a CUDA graph at start-up), ``nccl``, or ``symmetric`` (fail if it cannot be used).
"""

from __future__ import annotations

import logging
import warnings

import torch

from kernels.mode_switch import ModeSwitch

log = logging.getLogger("chassis.tp")

MODES = ("auto", "nccl", "symmetric")
# Larger inputs (prefill) go to NCCL, whose ring/tree algorithms win once bandwidth matters.
MAX_BYTES = 512 << 10
_DTYPES = (torch.float32, torch.bfloat16)
_switch = ModeSwitch("tp_all_reduce", MODES)


def set_mode(mode: str) -> str:
    """Choose the small all-reduce's path for this process; returns the previous choice. Every rank
    of a group must choose the same one (``build`` runs a collective unless it is ``nccl``)."""
    return _switch.set(mode)


def all_reduce_mode() -> str:
    return _switch.mode


class SymmetricAllReduce:
    """One symmetric buffer per rank; ``__call__`` returns the sum over ranks, or None for an input
    it does not take (too large, another dtype, not contiguous): the caller uses NCCL then."""

    def __init__(self, device: torch.device, max_bytes: int = MAX_BYTES) -> None:
        import torch.distributed as dist
        import torch.distributed._symmetric_memory as symm_mem

        self.group_name = dist.group.WORLD.group_name
        if hasattr(symm_mem, "enable_symm_mem_for_group"):
            with warnings.catch_warnings():  # needed before rendezvous in older torch; deprecated in newer
                warnings.simplefilter("ignore", FutureWarning)
                symm_mem.enable_symm_mem_for_group(self.group_name)
        self.max_bytes = max_bytes
        self.buffer = symm_mem.empty(max_bytes, dtype=torch.uint8, device=device)
        symm_mem.rendezvous(self.buffer, self.group_name)
        ops = torch.ops.symm_mem
        self._copy_in = hasattr(ops, "one_shot_all_reduce_copy_out")  # the copy happens in the kernel

    def takes(self, x: torch.Tensor) -> bool:
        return x.dtype in _DTYPES and x.is_contiguous() and x.numel() * x.element_size() <= self.max_bytes

    def __call__(self, x: torch.Tensor) -> torch.Tensor | None:
        if not self.takes(x):
            return None
        staged = self.buffer[: x.numel() * x.element_size()].view(x.dtype)
        out = torch.empty_like(x)
        if self._copy_in:
            torch.ops.symm_mem.one_shot_all_reduce_copy_out(
                staged, x.view(-1), "sum", self.group_name, out.view(-1)
            )
        else:
            staged.copy_(x.view(-1))
            torch.ops.symm_mem.one_shot_all_reduce_out(staged, "sum", self.group_name, out.view(-1))
        return out


def build(device: torch.device, rank: int, world_size: int) -> SymmetricAllReduce | None:
    """Every rank calls this right after joining the group; all get an all-reduce or all get None.

    The check sums ``(rank + 1) * arange`` once; the ranks then agree (through NCCL) on whether
    every one of them got the right answer, so no rank is left using a path another one refused."""
    mode = all_reduce_mode()
    if mode == "nccl" or device.type != "cuda":
        return None
    import torch.distributed as dist

    fast, error = None, ""
    try:
        fast = SymmetricAllReduce(device)
        n = 1000
        got = fast(torch.arange(n, dtype=torch.float32, device=device) * (rank + 1))
        want = torch.arange(n, dtype=torch.float32, device=device) * (world_size * (world_size + 1) / 2)
        if got is None or not torch.equal(got, want):
            error = "the check sum came out wrong"
    except Exception as exc:  # noqa: BLE001 - any failure means: use NCCL
        error = f"{type(exc).__name__}: {exc}"
    ok = torch.tensor([0 if error else 1], dtype=torch.int32, device=device)
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    if ok.item() == 1:
        if mode == "auto" and world_size == 2:
            # Two ranks get the same bits either way (a + b), so speed alone decides, agreed by all.
            symmetric_us, nccl_us = graph_timings(fast, device)
            slowest = torch.tensor([symmetric_us, nccl_us], device=device)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            symmetric_us, nccl_us = slowest.tolist()
            if symmetric_us >= nccl_us:
                log.info(
                    "tensor parallel: NCCL all-reduce (%.1f us) beats symmetric memory (%.1f us)",
                    nccl_us,
                    symmetric_us,
                )
                return None
        log.info(
            "tensor parallel: small all-reduces through symmetric memory (up to %d KiB)", MAX_BYTES >> 10
        )
        return fast
    message = f"symmetric-memory all-reduce unavailable on rank {rank}: {error or 'another rank failed'}"
    if mode == "symmetric":
        raise RuntimeError(f"tp_all_reduce=symmetric: {message}")
    log.warning("%s; using NCCL", message)
    return None


def graph_timings(fast: SymmetricAllReduce, device: torch.device, calls: int = 32) -> tuple[float, float]:
    """Microseconds per all-reduce of one decode row (hidden 4096, fp32) through symmetric memory and
    through NCCL, each as ``calls`` back-to-back calls captured in one CUDA graph (as decode runs them)."""
    import torch.distributed as dist

    from engine.graph_timing import time_in_graph

    x = torch.ones(4096, dtype=torch.float32, device=device)
    symmetric_us = time_in_graph(lambda i: fast(x), calls, replays=4)
    nccl_us = time_in_graph(lambda i: dist.all_reduce(x.clone()), calls, replays=4)
    return symmetric_us, nccl_us
