"""A linear layer whose output may be several checkpoint tensors stacked (fused q/k/v, gate/up).

Decode-sized inputs (<= 8 rows) may take the Triton GEMV (``kernels/gemv.py``) instead of cuBLAS,
chosen by ``EngineConfig.gemv`` (set here by ``set_gemv_mode`` when the engine builds): ``auto``
(default) per shape as the table measured on this GPU model (``kernels/gemv_table.json``, written by
``scripts/gpu/bench_decode_kernels.py``) says was faster, cuBLAS for shapes or devices it lacks;
``cublas`` never; ``triton`` always where Triton runs (CUDA, or CPU tensors with kernels mode
``triton`` under the interpreter). Where the GEMV runs, the
RMSNorm before a projection may fold into it (``normed``: ``kernels/gemv_norm.py``, used by
``engine/layers/norm.py``).

In batch-invariant mode (``engine/layers/batch_invariant.py``) every product that Triton can run
goes to ``kernels/invariant_matmul.py`` and the GEMV, with its per-shape configs and split-K, is never
taken. Its tile config follows the row count only through table entries the model runner has
verified give a row the reference config's bits on this device (``engine/runner/invariant_tiles.py``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine.checkpoint.gguf_int4 import GroupInt4
from engine.layers.batch_invariant import batch_invariant
from engine.layers.int4_weight import PackedInt4Weight, packable
from kernels import cpu_invariant
from kernels._common import kernels_mode, use_triton
from kernels.gemv import MAX_ROWS, gemv, gemv_silu
from kernels.gemv_configs import table_entry
from kernels.invariant_matmul import invariant_matmul
from kernels.mode_switch import ModeSwitch

GEMV_MODES = ("auto", "cublas", "triton")
gemv_switch = ModeSwitch("gemv", GEMV_MODES)


def set_gemv_mode(mode: str) -> str:
    """Choose where decode-sized products go in this process; returns the previous choice."""
    return gemv_switch.set(mode)


def gemv_mode() -> str:
    return gemv_switch.mode


def takes_gemv(x: torch.Tensor, weight: torch.Tensor, gated: bool = False, normed: bool = False) -> bool:
    """Whether ``x @ weight.T`` (``silu_and_mul(x) @ weight.T`` when gated, ``rmsnorm(x) @ weight.T``
    when normed) runs the Triton GEMV."""
    if not isinstance(weight, torch.Tensor):  # a PackedInt4Weight
        return False
    rows = x.shape[0] if x.dim() == 2 else -1
    if not 1 <= rows <= MAX_ROWS or x.dtype != weight.dtype or x.stride(-1) != 1:
        return False
    # fp32 products go to cuBLAS on a GPU (Triton's exact-fp32 dot is slow); fp32 reaches the
    # GEMV only in the CPU interpreter, which is how the tests drive it end to end.
    if x.dtype not in (torch.bfloat16, torch.float16) and x.is_cuda:
        return False
    mode = gemv_switch.mode
    if mode == "cublas" or batch_invariant() or not use_triton(x, weight):
        return False
    if mode == "triton":
        return True
    n, k = weight.shape
    entry = table_entry(rows, n, k, gated, x.device, normed)
    return entry is not None and entry.backend == "triton"


# On a CPU, MKL's fp32 GEMM over a tall weight (an LM head's vocabulary rows) at a few input rows runs
# faster in slices of this many weight rows: the 49,152 x 576 head at 16 rows took 54 ms whole and
# 32 ms sliced on a 2-core EPYC. Each output is the same dot product either way (same bits).
CPU_ROW_SLICE = 1024
CPU_SLICED_MIN_ROWS = 8 * CPU_ROW_SLICE


def matmul(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` over the last dimension, through the GEMV where ``takes_gemv`` says so."""
    if isinstance(weight, PackedInt4Weight):
        return weight.matmul(x, bias)
    if x.device.type == "cpu" and kernels_mode() != "triton":  # no Triton kernel can take it
        return _cpu_matmul(x, weight, bias)
    flat = x.reshape(-1, x.shape[-1])
    if batch_invariant() and x.dtype == weight.dtype and use_triton(flat, weight):
        if flat.stride(-1) != 1:
            flat = flat.contiguous()
        return invariant_matmul(flat, weight, bias).view(*x.shape[:-1], weight.shape[0])
    if takes_gemv(flat, weight):
        return gemv(flat, weight, bias).view(*x.shape[:-1], weight.shape[0])
    if x.device.type == "cpu":
        return _cpu_matmul(x, weight, bias)
    return F.linear(x, weight, bias)


def _cpu_matmul(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    rows = cpu_invariant.padded_rows(x.numel() // x.shape[-1])  # batch-invariant: whole row blocks
    if weight.shape[0] >= CPU_SLICED_MIN_ROWS and 1 < rows <= 64:
        biases = (
            bias.split(CPU_ROW_SLICE) if bias is not None else [None] * -(-weight.shape[0] // CPU_ROW_SLICE)
        )
        parts = [
            cpu_invariant.linear(x, w, b) for w, b in zip(weight.split(CPU_ROW_SLICE), biases, strict=True)
        ]
        return torch.cat(parts, dim=-1)
    return cpu_invariant.linear(x, weight, bias)  # a row's bits must not follow the row count there


class Linear(nn.Module):
    def __init__(
        self,
        in_features: int,
        output_sizes: list[int] | int,
        bias: bool,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        super().__init__()
        self.output_sizes = [output_sizes] if isinstance(output_sizes, int) else list(output_sizes)
        out_features = sum(self.output_sizes)
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=dtype, device=device), False)
        self.bias = (
            nn.Parameter(torch.empty(out_features, dtype=dtype, device=device), False) if bias else None
        )
        # 4-bit weight slices held until every slice has come (None once any came dense).
        self._int4_parts: dict[int, GroupInt4] | None = {}

    def load(self, kind: str, tensor: torch.Tensor | GroupInt4, shard: int = 0) -> None:
        """Copy one checkpoint tensor ('weight' or 'bias') into output slice ``shard``. A 4-bit
        weight (``GroupInt4``) is kept 4-bit once every slice has come 4-bit and the whole weight
        fits the int4 kernel (``engine/layers/int4_weight.py``); else it is dequantized."""
        if isinstance(tensor, GroupInt4):
            if (
                kind == "weight"
                and self._int4_parts is not None
                and packable(*self.weight.shape, self.weight.device)
            ):
                self._check_slot(shard, tensor.shape)
                self._int4_parts[shard] = tensor
                if len(self._int4_parts) == len(self.output_sizes):
                    self._pack_int4()
                return
            tensor = tensor.dequantize()
        elif kind == "weight" and self._int4_parts is not None:
            # A dense slice: the weight stays dense, so the 4-bit slices held so far are dequantized.
            held, self._int4_parts = self._int4_parts, None
            for held_shard, part in held.items():
                self._load_dense(kind, part.dequantize(), held_shard)
        self._load_dense(kind, tensor, shard)

    def _check_slot(self, shard: int, shape) -> None:
        rows = self.output_sizes[shard]
        if tuple(shape) != (rows, self.weight.shape[1]):
            raise ValueError(f"shape {tuple(shape)} does not fit slot {(rows, self.weight.shape[1])}")

    def _pack_int4(self) -> None:
        parts = [self._int4_parts[i] for i in range(len(self.output_sizes))]
        dtype = self.weight.dtype
        del self._parameters["weight"]  # the float weight is never filled
        self.weight = PackedInt4Weight(parts, dtype)
        self._int4_parts = None

    def _load_dense(self, kind: str, tensor: torch.Tensor, shard: int) -> None:
        target = self.weight if kind == "weight" else self.bias
        if target is None:
            raise ValueError(f"checkpoint has a {kind} this layer does not expect")
        offset = sum(self.output_sizes[:shard])
        part = target.data[offset : offset + self.output_sizes[shard]]
        if part.shape != tensor.shape:
            raise ValueError(f"shape {tuple(tensor.shape)} does not fit slot {tuple(part.shape)}")
        part.copy_(tensor)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return matmul(x, self.weight, self.bias)

    def fuses_silu(self, gate_up: torch.Tensor) -> bool:
        """Whether ``forward_silu`` can fold ``silu_and_mul`` into this product (GEMV-sized input)."""
        return takes_gemv(gate_up, self.weight, gated=True)

    def forward_silu(self, gate_up: torch.Tensor) -> torch.Tensor:
        """``self(silu_and_mul(gate_up))`` as one GEMV that forms the activation while loading its
        input; only where ``fuses_silu(gate_up)``."""
        return gemv_silu(gate_up, self.weight, self.bias)
