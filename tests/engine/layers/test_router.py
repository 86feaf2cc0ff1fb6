"""Expert selection (engine/layers/router.py) against transformers' own routers on random hidden
states: the same experts per token, the same weights to fp32 rounding."""

from __future__ import annotations

import pytest
import torch
from transformers import DeepseekV2Config, DeepseekV3Config, MixtralConfig, Qwen3MoeConfig
from transformers.models.deepseek_v2.modeling_deepseek_v2 import DeepseekV2TopkRouter
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter
from transformers.models.mixtral.modeling_mixtral import MixtralTopKRouter
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeTopKRouter

from engine.checkpoint.moe_config import MoEConfig
from engine.layers.router import Router, select_experts

HIDDEN, EXPERTS, TOKENS = 32, 16, 64


def _assert_same_routing(ours, theirs) -> None:
    """Per token, the same set of experts with the same weights (orders may differ: sorted=False)."""
    (weights, ids), (ref_weights, ref_ids) = ours, theirs
    order, ref_order = ids.argsort(dim=-1), ref_ids.argsort(dim=-1)
    torch.testing.assert_close(ids.gather(1, order), ref_ids.long().gather(1, ref_order), rtol=0, atol=0)
    torch.testing.assert_close(weights.gather(1, order), ref_weights.float().gather(1, ref_order))
    assert weights.dtype == torch.float32


def _routed(hf_router, moe: MoEConfig, hidden: torch.Tensor, bias: torch.Tensor | None = None):
    router = Router(HIDDEN, moe, torch.device("cpu"))
    with torch.no_grad():
        router.weight.copy_(hf_router.weight)
        if bias is not None:
            router.e_score_correction_bias.copy_(bias)
        _, ref_weights, ref_ids = hf_router(hidden)
    return router(hidden), (ref_weights, ref_ids)


@pytest.fixture
def hidden():
    return torch.randn(TOKENS, HIDDEN, generator=torch.Generator().manual_seed(0))


def _seeded(module):
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        module.weight.copy_(torch.randn(module.weight.shape, generator=gen))
    return module


@pytest.mark.parametrize("renormalize", [True, False])
def test_softmax_top_k_matches_qwen3_moe(hidden, renormalize):
    config = Qwen3MoeConfig(
        hidden_size=HIDDEN, num_experts=EXPERTS, num_experts_per_tok=4, norm_topk_prob=renormalize
    )
    moe = MoEConfig(EXPERTS, 4, 8, (True,), renormalize=renormalize)
    ours, theirs = _routed(_seeded(Qwen3MoeTopKRouter(config)), moe, hidden)
    _assert_same_routing(ours, theirs)
    sums = ours[0].sum(dim=-1)
    assert torch.allclose(sums, torch.ones_like(sums)) == renormalize


def test_softmax_top_2_matches_mixtral(hidden):
    config = MixtralConfig(hidden_size=HIDDEN, num_local_experts=EXPERTS, num_experts_per_tok=2)
    moe = MoEConfig(EXPERTS, 2, 8, (True,), renormalize=True)
    _assert_same_routing(*_routed(_seeded(MixtralTopKRouter(config)), moe, hidden))


@pytest.mark.parametrize("grouped", [False, True])
def test_softmax_group_limited_greedy_matches_deepseek_v2(hidden, grouped):
    """V2 ranks a group by its best expert; 'greedy' is the ungrouped case. No renormalisation."""
    config = DeepseekV2Config(
        hidden_size=HIDDEN,
        n_routed_experts=EXPERTS,
        num_experts_per_tok=3,
        topk_method="group_limited_greedy" if grouped else "greedy",
        n_group=4,
        topk_group=2,
        routed_scaling_factor=16.0,
    )
    groups = dict(num_groups=4, topk_groups=2, group_score="max") if grouped else {}
    moe = MoEConfig(EXPERTS, 3, 8, (True,), renormalize=False, routed_scaling_factor=16.0, **groups)
    ours, theirs = _routed(_seeded(DeepseekV2TopkRouter(config)), moe, hidden)
    _assert_same_routing(ours, theirs)
    if grouped:  # every token's experts lie in at most 2 of the 4 groups
        assert max(len(set((ids // 4).tolist())) for ids in ours[1]) == 2


@pytest.mark.parametrize("renormalize", [True, False])
def test_sigmoid_with_bias_and_top2_sum_groups_matches_deepseek_v3(hidden, renormalize):
    """V3: sigmoid scores, the correction bias shifts the choice but not the weights, a group ranks
    by the sum of its best two choice scores."""
    config = DeepseekV3Config(
        hidden_size=HIDDEN,
        n_routed_experts=EXPERTS,
        num_experts_per_tok=4,
        n_group=4,
        topk_group=2,
        norm_topk_prob=renormalize,
        routed_scaling_factor=2.5,
    )
    moe = MoEConfig(
        EXPERTS,
        4,
        8,
        (True,),
        scoring="sigmoid",
        renormalize=renormalize,
        num_groups=4,
        topk_groups=2,
        group_score="top2_sum",
        routed_scaling_factor=2.5,
        score_correction_bias=True,
    )
    hf_router = _seeded(DeepseekV3TopkRouter(config))
    bias = torch.randn(EXPERTS, generator=torch.Generator().manual_seed(2))
    hf_router.e_score_correction_bias.copy_(bias)
    ours, theirs = _routed(hf_router, moe, hidden, bias)
    _assert_same_routing(ours, theirs)
    unbiased = select_experts(hidden @ hf_router.weight.t(), moe, None)[1]
    assert not torch.equal(unbiased.sort(dim=-1).values, ours[1].sort(dim=-1).values)  # the bias mattered


def test_a_group_score_needs_two_experts_per_group():
    with pytest.raises(ValueError, match="at least 2 experts per group"):
        MoEConfig(8, 2, 8, (True,), num_groups=8, topk_groups=2, group_score="top2_sum")
