"""The mixture-of-experts MLP (engine/layers/moe.py) against transformers' DeepSeek-V3 MoE block
(routed experts, group-limited sigmoid routing with the correction bias, shared experts), its
tensor-parallel slices, and its per-expert token counts."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from transformers import DeepseekV3Config
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE

from engine.checkpoint.moe_config import MoEConfig
from engine.distributed.group import TPGroup
from engine.layers import linear
from engine.layers import moe as moe_module
from engine.layers.moe import MoE, routing_statistics
from kernels import _common

HIDDEN, EXPERTS, TOP_K, INTER, SHARED = 32, 16, 4, 8, 2
CPU = torch.device("cpu")
MOE = MoEConfig(
    EXPERTS,
    TOP_K,
    INTER,
    (True,),
    scoring="sigmoid",
    num_groups=4,
    topk_groups=2,
    group_score="top2_sum",
    routed_scaling_factor=2.5,
    score_correction_bias=True,
    shared_intermediate_size=SHARED * INTER,
)


@pytest.fixture(scope="module")
def reference() -> DeepseekV3MoE:
    config = DeepseekV3Config(
        hidden_size=HIDDEN,
        n_routed_experts=EXPERTS,
        num_experts_per_tok=TOP_K,
        moe_intermediate_size=INTER,
        n_shared_experts=SHARED,
        n_group=4,
        topk_group=2,
        routed_scaling_factor=2.5,
    )
    block = DeepseekV3MoE(config).eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in block.parameters():
            param.copy_(0.3 * torch.randn(param.shape, generator=gen))
        block.gate.e_score_correction_bias.copy_(torch.randn(EXPERTS, generator=gen))
    return block


def _ours(reference: DeepseekV3MoE, tp: TPGroup = TPGroup()) -> MoE:
    """Our MoE loaded from the reference's weights, as a hub checkpoint names them per expert."""
    moe = MoE(HIDDEN, MOE, torch.float32, CPU, tp)
    experts = reference.experts
    with torch.no_grad():
        moe.gate.weight.copy_(reference.gate.weight)
        moe.gate.e_score_correction_bias.copy_(reference.gate.e_score_correction_bias)
        for e in range(EXPERTS):
            gate, up = experts.gate_up_proj[e].chunk(2, dim=0)
            moe.experts.load_projection(e, "gate_proj", gate)
            moe.experts.load_projection(e, "up_proj", up)
            moe.experts.load_projection(e, "down_proj", experts.down_proj[e])
        shared = reference.shared_experts
        moe.shared_experts.gate_up_proj.load("weight", shared.gate_proj.weight, 0)
        moe.shared_experts.gate_up_proj.load("weight", shared.up_proj.weight, 1)
        moe.shared_experts.down_proj.load("weight", shared.down_proj.weight)
    return moe


def _tokens(n: int = 40) -> torch.Tensor:
    return torch.randn(n, HIDDEN, generator=torch.Generator().manual_seed(1))


def test_moe_with_shared_experts_matches_deepseek_v3(reference):
    x = _tokens()
    with torch.no_grad():
        expected = reference(x[None])[0]
    torch.testing.assert_close(_ours(reference)(x), expected, rtol=1e-5, atol=1e-5)


def test_tensor_parallel_partials_sum_to_the_whole(reference, monkeypatch):
    """Each of 2 ranks keeps half of every expert's (and the shared experts') intermediate rows; the
    sum of their partial outputs (what the all-reduce computes) is the unsplit output."""
    monkeypatch.setattr(dist, "all_reduce", lambda tensor: None)  # hand each rank's partial back
    x = _tokens()
    whole = _ours(reference)(x)
    ranks = [_ours(reference, TPGroup(rank=r, world_size=2)) for r in range(2)]
    assert ranks[0].experts.w13.shape == (EXPERTS, INTER, HIDDEN)  # 2 * INTER / 2 rows
    assert ranks[1].experts.w2.shape == (EXPERTS, HIDDEN, INTER // 2)
    torch.testing.assert_close(
        ranks[1].experts.w2[3], reference.experts.down_proj[3][:, INTER // 2 :], rtol=0, atol=0
    )
    partials = [rank(x) for rank in ranks]
    assert not torch.allclose(partials[0], whole)
    torch.testing.assert_close(partials[0] + partials[1], whole, rtol=1e-5, atol=1e-5)


def test_tokens_per_expert_are_counted(reference):
    moe = _ours(reference)
    model = torch.nn.ModuleDict({"layer": moe})
    assert routing_statistics(model) == {"layer": [0] * EXPERTS}
    x = _tokens(25)
    moe(x)
    moe(x[:5])
    _, ids = moe.gate(torch.cat([x, x[:5]]))
    expected = torch.bincount(ids.reshape(-1), minlength=EXPERTS).tolist()
    assert routing_statistics(model) == {"layer": expected}
    assert sum(expected) == 30 * TOP_K


def test_an_expert_tensor_of_the_wrong_shape_is_refused(reference):
    moe = MoE(HIDDEN, MOE, torch.float32, CPU)
    with pytest.raises(ValueError, match=r"shape \(8, 31\), expected \(8, 32\)"):
        moe.experts.load_projection(0, "gate_proj", torch.zeros(INTER, HIDDEN - 1))
    with pytest.raises(ValueError, match="expert 16 is out of range"):
        moe.experts.load_projection(EXPERTS, "down_proj", torch.zeros(HIDDEN, INTER))


def test_decode_sized_shared_experts_fold_the_activation_into_the_gemv(reference, monkeypatch):
    """At decode sizes the shared experts' down projection is one GEMV that forms silu(gate) * up
    while loading its input, as GatedMLP's is (CPU: Triton's interpreter)."""
    if torch.cuda.is_available():
        pytest.skip("Triton on CPU tensors needs the interpreter, which is off where CUDA exists")
    monkeypatch.setattr(_common._switch, "mode", "triton")
    monkeypatch.setattr(linear.gemv_switch, "mode", "triton")
    rows = []
    fused = moe_module.gemv_silu

    def recorded(gate_up, weight, *args, **kwargs):
        rows.append(gate_up.shape[0])
        return fused(gate_up, weight, *args, **kwargs)

    monkeypatch.setattr(moe_module, "gemv_silu", recorded)
    x = _tokens(3)
    with torch.no_grad():
        expected = reference(x[None])[0]
    torch.testing.assert_close(_ours(reference)(x), expected, rtol=1e-4, atol=1e-4)
    assert rows == [3]


def test_shared_experts_fused_as_routed_ones_match_deepseek_v3(reference):
    """Fused, the 2 shared experts are experts 16 and 17 of w13/w2, every token routed to them at
    weight 1 (torch path: the router appends them); the output is the reference's, the routed
    experts' counts unchanged."""
    moe = _ours(reference)
    assert moe.shared_slots_possible() == SHARED
    moe.fuse_shared_experts()
    assert moe.shared_experts is None
    assert moe.experts.w13.shape == (EXPERTS + SHARED, 2 * INTER, HIDDEN)
    assert moe.experts.w2.shape == (EXPERTS + SHARED, HIDDEN, INTER)
    x = _tokens()
    with torch.no_grad():
        expected = reference(x[None])[0]
    torch.testing.assert_close(moe(x), expected, rtol=1e-5, atol=1e-5)
    weights, ids = moe.gate(x)
    assert ids[:, TOP_K:].tolist() == [[EXPERTS, EXPERTS + 1]] * len(x)
    assert weights[:, TOP_K:].tolist() == [[1.0, 1.0]] * len(x)
    assert moe.expert_token_counts.sum().item() == len(x) * TOP_K  # the shared slots are not counted


@pytest.mark.parametrize("tokens", [1, 3, 17], ids=lambda t: f"{t}tok")
def test_fused_shared_experts_on_the_triton_kernels_match_the_separate_ones(reference, monkeypatch, tokens):
    """Triton's interpreter on CPU: the routing kernel appends the shared slots, and the expert
    kernels (small-batch GEMVs at 1 and 3 tokens, grouped GEMMs at 17) run them with the routed ones."""
    if torch.cuda.is_available():
        pytest.skip("Triton on CPU tensors needs the interpreter, which is off where CUDA exists")
    monkeypatch.setattr(_common._switch, "mode", "triton")
    monkeypatch.setattr(linear.gemv_switch, "mode", "triton")
    x = _tokens(tokens)
    separate = _ours(reference)(x)
    fused = _ours(reference)
    fused.fuse_shared_experts()
    torch.testing.assert_close(fused(x), separate, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "mode, triton, fused", [("auto", False, 0), ("auto", True, 1), ("fused", False, 1), ("separate", True, 0)]
)
def test_fuse_shared_experts_follows_the_mode(reference, monkeypatch, mode, triton, fused):
    """auto fuses where the Triton expert kernels run (CUDA); tensor parallel never fuses."""
    monkeypatch.setattr(_common._switch, "mode", "triton" if triton else "torch")
    monkeypatch.setattr(moe_module.shared_experts_switch, "mode", mode)
    model = torch.nn.ModuleDict({"layer": _ours(reference)})
    assert moe_module.fuse_shared_experts(model) == fused
    assert (model["layer"].shared_experts is None) == bool(fused)
    monkeypatch.setattr(dist, "all_reduce", lambda tensor: None)
    split = torch.nn.ModuleDict({"layer": _ours(reference, TPGroup(rank=0, world_size=2))})
    assert moe_module.fuse_shared_experts(split) == 0
