"""Mixture-of-experts feed-forward over routed tokens: ``out[t] = sum_j w[t,j] * expert_{ids[t,j]}(x[t])``.

Each expert is a SwiGLU MLP: ``w2[e] @ (silu(w13[e, :I] @ x) * (w13[e, I:] @ x))``. Both paths
first sort the (token, slot) pairs by expert so one expert's weights are read once per step.
The combine is a sum over the k slots of a ``[T, k, H]`` fp32 buffer in slot order, not an atomic
add into ``[T, H]``: atomics would make the bits depend on which program finished first.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["check_moe_inputs", "fused_moe", "fused_moe_reference"]


def check_moe_inputs(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
) -> None:
    if x.dim() != 2:
        raise ValueError(f"x must be [tokens, hidden], got {tuple(x.shape)}")
    tokens, hidden = x.shape
    if w13.dim() != 3 or w13.shape[2] != hidden or w13.shape[1] % 2 != 0:
        raise ValueError(f"w13 must be [experts, 2*inter, hidden={hidden}], got {tuple(w13.shape)}")
    experts, inter = w13.shape[0], w13.shape[1] // 2
    if w2.shape != (experts, hidden, inter):
        raise ValueError(
            f"w2 must be [experts={experts}, hidden={hidden}, inter={inter}], got {tuple(w2.shape)}"
        )
    if topk_ids.dim() != 2 or topk_ids.shape[0] != tokens or topk_ids.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"topk_ids must be int [tokens={tokens}, k], got {tuple(topk_ids.shape)} {topk_ids.dtype}"
        )
    if topk_weights.shape != topk_ids.shape or topk_weights.dtype != torch.float32:
        raise ValueError(
            f"topk_weights must be float32 {tuple(topk_ids.shape)}, got {tuple(topk_weights.shape)} {topk_weights.dtype}"
        )
    if w13.dtype != x.dtype or w2.dtype != x.dtype:
        raise ValueError(f"weights must be in x's dtype {x.dtype}, got {w13.dtype} / {w2.dtype}")


def fused_moe_reference(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
) -> torch.Tensor:
    """One matmul pair per expert that has tokens; products in x's dtype, the weighted sum in fp32."""
    tokens, hidden = x.shape
    top_k = topk_ids.shape[1]
    inter = w13.shape[1] // 2
    flat_ids = topk_ids.reshape(-1)
    order = torch.argsort(flat_ids, stable=True)  # pair index = token * k + slot
    counts = torch.bincount(flat_ids, minlength=w13.shape[0]).tolist()
    pair_out = torch.zeros(tokens * top_k, hidden, dtype=torch.float32, device=x.device)
    start = 0
    for expert, count in enumerate(counts):
        if count == 0:
            continue
        pairs = order[start : start + count]
        start += count
        rows = x.index_select(0, pairs // top_k)
        gate_up = rows @ w13[expert].t()
        act = F.silu(gate_up[:, :inter]) * gate_up[:, inter:]
        down = act @ w2[expert].t()
        weights = topk_weights.reshape(-1).index_select(0, pairs)
        pair_out.index_copy_(0, pairs, down.float() * weights[:, None])
    return pair_out.view(tokens, top_k, hidden).sum(dim=1).to(x.dtype)


def fused_moe(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
) -> torch.Tensor:
    """``x: [T, H]``, ``w13: [E, 2I, H]`` (gate rows then up rows), ``w2: [E, H, I]``,
    ``topk_weights: [T, k]`` fp32, ``topk_ids: [T, k]`` distinct experts per token -> ``[T, H]``."""
    check_moe_inputs(x, w13, w2, topk_weights, topk_ids)
    return fused_moe_reference(x, w13, w2, topk_weights, topk_ids)
