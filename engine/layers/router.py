"""Which experts each token goes to, and with what weight, from the router's logits.

Every variant the MoE architectures use, chosen by ``MoEConfig``: softmax or sigmoid scores (sigmoid:
DeepSeek-V3), an optional per-expert correction bias added for the choice only (DeepSeek-V3's
``e_score_correction_bias``), group-limited choice (only the best ``topk_groups`` of ``num_groups``
expert groups are searched; a group ranks by its best score, or by its best two summed), the top-k
weights renormalised to sum to one or not, then scaled by ``routed_scaling_factor``.

``select_experts`` is the reference; ``Router`` runs ``kernels.moe_routing.route`` (logits and
selection in two Triton kernels) instead where ``takes_routing_kernel`` allows it.
"""

from __future__ import annotations

import torch
from torch import nn

from engine.checkpoint.moe_config import MoEConfig
from kernels import cpu_invariant
from kernels.moe_routing import route, takes_routing_kernel


def select_experts(
    router_logits: torch.Tensor, moe: MoEConfig, correction_bias: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``router_logits: [T, E]`` -> ``(topk_weights float32 [T, k], topk_ids int64 [T, k])``."""
    logits = router_logits.float()
    scores = (
        cpu_invariant.pointwise(torch.sigmoid, logits) if moe.scoring == "sigmoid" else logits.softmax(dim=-1)
    )
    choice = scores if correction_bias is None else scores + correction_bias.float()
    if moe.num_groups > 1:
        choice = _limit_to_best_groups(choice, moe)
    topk_ids = torch.topk(choice, k=moe.top_k, dim=-1, sorted=False)[1]
    topk_weights = scores.gather(1, topk_ids)
    if moe.renormalize:
        # The epsilon is DeepSeek-V3's (sigmoid weights can all be tiny); at softmax weights (>= k/E
        # in sum) it is below fp32 resolution.
        topk_weights = topk_weights / (topk_weights.sum(dim=-1, keepdim=True) + 1e-20)
    if moe.routed_scaling_factor != 1.0:
        topk_weights = topk_weights * moe.routed_scaling_factor
    return topk_weights, topk_ids


def _limit_to_best_groups(choice: torch.Tensor, moe: MoEConfig) -> torch.Tensor:
    """``choice`` with every expert outside its token's best ``topk_groups`` groups set to -inf."""
    tokens, experts = choice.shape
    grouped = choice.view(tokens, moe.num_groups, experts // moe.num_groups)
    if moe.group_score == "top2_sum":
        group_scores = grouped.topk(2, dim=-1)[0].sum(dim=-1)
    else:
        group_scores = grouped.max(dim=-1).values
    best_groups = torch.topk(group_scores, k=moe.topk_groups, dim=-1, sorted=False)[1]
    keep = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, best_groups, True)
    return grouped.masked_fill(~keep.unsqueeze(-1), float("-inf")).view(tokens, experts)


class Router(nn.Module):
    """The gate: one fp32 logit per expert (kept in fp32 whatever the model's dtype, as DeepSeek's
    checkpoints and transformers keep it), plus the correction bias where the config has one."""

    def __init__(self, hidden_size: int, moe: MoEConfig, device: torch.device) -> None:
        super().__init__()
        self.moe = moe
        self.weight = nn.Parameter(
            torch.empty(moe.num_experts, hidden_size, dtype=torch.float32, device=device), requires_grad=False
        )
        self.e_score_correction_bias = (
            nn.Parameter(
                torch.zeros(moe.num_experts, dtype=torch.float32, device=device), requires_grad=False
            )
            if moe.score_correction_bias
            else None
        )
        # Shared experts fused as routed ones (``MoE.fuse_shared_experts``): this many slots follow
        # the top-k, experts E, E + 1, ... at weight 1.
        self.shared_slots = 0

    def forward(
        self, x: torch.Tensor, counts: torch.Tensor | None = None, counted_rows: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``counts`` (int64 ``[E]``), when given, gains one per (token, chosen routed expert), of the
        tokens before row ``counted_rows`` only when that is given (an int tensor ``[1]`` on x's
        device: the rows after it pad a captured CUDA graph's size)."""
        if takes_routing_kernel(x, self.weight):  # two fused Triton kernels
            return route(
                x,
                self.weight,
                self.moe,
                self.e_score_correction_bias,
                counts=counts,
                shared_slots=self.shared_slots,
                counted_rows=counted_rows,
            )
        logits = cpu_invariant.linear(x.float(), self.weight)
        topk_weights, topk_ids = select_experts(logits, self.moe, self.e_score_correction_bias)
        if counts is not None:
            flat = topk_ids.reshape(-1)
            ones = torch.ones_like(flat)
            if counted_rows is not None:  # a mask, not a slice: no host read of counted_rows
                rows = torch.arange(x.shape[0], device=x.device).repeat_interleave(self.moe.top_k)
                ones = (rows < counted_rows.reshape(())).to(flat.dtype)
            counts.scatter_add_(0, flat, ones)
        if self.shared_slots:
            tokens, experts = x.shape[0], self.moe.num_experts
            shared = torch.arange(experts, experts + self.shared_slots, device=x.device)
            topk_ids = torch.cat([topk_ids, shared.expand(tokens, -1)], dim=1)
            topk_weights = torch.cat([topk_weights, topk_weights.new_ones(tokens, self.shared_slots)], dim=1)
        return topk_weights, topk_ids
