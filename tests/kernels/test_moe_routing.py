"""The routing kernels (kernels/moe_routing.py) against ``select_experts`` on torch's fp32 logits:
the same experts per token, their weights to fp32 rounding, in descending order of choice."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine.checkpoint.moe_config import MoEConfig
from engine.layers.router import Router, _limit_to_best_groups, select_experts
from kernels import _common
from kernels import moe_routing as routing_module
from kernels.invariance import set_batch_invariant
from kernels.moe_routing import RoutingTiles, route, takes_routing_kernel

HIDDEN = 64


def _moe(experts: int, top_k: int, **options) -> MoEConfig:
    return MoEConfig(experts, top_k, 8, (True,), **options)


def _operands(tokens, experts, device, dtype=torch.float32, bias=False, hidden=HIDDEN):
    x = torch.randn(tokens, hidden, device=device).to(dtype)
    weight = torch.randn(experts, hidden, device=device) / hidden**0.25  # logits of a few units
    correction_bias = 0.1 * torch.randn(experts, device=device) if bias else None
    return x, weight, correction_bias


def _assert_routes_as_reference(moe, x, weight, correction_bias=None, tiles=None):
    weights, ids = route(x, weight, moe, correction_bias, tiles)
    logits = F.linear(x.float(), weight)
    ref_weights, ref_ids = select_experts(logits, moe, correction_bias)
    assert weights.dtype == torch.float32 and ids.dtype == torch.int64
    assert weights.shape == ids.shape == (x.shape[0], moe.top_k)
    order, ref_order = ids.argsort(dim=-1), ref_ids.argsort(dim=-1)
    torch.testing.assert_close(ids.gather(1, order), ref_ids.gather(1, ref_order), rtol=0, atol=0)
    torch.testing.assert_close(
        weights.gather(1, order), ref_weights.gather(1, ref_order), rtol=1e-5, atol=1e-6
    )
    scores = logits.sigmoid() if moe.scoring == "sigmoid" else logits.softmax(dim=-1)
    choice = scores if correction_bias is None else scores + correction_bias
    chosen = choice.gather(1, ids)
    assert (chosen[:, :-1] >= chosen[:, 1:]).all(), "experts are not in descending order of choice"
    return weights, ids


# (experts, top_k, tokens, x dtype): every E, k and T of the brief, both input dtypes, the FMA tiles
# (T <= FMA_MAX_TOKENS) and the tl.dot tiles (T = 17).
SHAPES = [
    (8, 1, 1, torch.bfloat16),
    (8, 2, 17, torch.float32),
    (64, 6, 1, torch.bfloat16),
    (64, 6, 17, torch.bfloat16),
    (128, 8, 3, torch.float32),
    (128, 8, 17, torch.bfloat16),
]


@pytest.mark.parametrize("experts, top_k, tokens, dtype", SHAPES)
@pytest.mark.parametrize("scoring", ["softmax", "sigmoid"])
@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
# Renormalisation and scaling are independent epilogue steps: one case with each off covers both.
@pytest.mark.parametrize("renormalize, scaling", [(True, 1.0), (False, 2.5)])
def test_routing_matches_select_experts(
    device, force_triton, experts, top_k, tokens, dtype, scoring, bias, renormalize, scaling
):
    moe = _moe(experts, top_k, scoring=scoring, renormalize=renormalize, routed_scaling_factor=scaling,
               score_correction_bias=bias)  # fmt: skip
    _assert_routes_as_reference(moe, *_operands(tokens, experts, device, dtype, bias))


# (experts, groups, kept groups, top_k): DeepSeek-V2-Lite-like, V3-like, and groups of 6 and 5
# experts (padded to 8 in the kernel's [group, expert] tile).
GROUPINGS = [(64, 8, 3, 6), (32, 8, 4, 8), (24, 4, 2, 3), (20, 4, 1, 2)]


@pytest.mark.parametrize("experts, groups, kept, top_k", GROUPINGS)
@pytest.mark.parametrize("group_score", ["max", "top2_sum"])
@pytest.mark.parametrize("scoring, bias", [("softmax", False), ("sigmoid", True)])
@pytest.mark.parametrize("tokens", [1, 17])
def test_group_limited_routing_matches_select_experts(
    device, force_triton, experts, groups, kept, top_k, group_score, scoring, bias, tokens
):
    moe = _moe(experts, top_k, scoring=scoring, num_groups=groups, topk_groups=kept, group_score=group_score,
               renormalize=bias, routed_scaling_factor=2.5 if bias else 1.0, score_correction_bias=bias)  # fmt: skip
    _, ids = _assert_routes_as_reference(moe, *_operands(tokens, experts, device, torch.bfloat16, bias))
    assert max(len(set((row // (experts // groups)).tolist())) for row in ids) <= kept


@pytest.mark.parametrize(
    "tiles",
    [
        RoutingTiles(1, 4, 16, 3),
        RoutingTiles(1, 8, 32, 1),
        RoutingTiles(16, 32, 16, 2),
        RoutingTiles(16, 16, 16, 4),
        RoutingTiles(64, 64, 32, 2),  # a prompt chunk's (choose_tiles from WIDE_MIN_TOKENS)
    ],
    ids=str,
)
@pytest.mark.parametrize("tokens", [1, 3, 17, 70])
def test_every_tile_and_hidden_split_gives_the_same_routing(device, force_triton, tiles, tokens):
    """Hidden size 72: a ragged last K step, and splits whose sums kernel 2 adds in order."""
    moe = _moe(40, 4, renormalize=True)
    _assert_routes_as_reference(moe, *_operands(tokens, 40, device, torch.bfloat16, hidden=72), tiles=tiles)


def test_prompt_chunks_take_wide_tiles_and_small_batches_keep_theirs():
    from kernels.moe_routing import WIDE_MIN_TOKENS, choose_tiles

    cpu = torch.device("cpu")
    assert choose_tiles(1, 64, 2048, cpu)[:3] == (1, 2, 512)
    assert choose_tiles(128, 64, 2048, cpu)[:3] == (16, 32, 32)
    assert choose_tiles(WIDE_MIN_TOKENS, 64, 2048, cpu)[:3] == (64, 64, 32)
    assert choose_tiles(2048, 128, 2048, cpu)[:3] == (64, 64, 32)  # Qwen3-30B-A3B: two expert blocks
    assert choose_tiles(2048, 40, 2048, cpu)[:3] == (64, 64, 32)


def test_a_tie_goes_to_the_lowest_expert(device, force_triton):
    """Equal logits (a zero input row): experts in id order, as weights renormalised to 1/k each."""
    x = torch.zeros(2, HIDDEN, device=device)
    weights, ids = route(x, torch.randn(8, HIDDEN, device=device), _moe(8, 3, renormalize=True))
    assert ids.tolist() == [[0, 1, 2], [0, 1, 2]]
    torch.testing.assert_close(weights, torch.full((2, 3), 1 / 3, device=device))


def test_top_k_past_the_kept_groups_still_gives_distinct_experts(device, force_triton):
    """Four experts from one kept group of two: the two of the kept group first, then (their choice
    being -inf, which torch.topk picks in no fixed order) the lowest other ids, never padding or twice."""
    moe = _moe(12, 4, num_groups=6, topk_groups=1)
    x, weight, _ = _operands(5, 12, device)
    _, ids = route(x, weight, moe)
    kept = _limit_to_best_groups(F.linear(x, weight).softmax(dim=-1), moe).isfinite()
    for row, kept_row in zip(ids.tolist(), kept.tolist(), strict=True):
        inside = [e for e in range(12) if kept_row[e]]
        assert sorted(row[:2]) == inside
        assert row[2:] == [e for e in range(12) if not kept_row[e]][:2]


def test_takes_routing_kernel_at_every_size_outside_batch_invariant_mode(monkeypatch):
    monkeypatch.setattr(_common._switch, "mode", "triton")
    weight = torch.randn(8, HIDDEN)
    assert takes_routing_kernel(torch.randn(1, HIDDEN), weight)
    assert takes_routing_kernel(torch.randn(8192, HIDDEN), weight)  # a prefill step's tokens
    assert not takes_routing_kernel(torch.randn(0, HIDDEN), weight)  # an idle expert-parallel rank
    assert not takes_routing_kernel(torch.randn(HIDDEN, 2).t(), weight)  # strided along H
    before = set_batch_invariant(True)
    try:
        assert not takes_routing_kernel(torch.randn(1, HIDDEN), weight)
    finally:
        set_batch_invariant(before)
    monkeypatch.setattr(_common._switch, "mode", "torch")
    assert not takes_routing_kernel(torch.randn(1, HIDDEN), weight)
    monkeypatch.setattr(_common._switch, "mode", "auto")
    assert not takes_routing_kernel(torch.randn(1, HIDDEN), weight)  # CPU tensors: auto never interprets


def test_bad_operands_are_refused(monkeypatch):
    monkeypatch.setattr(_common._switch, "mode", "triton")
    moe = _moe(8, 2)
    x, weight = torch.randn(2, HIDDEN), torch.randn(8, HIDDEN)
    with pytest.raises(ValueError, match="float32"):
        route(x, weight.bfloat16(), moe)
    with pytest.raises(ValueError, match=r"\[T, H\]"):
        route(x[:, :-1], weight, moe)
    with pytest.raises(ValueError, match="experts"):
        route(x, weight[:4], moe)
    with pytest.raises(ValueError, match="correction_bias"):
        route(x, weight, moe, torch.zeros(4))
    with pytest.raises(ValueError, match="at least one token"):
        route(torch.randn(0, HIDDEN), weight, moe)
    with pytest.raises(ValueError, match="counts must be int64"):
        route(x, weight, moe, counts=torch.zeros(8, dtype=torch.int32))
    monkeypatch.setattr(_common._switch, "mode", "torch")
    with pytest.raises(ValueError, match="takes_routing_kernel"):
        route(x, weight, moe)


def _router(device):
    moe = _moe(16, 4, scoring="sigmoid", num_groups=4, topk_groups=2, group_score="top2_sum",
               routed_scaling_factor=2.5, score_correction_bias=True)  # fmt: skip
    router = Router(HIDDEN, moe, device)
    _, weight, bias = _operands(1, 16, device, bias=True)
    with torch.no_grad():
        router.weight.copy_(weight)
        router.e_score_correction_bias.copy_(bias)
    return router


@pytest.mark.parametrize("tokens", [3, 300])
def test_router_takes_the_kernel_and_counts_the_tokens_per_expert(device, force_triton, monkeypatch, tokens):
    router = _router(device)
    launches = []
    original = routing_module._launch
    monkeypatch.setattr(routing_module, "_launch", lambda *args: launches.append(1) or original(*args))
    x = torch.randn(tokens, HIDDEN, device=device).bfloat16()
    counts = torch.full((16,), 5, dtype=torch.int64, device=device)
    weights, ids = router(x, counts)
    assert launches == [1]
    assert counts.tolist() == (5 + torch.bincount(ids.reshape(-1).cpu(), minlength=16)).tolist()
    ref_weights, ref_ids = select_experts(
        F.linear(x.float(), router.weight), router.moe, router.e_score_correction_bias
    )
    order, ref_order = ids.argsort(dim=-1), ref_ids.argsort(dim=-1)
    torch.testing.assert_close(ids.gather(1, order), ref_ids.gather(1, ref_order), rtol=0, atol=0)
    torch.testing.assert_close(
        weights.gather(1, order), ref_weights.gather(1, ref_order), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("triton", [True, False])
def test_only_rows_before_counted_rows_are_counted(device, monkeypatch, triton, request):
    """Rows past ``counted_rows`` pad a captured CUDA graph's size: routed, never counted, on the
    kernel path and the torch one alike."""
    if triton:
        request.getfixturevalue("force_triton")
    elif device.type != "cpu":
        pytest.skip("the torch path is the CPU's")
    router = _router(device)
    x = torch.randn(9, HIDDEN, device=device)
    counts = torch.zeros(16, dtype=torch.int64, device=device)
    counted_rows = torch.tensor([4], device=device)
    _, ids = router(x, counts, counted_rows)
    assert counts.tolist() == torch.bincount(ids[:4].reshape(-1).cpu(), minlength=16).tolist()
    _, all_ids = router(x)
    assert torch.equal(ids, all_ids)  # the padding rows are routed all the same


def test_counted_rows_must_be_one_integer(monkeypatch):
    monkeypatch.setattr(_common, "use_triton", lambda *t: True)
    moe = _moe(16, 4)
    x, weight, _ = _operands(3, 16, torch.device("cpu"))
    counts = torch.zeros(16, dtype=torch.int64)
    with pytest.raises(ValueError, match="counted_rows must be one int32 or int64 value"):
        route(x, weight, moe, counts=counts, counted_rows=torch.tensor([1.0]))


def test_router_keeps_the_torch_path_in_batch_invariant_mode(monkeypatch):
    monkeypatch.setattr(_common._switch, "mode", "triton")
    monkeypatch.setattr(routing_module, "_launch", None)  # would fail if called
    router = _router(torch.device("cpu"))
    x = torch.randn(9, HIDDEN)
    counts = torch.zeros(16, dtype=torch.int64)
    before = set_batch_invariant(True)
    try:
        weights, ids = router(x, counts)
    finally:
        set_batch_invariant(before)
    ref = select_experts(F.linear(x, router.weight), router.moe, router.e_score_correction_bias)
    torch.testing.assert_close((weights, ids), ref, rtol=0, atol=0)
    assert counts.tolist() == torch.bincount(ids.reshape(-1), minlength=16).tolist()


@pytest.mark.parametrize("tokens", [1, 17])
def test_shared_slots_follow_the_top_k_at_weight_one(device, force_triton, tokens):
    """DeepSeek-V2-like grouped routing with 2 shared experts fused: the first k slots are the
    routing without them, then experts 64 and 65 at weight 1; only the routed slots are counted."""
    moe = _moe(64, 6, num_groups=8, topk_groups=3, group_score="max")
    x, weight, _ = _operands(tokens, 64, device, torch.bfloat16)
    plain_weights, plain_ids = route(x, weight, moe)
    counts = torch.zeros(64, dtype=torch.int64, device=device)
    weights, ids = route(x, weight, moe, counts=counts, shared_slots=2)
    assert ids.shape == weights.shape == (tokens, 8)
    torch.testing.assert_close(ids[:, :6], plain_ids, rtol=0, atol=0)
    torch.testing.assert_close(weights[:, :6], plain_weights, rtol=0, atol=0)
    assert ids[:, 6:].tolist() == [[64, 65]] * tokens
    assert weights[:, 6:].tolist() == [[1.0, 1.0]] * tokens
    assert counts.tolist() == torch.bincount(plain_ids.reshape(-1).cpu(), minlength=64).tolist()


def test_negative_shared_slots_are_refused(monkeypatch):
    monkeypatch.setattr(_common._switch, "mode", "triton")
    x, weight, _ = _operands(1, 8, torch.device("cpu"))
    with pytest.raises(ValueError, match="shared_slots must be >= 0"):
        route(x, weight, _moe(8, 2), shared_slots=-1)
