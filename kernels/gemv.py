"""Matrix-vector products for decode-sized batches: ``y[M, N] = x[M, K] @ W[N, K].T (+ bias)``, M <= 8.

At batch 1-8 a decode step is a stream of weight reads; each program streams a ``block_n x K`` slab
of the row-major weight with loads contiguous along K and keeps fp32 sums. The reduction order is
fixed by the config alone, so a config gives the same bits on every run: K splits store fp32
partials that are added in split order, either by the program of each N slab that finishes last
(``FUSED_REDUCE``: it counts arrivals on a persistent counter) or by a second kernel. ``gemv_silu`` reads the MLP's gate/up projection output
``[M, 2K]`` and forms ``silu(gate) * up`` while loading it, rounded to the input dtype exactly as
``kernels/activation.py`` does, so the down projection needs no separate activation kernel.
Configs: ``kernels/gemv_configs.py``.
"""

from __future__ import annotations

import torch

from kernels._arrival_counters import arrival_counters
from kernels._common import await_inputs, cdiv, interpreting, launch_overlap, tl, triton, use_triton
from kernels.activation import silu_and_mul_torch
from kernels.gemv_configs import GemvConfig, choose_config

__all__ = ["MAX_ROWS", "gemv", "gemv_silu", "gemv_silu_torch", "gemv_torch"]

MAX_ROWS = 8
_DOT_ROWS = 16  # tl.dot needs every extent >= 16: the input rows are padded to that
_REDUCE_BLOCK = 1024
# The last K-split program of an N slab adds the partials, saving the reduce kernel's launch: on the
# H200 the down projection at M=1 (split 4) took 32.65 us against 33.48 us with the separate reduce
# (bench_decode_kernels.py --reduce-only, in a 32-call graph), 26.6 us per decode step.
FUSED_REDUCE = True


@triton.jit
def _sum_splits(partial_ptr, bias_ptr, out_ptr, out_row_stride, row, cols, mask, rows, n_out, num_splits,
                HAS_BIAS: tl.constexpr):  # fmt: skip
    """``out[row, cols] = sum over s = 0, 1, ... of partial[s, row, cols] (+ bias)``, in that order."""
    acc = tl.zeros(mask.shape, dtype=tl.float32)
    for s in range(num_splits):
        # .cg: other programs wrote these; read them from L2, never from a stale L1 line.
        acc += tl.load(
            partial_ptr + (s * rows + row) * n_out + cols, mask=mask, other=0.0, cache_modifier=".cg"
        )
    if HAS_BIAS:
        acc += tl.load(bias_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * out_row_stride + cols, acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _load_input(x_ptrs, mask, k_in, GATED: tl.constexpr):
    """``x`` at ``x_ptrs``; when GATED, ``silu(x) * x[.., k_in + ..]`` rounded to x's dtype."""
    if GATED:
        gate = tl.load(x_ptrs, mask=mask, other=0.0).to(tl.float32)
        up = tl.load(x_ptrs + k_in, mask=mask, other=0.0)
        act = (gate * tl.sigmoid(gate)).to(up.dtype).to(tl.float32)
        return (act * up.to(tl.float32)).to(up.dtype)
    return tl.load(x_ptrs, mask=mask, other=0.0)


@triton.jit
def _slab(
    w_ptr, w_row_stride, rows, n_out, USE_DOT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr
):
    """Program ``(n, s)`` of a GEMV grid: its N slab ``n`` and K part ``s``, the slab's output columns,
    the input rows, their masks, and the addresses of the slab's weight rows."""
    tl.static_assert(USE_DOT or BLOCK_M == 1, "the FMA variant reads one input row")
    pid_n = tl.program_id(0)
    pid_s = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    n_mask = offs_n < n_out
    m_mask = offs_m < rows
    w_rows = w_ptr + offs_n.to(tl.int64)[:, None] * w_row_stride
    return pid_n, pid_s, offs_n, offs_m, n_mask, m_mask, w_rows


@triton.jit
def _zero_acc(USE_DOT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    if USE_DOT:
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        # One input row (BLOCK_M == 1). Products pile up per lane in the layout W was loaded in and
        # are reduced once after the loop: no shuffles or layout changes per step.
        acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    return acc


@triton.jit
def _load_weight(w_rows, offs_k, n_mask, k_in, k_end, EVEN_K: tl.constexpr):
    """The ``BLOCK_N x BLOCK_K`` weight block at ``offs_k`` and the mask of its valid K columns."""
    if EVEN_K:
        w_mask = n_mask[:, None]
        k_mask = offs_k < k_in  # always true; a constant mask of the right shape
    else:
        k_mask = offs_k < k_end
        w_mask = n_mask[:, None] & k_mask[None, :]
    return tl.load(w_rows + offs_k[None, :], mask=w_mask, other=0.0), k_mask


@triton.jit
def _accumulate(acc, w, x, USE_DOT: tl.constexpr, DOT_IN_FP32: tl.constexpr):
    """``acc + w @ x.T``: x is ``[BLOCK_M, BLOCK_K]`` with tl.dot, one 1-D row without."""
    if USE_DOT:
        if DOT_IN_FP32:
            acc += tl.dot(w.to(tl.float32), tl.trans(x.to(tl.float32)), input_precision="ieee")
        else:
            acc = tl.dot(w, tl.trans(x), acc)
    else:
        # A 1-D row broadcast over W's rows: it takes W's layout, so W is never reshuffled.
        acc += w.to(tl.float32) * x.to(tl.float32)[None, :]
    return acc


@triton.jit
def _store_result(acc, bias_ptr, out_ptr, out_row_stride, partial_ptr, counter_ptr, pid_n, pid_s, offs_m,
                  offs_n, m_mask, n_mask, rows, n_out, HAS_BIAS: tl.constexpr, SPLIT: tl.constexpr,
                  FUSED_REDUCE: tl.constexpr, USE_DOT: tl.constexpr):  # fmt: skip
    """``out`` (+ bias) from the fp32 sums; with SPLIT this K part's partial, and with FUSED_REDUCE
    the sum of every part by the program of this N slab that stores its partial last."""
    if USE_DOT:
        y = tl.trans(acc)
    else:
        y = tl.sum(acc, axis=1)[None, :]
    mask = m_mask[:, None] & n_mask[None, :]
    if SPLIT:
        part = partial_ptr + (pid_s * rows + offs_m.to(tl.int64))[:, None] * n_out + offs_n[None, :]
        tl.store(part, y, mask=mask)
        if FUSED_REDUCE:
            # Every thread's stores precede the release of the one atomic (barrier + cumulativity).
            tl.debug_barrier()
            counter = counter_ptr + pid_n
            splits = tl.num_programs(1)
            if tl.atomic_add(counter, 1, sem="acq_rel") == splits - 1:
                _sum_splits(partial_ptr, bias_ptr, out_ptr, out_row_stride, offs_m.to(tl.int64)[:, None],
                            offs_n[None, :], mask, rows, n_out, splits, HAS_BIAS)  # fmt: skip
                tl.store(counter, 0)  # every split has arrived: ready for the next launch
    else:
        if HAS_BIAS:
            y += tl.load(bias_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)[None, :]
        out = out_ptr + offs_m.to(tl.int64)[:, None] * out_row_stride + offs_n[None, :]
        tl.store(out, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _gemv_kernel(
    x_ptr,
    x_row_stride,
    w_ptr,
    w_row_stride,
    bias_ptr,
    out_ptr,
    out_row_stride,
    partial_ptr,
    counter_ptr,
    rows,
    n_out,
    k_in,
    k_per_split,
    HAS_BIAS: tl.constexpr,
    GATED: tl.constexpr,
    SPLIT: tl.constexpr,
    FUSED_REDUCE: tl.constexpr,
    USE_DOT: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
    EVEN_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    """Program ``(n, s)``: output columns ``n*BLOCK_N ...`` over K part ``s``, for every input row."""
    await_inputs(USE_PDL)
    pid_n, pid_s, offs_n, offs_m, n_mask, m_mask, w_rows = _slab(
        w_ptr, w_row_stride, rows, n_out, USE_DOT, BLOCK_M, BLOCK_N
    )
    x_rows = x_ptr + offs_m.to(tl.int64)[:, None] * x_row_stride
    k_start = pid_s * k_per_split
    k_end = tl.minimum(k_start + k_per_split, k_in)
    acc = _zero_acc(USE_DOT, BLOCK_M, BLOCK_N, BLOCK_K)
    for k0 in range(k_start, k_end, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        w, k_mask = _load_weight(w_rows, offs_k, n_mask, k_in, k_end, EVEN_K)
        if USE_DOT:
            x = _load_input(x_rows + offs_k[None, :], m_mask[:, None] & k_mask[None, :], k_in, GATED)
        else:
            x = _load_input(x_ptr + offs_k, k_mask, k_in, GATED)
        acc = _accumulate(acc, w, x, USE_DOT, DOT_IN_FP32)
    _store_result(acc, bias_ptr, out_ptr, out_row_stride, partial_ptr, counter_ptr, pid_n, pid_s, offs_m,
                  offs_n, m_mask, n_mask, rows, n_out, HAS_BIAS, SPLIT, FUSED_REDUCE, USE_DOT)  # fmt: skip


@triton.jit
def _split_reduce_kernel(
    partial_ptr,
    bias_ptr,
    out_ptr,
    out_row_stride,
    rows,
    n_out,
    SPLITS: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    """``out[m, n] = sum over s = 0, 1, ... of partial[s, m, n] (+ bias)``, always in that order."""
    await_inputs(USE_PDL)
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    _sum_splits(partial_ptr, bias_ptr, out_ptr, out_row_stride, row, cols, cols < n_out, rows, n_out, SPLITS,
                HAS_BIAS)  # fmt: skip


def check_rows(x: torch.Tensor) -> None:
    if not 1 <= x.shape[0] <= MAX_ROWS:
        raise ValueError(f"the GEMV takes 1 to {MAX_ROWS} rows, got {x.shape[0]}")


def _check(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, gated: bool) -> None:
    if x.dim() != 2 or weight.dim() != 2:
        raise ValueError(
            f"x must be [M, K] and weight [N, K], got {tuple(x.shape)} and {tuple(weight.shape)}"
        )
    k = x.shape[1] // 2 if gated else x.shape[1]
    if weight.shape[1] != k or (gated and x.shape[1] % 2):
        what = "gate_up must be [M, 2K]" if gated else "x must be [M, K]"
        raise ValueError(f"{what} for weight {tuple(weight.shape)}, got {tuple(x.shape)}")
    check_rows(x)
    if x.dtype != weight.dtype or (
        bias is not None and (bias.shape != (weight.shape[0],) or bias.dtype != x.dtype)
    ):
        raise ValueError("x, weight and bias must share one dtype, bias being [N]")


def resolve_config(
    config: GemvConfig | None, rows: int, n: int, k: int, gated: bool, device: torch.device, normed: bool
) -> GemvConfig:
    """``config``, or the table's (else the default) one for this shape; refuses FMA with rows > 1."""
    if config is None:
        config = choose_config(rows, n, k, gated, device, normed)
    if not config.use_dot and rows != 1:
        raise ValueError(f"the FMA variant takes one row, got {rows}: use a tl.dot config")
    return config


def split_k(k: int, config: GemvConfig) -> tuple[int, int]:
    """``(k_per_split, splits)``: the config's K split in whole ``block_k`` steps."""
    k_per_split = cdiv(cdiv(k, config.split_k), config.block_k) * config.block_k
    return k_per_split, cdiv(k, k_per_split)


def partials_for(out: torch.Tensor, splits: int) -> torch.Tensor:
    """fp32 ``[splits, M, N]`` for the K parts' sums; ``out`` itself (unused) without a split."""
    if splits == 1:
        return out
    return torch.empty((splits, *out.shape), dtype=torch.float32, device=out.device)


def tile_options(config: GemvConfig, dtype: torch.dtype, k: int) -> dict:
    """The tile constexprs and launch options a GEMV kernel takes from its config."""
    return {
        "USE_DOT": config.use_dot,
        # The interpreter's bf16 tl.dot is wrong (Triton 3.9); fp32 products of bf16 are exact.
        "DOT_IN_FP32": dtype == torch.float32 or interpreting(),
        "EVEN_K": k % config.block_k == 0,
        "BLOCK_M": _DOT_ROWS if config.use_dot else 1,
        "BLOCK_N": config.block_n,
        "BLOCK_K": config.block_k,
        "num_warps": config.num_warps,
        "num_stages": config.num_stages,
    }


def reduce_splits(
    partial: torch.Tensor, bias: torch.Tensor | None, weight: torch.Tensor, out: torch.Tensor, splits: int
) -> None:
    """``out = sum of partial[s] (+ bias)`` in split order, by the separate reduce kernel."""
    rows, n = out.shape
    _split_reduce_kernel[(rows, cdiv(n, _REDUCE_BLOCK))](
        partial,
        bias if bias is not None else weight,
        out,
        out.stride(0),
        rows,
        n,
        SPLITS=splits,
        HAS_BIAS=bias is not None,
        BLOCK=_REDUCE_BLOCK,
        num_warps=4,
        **launch_overlap(partial.device, rows),
    )


def _launch(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    gated: bool,
    config: GemvConfig | None = None,
    fused_reduce: bool | None = None,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    if x.stride(-1) != 1 or weight.stride(-1) != 1:
        raise ValueError("x and weight must be contiguous along K")
    rows, (n, k) = x.shape[0], weight.shape
    config = resolve_config(config, rows, n, k, gated, x.device, normed=False)
    out = torch.empty((rows, n), dtype=out_dtype or x.dtype, device=x.device)
    k_per_split, splits = split_k(k, config)
    partial = partials_for(out, splits)
    fused = splits > 1 and (FUSED_REDUCE if fused_reduce is None else fused_reduce)
    n_blocks = cdiv(n, config.block_n)
    counters = arrival_counters(x.device, n_blocks) if fused else partial
    _gemv_kernel[(n_blocks, splits)](
        x,
        x.stride(0),
        weight,
        weight.stride(0),
        bias if bias is not None else weight,
        out,
        out.stride(0),
        partial,
        counters,
        rows,
        n,
        k,
        k_per_split,
        HAS_BIAS=bias is not None,
        GATED=gated,
        SPLIT=splits > 1,
        FUSED_REDUCE=fused,
        **tile_options(config, x.dtype, k),
        **launch_overlap(x.device, rows),
    )
    if splits > 1 and not fused:
        reduce_splits(partial, bias, weight, out, splits)
    return out


def gemv_torch(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    out = x.float() @ weight.float().t()
    if bias is not None:
        out += bias.float()
    return out.to(out_dtype or x.dtype)


def gemv_silu_torch(
    gate_up: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    return gemv_torch(silu_and_mul_torch(gate_up), weight, bias, out_dtype)


def gemv(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    config: GemvConfig | None = None,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """``x: [M <= 8, K] @ weight[N, K].T (+ bias[N])`` -> ``[M, N]`` in ``out_dtype`` (default x's),
    fp32 sums. ``out_dtype=torch.float32`` keeps the sums unrounded (tensor-parallel partials)."""
    _check(x, weight, bias, gated=False)
    if use_triton(x, weight):
        return _launch(x, weight, bias, False, config, out_dtype=out_dtype)
    return gemv_torch(x, weight, bias, out_dtype)


def gemv_silu(
    gate_up: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    config: GemvConfig | None = None,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """``silu_and_mul(gate_up: [M <= 8, 2K]) @ weight[N, K].T (+ bias)`` without materialising the
    ``[M, K]`` activation."""
    _check(gate_up, weight, bias, gated=True)
    if use_triton(gate_up, weight):
        return _launch(gate_up, weight, bias, True, config, out_dtype=out_dtype)
    return gemv_silu_torch(gate_up, weight, bias, out_dtype)
