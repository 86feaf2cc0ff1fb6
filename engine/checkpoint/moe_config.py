"""Mixture-of-experts facts of a checkpoint (Qwen3-MoE, Mixtral, DeepSeek-V2/V3), parsed by the
architecture's module into ``ModelConfig.moe``. Pure Python: the control plane reads it too."""

from __future__ import annotations

from dataclasses import dataclass

SCORINGS = ("softmax", "sigmoid")
# How group-limited routing ranks a group: its best expert's score (DeepSeek-V2's
# group_limited_greedy) or the sum of its best two (DeepSeek-V3's noaux_tc).
GROUP_SCORES = ("max", "top2_sum")


@dataclass(frozen=True)
class MoEConfig:
    num_experts: int  # routed experts
    top_k: int  # experts per token
    intermediate_size: int  # of one routed expert
    moe_layers: tuple[bool, ...]  # per layer: True for a MoE MLP, False for a dense one
    scoring: str = "softmax"  # router score: softmax over experts, or DeepSeek-V3's sigmoid
    renormalize: bool = True  # top-k weights divided by their sum (norm_topk_prob)
    num_groups: int = 1  # group-limited routing: experts in n_group groups...
    topk_groups: int = 1  # ...of which the best topk_group are searched
    group_score: str = "max"  # one of GROUP_SCORES
    routed_scaling_factor: float = 1.0
    score_correction_bias: bool = False  # DeepSeek-V3's e_score_correction_bias (selection only)
    shared_intermediate_size: int = 0  # all shared experts as one MLP of this width (0: none)

    def __post_init__(self) -> None:
        if self.scoring not in SCORINGS:
            raise ValueError(f"router scoring {self.scoring!r} is not one of {', '.join(SCORINGS)}")
        if not 0 < self.top_k <= self.num_experts:
            raise ValueError(f"num_experts_per_tok={self.top_k} must be in 1..{self.num_experts}")
        if self.num_experts % self.num_groups:
            raise ValueError(f"n_group={self.num_groups} does not divide {self.num_experts} experts")
        if self.group_score not in GROUP_SCORES:
            raise ValueError(f"group score {self.group_score!r} is not one of {', '.join(GROUP_SCORES)}")
        if self.group_score == "top2_sum" and self.num_experts // self.num_groups < 2:
            raise ValueError("a top2_sum group score needs at least 2 experts per group")
        if not 0 < self.topk_groups <= self.num_groups:
            raise ValueError(f"topk_group={self.topk_groups} must be in 1..{self.num_groups}")

    @property
    def num_moe_layers(self) -> int:
        return sum(self.moe_layers)
