"""CPU products and attention whose rows come out with the same bits whatever else is in the call:
the batch, the chunk a prompt was cut into, a cached prefix. Only in batch-invariant mode
(``kernels.invariance``): outside it ``linear``, ``bmm`` and ``pointwise`` are torch's own operations
(a one-row product stays a GEMV, about half the time of a padded one) and the callers use torch's
fused attention instead of ``attend``.

MKL's fp32 GEMM picks its kernels, and with several threads its partition, by the row count: a row
is summed in another order at 1-3 rows than in a group of 4 on AVX2, at fewer than 16 rows than at
more on an AVX512 Xeon, and at 57-71 of 600 rows with two threads for a 1,536-deep product there
(tests/kernels/test_cpu_invariant.py checks it on the machine that runs it). ``linear`` and ``bmm``
therefore run every product as calls of exactly ``ROW_BLOCK`` rows, the last one padded with zero
rows: each call has the same shape whatever the batch, so a row's bits follow only its own values.
A decode step's one row costs a 16-row product. Other devices pass straight through.

Attention (``attend``) walks the keys in blocks of ``KEY_BLOCK`` positions aligned at position 0,
with an online softmax, for every query row at once: a row's sums run over the same blocks in the
same order whether it is a decode row, one of a chunk or of a whole prompt; a block that a row may
not see (past its position, before its window) leaves its running sums exactly as they were. torch's
fused CPU attention instead sizes its reduction blocks by the query and key counts of the call.

Elementwise transcendental functions (exp, sigmoid) run 16 fp32 lanes at a time with SIMD
approximations but finish a tensor's last ``numel % 16`` elements with scalar libm, which rounds
differently: a row that lands in that tail (the last token of a step, when a row has 8 values) gets
other bits. ``pointwise`` pads the last dimension to whole vectors first. (With several intra-op
threads torch also cuts tensors above 32k elements at size-dependent points, each piece with its
own tail; the tests run one thread.)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.invariance import batch_invariant

__all__ = ["KEY_BLOCK", "attend", "bmm", "linear", "padded_rows", "pointwise"]

ROW_BLOCK = 16  # rows of every GEMM call in the mode
KEY_BLOCK = 256
# fp32 elements per step of torch's vectorized CPU loops (two vectors: 16 with AVX2, 32 with AVX512),
# a multiple of either; a tail shorter than a step goes through the scalar loop, with other bits.
_LANES = 64


def padded_rows(rows: int) -> int:
    """The row count to compute ``rows`` rows with so that each comes out as in any larger product
    (``rows`` itself outside batch-invariant mode)."""
    if not batch_invariant():
        return rows
    return -(-rows // ROW_BLOCK) * ROW_BLOCK


def _pad_rows(x: torch.Tensor, dim: int) -> torch.Tensor:
    rows = x.shape[dim]
    extra = padded_rows(rows) - rows
    if extra == 0 or x.device.type != "cpu":
        return x
    pad = [0, 0] * (x.dim() - 1 - dim % x.dim()) + [0, extra]
    return F.pad(x, pad)


def pointwise(fn, x: torch.Tensor) -> torch.Tensor:
    """``fn(x)`` for an elementwise ``fn``, every element through the vectorized path on a CPU."""
    extra = -x.shape[-1] % _LANES
    if extra == 0 or x.device.type != "cpu" or not batch_invariant():
        return fn(x)
    return fn(F.pad(x, (0, extra)))[..., : x.shape[-1]]


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` over the last dimension, each row's bits independent of the row count."""
    if x.device.type != "cpu" or not batch_invariant():
        if bias is None and x.dim() == 2 and x.device.type == "cpu":
            # what F.linear runs for it (t, then mm) without the dispatches of linear and matmul
            # above the product: a few µs of a one-row decode's ~121 products per token
            return torch.mm(x, weight.t())
        return F.linear(x, weight, bias)
    flat = x.reshape(-1, x.shape[-1])
    if flat.shape[0] == 0:
        return F.linear(x, weight, bias)
    blocks = _pad_rows(flat, 0).split(ROW_BLOCK)
    out = torch.cat([F.linear(block, weight, bias) for block in blocks])[: flat.shape[0]]
    return out.view(*x.shape[:-1], weight.shape[0])


def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a: [G, M, K] @ b: [G, K, N]``, each row's bits independent of M."""
    if a.device.type != "cpu" or not batch_invariant():
        return torch.bmm(a, b)
    if a.shape[1] == 0:
        return torch.bmm(a, b)
    # Contiguous operands: which GEMM path torch takes may follow the strides, which follow M.
    b = b.contiguous()
    blocks = _pad_rows(a, 1).split(ROW_BLOCK, dim=1)
    return torch.cat([torch.bmm(block.contiguous(), b) for block in blocks], dim=1)[:, : a.shape[1]]


def attend(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    first_key: int = 0,
    softcap: float | None = None,
) -> torch.Tensor:
    """Causal attention of ``q: [n, Hq, D]``, the last ``n`` positions of a context whose keys and
    values from position ``first_key`` (a multiple of ``KEY_BLOCK``: none before it may be visible)
    on are ``keys: [L, Hk, D]``, ``values: [L, Hk, Dv]`` (Hq a multiple of Hk) -> ``[n, Hq, Dv]`` in
    q's dtype; softmax in fp32. ``softcap``: scores become ``softcap * tanh(score / softcap)``
    before the mask (Gemma-2)."""
    if first_key % KEY_BLOCK:
        raise ValueError(f"first_key must be a multiple of {KEY_BLOCK}, got {first_key}")
    n, num_heads, _ = q.shape
    kv_heads = keys.shape[1]
    context_len = first_key + keys.shape[0]
    group = num_heads // kv_heads
    first_query = context_len - n
    # [Hk, group * n, D]: the heads that read one KV head are rows of one product.
    queries = q.float().view(n, kv_heads, group, -1).permute(1, 2, 0, 3).reshape(kv_heads, group * n, -1)
    query_pos = torch.arange(first_query, context_len, device=q.device).repeat(group)[:, None]
    first_block = first_key // KEY_BLOCK
    if sliding_window is not None:
        first_block = max(first_block, max(0, first_query - sliding_window + 1) // KEY_BLOCK)
    num_blocks = -(-context_len // KEY_BLOCK)
    padded = num_blocks * KEY_BLOCK - context_len  # zero keys and values, never visible
    keys = F.pad(keys.float(), (0, 0, 0, 0, 0, padded)).transpose(0, 1)  # [Hk, blocks * B, D]
    values = F.pad(values.float(), (0, 0, 0, 0, 0, padded)).transpose(0, 1)
    rows = group * n
    best = torch.full((kv_heads, rows), float("-inf"), device=q.device)
    total = torch.zeros(kv_heads, rows, device=q.device)
    acc = torch.zeros(kv_heads, rows, values.shape[-1], device=q.device)
    for block in range(first_block, num_blocks):
        start = block * KEY_BLOCK
        key_pos = torch.arange(start, start + KEY_BLOCK, device=q.device)[None, :]
        visible = key_pos <= query_pos
        if sliding_window is not None:
            visible &= key_pos > query_pos - sliding_window
        k = keys[:, start - first_key : start - first_key + KEY_BLOCK]
        scores = bmm(queries, k.transpose(1, 2)) * scale
        if softcap is not None:  # rows of KEY_BLOCK: whole vectors
            scores = torch.tanh(scores / softcap) * softcap
        scores = scores.masked_fill(~visible, float("-inf"))
        new_best = torch.maximum(best, scores.amax(dim=-1))
        # A row that has seen no key yet subtracts 0: exp(-inf) = 0 keeps its sums at exactly zero.
        shift = torch.where(new_best == float("-inf"), 0.0, new_best)
        probs = torch.exp(scores - shift[..., None])  # rows of KEY_BLOCK: whole vectors
        keep = pointwise(torch.exp, (best - shift)[..., None])[..., 0]
        total = total * keep + probs.sum(dim=-1)
        acc = acc * keep[..., None] + bmm(probs, values[:, start - first_key : start - first_key + KEY_BLOCK])
        best = new_best
    out = acc / total[..., None]  # [Hk, group * n, Dv]
    return out.view(kv_heads, group, n, -1).permute(2, 0, 1, 3).reshape(n, num_heads, -1).to(q.dtype)
