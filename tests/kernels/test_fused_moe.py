import pytest
import torch
import torch.nn.functional as F

from kernels import fused_moe as fused_moe_module
from kernels.fused_moe import fused_moe, fused_moe_reference
from kernels.fused_moe_configs import SMALL_BATCH_MAX_PAIRS, MoeConfig, MoeGemvConfig
from kernels.moe_align import max_padded_pairs, moe_align_block_size
from tests.kernels.tolerances import assert_close

HIDDEN, INTER, EXPERTS, TOP_K = 40, 24, 6, 2


def make_moe(tokens, device="cpu", dtype=torch.float32, experts=EXPERTS, top_k=TOP_K, ids_dtype=torch.int64,
             unused_experts=(3,), hidden=HIDDEN, inter=INTER):  # fmt: skip
    """Random weights and routing with distinct experts per token; ``unused_experts`` get no tokens."""
    x = torch.randn(tokens, hidden, device=device).to(dtype)
    w13 = (torch.randn(experts, 2 * inter, hidden, device=device) / hidden**0.5).to(dtype)
    w2 = (torch.randn(experts, hidden, inter, device=device) / inter**0.5).to(dtype)
    allowed = torch.tensor([e for e in range(experts) if e not in unused_experts])
    ids = torch.stack([allowed[torch.randperm(len(allowed))[:top_k]] for _ in range(tokens)])
    weights = torch.rand(tokens, top_k)
    return x, w13, w2, weights.to(device), ids.to(ids_dtype).to(device)


def naive_moe(x, w13, w2, weights, ids):
    """float64, one token and slot at a time, straight from the definition."""
    x, w13, w2 = x.double().cpu(), w13.double().cpu(), w2.double().cpu()
    inter = w2.shape[2]
    out = torch.zeros(x.shape, dtype=torch.float64)
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            gate_up = w13[e] @ x[t]
            out[t] += float(weights[t, j]) * (w2[e] @ (F.silu(gate_up[:inter]) * gate_up[inter:]))
    return out


@pytest.mark.parametrize("tokens", [1, 9])
@pytest.mark.parametrize("ids_dtype", [torch.int32, torch.int64])
def test_reference_matches_float64(tokens, ids_dtype):
    args = make_moe(tokens, ids_dtype=ids_dtype)
    actual = fused_moe_reference(*args)
    assert actual.shape == (tokens, HIDDEN) and actual.dtype == torch.float32
    torch.testing.assert_close(actual.double(), naive_moe(*args), atol=1e-5, rtol=1e-5)


def test_alignment_groups_pairs_by_expert_in_whole_tiles():
    ids = torch.tensor([[2, 0], [2, 4], [0, 2]])  # experts 1 and 3 get nothing
    aligned = moe_align_block_size(ids, 5, 4)
    assert aligned.sorted_pair_ids.numel() == max_padded_pairs(6, 5, 4)
    assert int(aligned.num_tokens_post_padded) == 12
    in_use = aligned.sorted_pair_ids[:12].view(3, 4).tolist()
    assert in_use == [[1, 4, 6, 6], [0, 2, 5, 6], [3, 6, 6, 6]]  # pair 6 = T*k: padding
    assert aligned.expert_ids.tolist()[:3] == [0, 2, 4]
    assert set(aligned.expert_ids.tolist()[3:]) <= {-1}


@pytest.mark.parametrize("tokens", [1, 7])
def test_triton_matches_reference(device, force_triton, tokens):
    args = make_moe(tokens, device)
    assert_close(fused_moe(*args), fused_moe_reference(*args), torch.float32)


def test_triton_tiles_spanning_several_experts_and_k_steps(device, force_triton):
    """Several row tiles per expert, columns and K not multiples of the tile, int32 ids."""
    args = make_moe(21, device, ids_dtype=torch.int32, unused_experts=(0, 5))
    config = MoeConfig(block_m=16, block_n=16, block_k=16)
    assert_close(fused_moe(*args, config=config), fused_moe_reference(*args), torch.float32)


def test_triton_with_k_a_multiple_of_the_tile(device, force_triton):
    """Both reductions (hidden 64, intermediate 32) in whole 16-wide steps: the unmasked K loop."""
    args = make_moe(11, device, hidden=64, inter=32)
    config = MoeConfig(block_m=16, block_n=32, block_k=16)
    assert_close(fused_moe(*args, config=config), fused_moe_reference(*args), torch.float32)


def test_the_combine_adds_each_tokens_weighted_slots_left_to_right(device, monkeypatch):
    """Bit for bit the fp32 sum over the token's own slots in slot order, also with its hidden
    columns split over several programs (the last one ragged)."""
    if torch.cuda.is_available() and device.type == "cpu":
        pytest.skip("Triton on CPU tensors needs the interpreter, which is off where CUDA exists")
    monkeypatch.setattr(fused_moe_module, "COMBINE_BLOCK_N", 16)  # hidden 40: programs of 16, 16, 8
    tokens, top_k = 7, 3
    products = torch.randn(tokens * top_k, HIDDEN, device=device)
    weights = torch.rand(tokens, top_k, device=device)
    expected = torch.zeros(tokens, HIDDEN, device=device)
    for j in range(top_k):
        expected = expected + products.view(tokens, top_k, HIDDEN)[:, j] * weights[:, j : j + 1]
    assert torch.equal(fused_moe_module.combine_products(products, weights), expected)


def test_a_grouped_tokens_result_is_the_same_alone_as_among_others(
    device, force_triton, row_invariant_dot, monkeypatch
):
    """With the GPU's row-wise dot (``row_invariant_dot`` under the interpreter), the same bits for
    a token alone as in a batch that shares its experts' tiles, the combine split over programs."""
    monkeypatch.setattr(fused_moe_module, "COMBINE_BLOCK_N", 16)
    x, w13, w2, weights, ids = make_moe(13, device, top_k=3)
    config = MoeConfig(block_m=16, block_n=16, block_k=16)
    together = fused_moe(x, w13, w2, weights, ids, config=config)
    assert_close(together, fused_moe_reference(x, w13, w2, weights, ids), torch.float32)
    for t in (0, 6, 12):
        alone = fused_moe(x[t : t + 1], w13, w2, weights[t : t + 1], ids[t : t + 1], config=config)
        assert torch.equal(alone[0], together[t])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="bf16 tensor-core GEMMs need CUDA")
@pytest.mark.parametrize("tokens", [1, 64, 300])
def test_triton_bf16_matches_reference(force_triton, tokens):
    args = make_moe(tokens, "cuda", torch.bfloat16)
    assert_close(fused_moe(*args), fused_moe_reference(*args), torch.bfloat16)


@pytest.mark.parametrize("tokens", [1, 2, 5])
@pytest.mark.parametrize("top_k", [2, 6])
@pytest.mark.parametrize("down_block_n", [16, 2])
def test_small_batch_matches_reference(device, force_triton, tokens, top_k, down_block_n):
    """Eight experts; hidden 40 and intermediate 24 fill neither the column tiles nor the K steps."""
    args = make_moe(tokens, device, experts=8, top_k=top_k)
    config = MoeGemvConfig(up_block_n=16, down_block_n=down_block_n, block_k=16)
    assert_close(fused_moe(*args, config=config), fused_moe_reference(*args), torch.float32)


def test_small_batch_with_k_a_multiple_of_the_tile(device, force_triton):
    """Both reductions (hidden 64, intermediate 32) in whole 16-wide steps: the unmasked K loop."""
    args = make_moe(3, device, experts=8, top_k=6, hidden=64, inter=32, ids_dtype=torch.int32)
    config = MoeGemvConfig(up_block_n=16, down_block_n=8, block_k=16)
    assert_close(fused_moe(*args, config=config), fused_moe_reference(*args), torch.float32)


def _spy_on_paths(monkeypatch):
    calls = []
    for name in ("_launch_small_batch", "_launch_grouped"):
        original = getattr(fused_moe_module, name)

        def spy(*args, _name=name, _original=original, **kwargs):
            calls.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(fused_moe_module, name, spy)
    return calls


@pytest.mark.parametrize(
    ("tokens", "path"),
    [(1, "_launch_small_batch"), (SMALL_BATCH_MAX_PAIRS // 2, "_launch_small_batch"),
     (SMALL_BATCH_MAX_PAIRS // 2 + 1, "_launch_grouped")],
)  # fmt: skip
def test_the_default_choice_takes_the_small_batch_path_up_to_the_threshold(device, force_triton, monkeypatch,
                                                                            tokens, path):  # fmt: skip
    calls = _spy_on_paths(monkeypatch)
    args = make_moe(tokens, device, experts=8, top_k=2)
    assert_close(fused_moe(*args), fused_moe_reference(*args), torch.float32)
    assert calls == [path]


def test_an_explicit_config_picks_its_path(device, force_triton, monkeypatch):
    calls = _spy_on_paths(monkeypatch)
    args = make_moe(1, device)
    fused_moe(*args, config=MoeConfig(16, 16, 16))
    fused_moe(*args, config=MoeGemvConfig(block_k=16))
    assert calls == ["_launch_grouped", "_launch_small_batch"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="bf16 on the GPU")
@pytest.mark.parametrize("tokens", [1, 2, 5, 8])
@pytest.mark.parametrize("top_k", [2, 6])
def test_small_batch_bf16_matches_reference_and_the_grouped_path(force_triton, tokens, top_k):
    args = make_moe(tokens, "cuda", torch.bfloat16, experts=8, top_k=top_k, hidden=200, inter=136)
    small = fused_moe(*args, config=MoeGemvConfig())
    assert_close(small, fused_moe_reference(*args), torch.bfloat16)
    assert_close(small, fused_moe(*args, config=MoeConfig(16, 64, 64)), torch.bfloat16)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs")
def test_small_batch_is_captured_by_a_cuda_graph(force_triton):
    """No host sync: the captured launches replay with new routing written into the same buffers."""
    x, w13, w2, weights, ids = make_moe(4, "cuda", torch.bfloat16, experts=8, top_k=6)
    fused_moe(x, w13, w2, weights, ids)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fused_moe(x, w13, w2, weights, ids)
    new_args = make_moe(4, "cuda", torch.bfloat16, experts=8, top_k=6)
    for buffer, value in zip((x, weights, ids), (new_args[0], new_args[3], new_args[4]), strict=True):
        buffer.copy_(value)
    graph.replay()
    assert_close(out, fused_moe_reference(x, w13, w2, weights, ids), torch.bfloat16)


def test_bad_inputs_are_rejected():
    x, w13, w2, weights, ids = make_moe(3)
    with pytest.raises(ValueError, match="w2"):
        fused_moe(x, w13, w2[:, :, :-1], weights, ids)
    with pytest.raises(ValueError, match="topk_weights"):
        fused_moe(x, w13, w2, weights.double(), ids)
    with pytest.raises(ValueError, match="topk_ids"):
        fused_moe(x, w13, w2, weights, ids.float())
