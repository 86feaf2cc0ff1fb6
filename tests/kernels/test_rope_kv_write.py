import pytest
import torch

from kernels.kv_cache_write import write_kv_cache
from kernels.rope_kv_write import rope_and_write_kv, rope_and_write_kv_torch
from kernels.rotary import build_cos_sin_cache, rotary_embedding
from tests.kernels.tolerances import assert_close

SLOTS = [3, -1, 17, 40, 63, 0, -1]  # 4 blocks of 16: partial blocks, a block's first/last slot, skips
LLAMA3_SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}


def fused_qkv_views(device, dtype, tokens, q_heads, kv_heads, head_dim):
    """q, k, v as the decoder hands them over: strided views of one projection output."""
    qkv = torch.randn(tokens, (q_heads + 2 * kv_heads) * head_dim, device=device).to(dtype)
    q_size, kv_size = q_heads * head_dim, kv_heads * head_dim
    q, k, v = qkv.split([q_size, kv_size, kv_size], dim=-1)
    return (
        q.view(tokens, q_heads, head_dim),
        k.view(tokens, kv_heads, head_dim),
        v.view(tokens, kv_heads, head_dim),
    )


def random_caches(device, dtype, kv_heads, head_dim, blocks=4, block_size=16):
    # Random, not zero: a write to a skipped slot would show.
    k_cache = torch.randn(blocks, block_size, kv_heads, head_dim, device=device).to(dtype)
    return k_cache, torch.randn_like(k_cache)


def todays_path(positions, q, k, v, cos_sin, k_cache, v_cache, slots, is_neox):
    """What the decoder did before the fused kernel: rotary, v.contiguous(), cache write."""
    q_rot, k_rot = rotary_embedding(positions, q, k, cos_sin, is_neox)
    write_kv_cache(k_rot, v.contiguous(), k_cache, v_cache, slots)
    return q_rot, k_rot


def check_against_todays_path(device, dtype, tokens, heads, slots, is_neox=True, return_kv=True):
    q_heads, kv_heads, head_dim = heads
    q, k, v = fused_qkv_views(device, dtype, tokens, q_heads, kv_heads, head_dim)
    positions = torch.randint(0, 100, (tokens,), device=device)
    cos_sin = build_cos_sin_cache(head_dim, 100, 10000.0, LLAMA3_SCALING, device)
    k_cache, v_cache = random_caches(device, dtype, kv_heads, head_dim, blocks=int(slots.max()) // 16 + 1)
    expected_k_cache, expected_v_cache = k_cache.clone(), v_cache.clone()
    q_old, k_old = todays_path(
        positions, q, k, v, cos_sin, expected_k_cache, expected_v_cache, slots, is_neox
    )

    q_new, k_new, v_new = rope_and_write_kv(
        positions, q, k, v, cos_sin, k_cache, v_cache, slots, is_neox=is_neox, return_kv=return_kv
    )
    assert q_new.is_contiguous() and q_new.shape == q.shape
    assert torch.equal(q_new, q_old)
    assert torch.equal(k_cache, expected_k_cache) and torch.equal(v_cache, expected_v_cache)
    if return_kv:
        assert torch.equal(k_new, k_old) and torch.equal(v_new, v)
        assert k_new.is_contiguous() and v_new.is_contiguous()
    else:
        assert k_new is None and v_new is None

    ref_k_cache, ref_v_cache = random_caches(device, dtype, kv_heads, head_dim, blocks=k_cache.shape[0])
    ref_k_cache.copy_(expected_k_cache)
    ref_v_cache.copy_(expected_v_cache)
    q_ref, _, _ = rope_and_write_kv_torch(
        positions, q, k, v, cos_sin, ref_k_cache, ref_v_cache, slots, is_neox
    )
    assert_close(q_new, q_ref, dtype)
    assert_close(k_cache, ref_k_cache, dtype)
    assert torch.equal(v_cache, ref_v_cache)


@pytest.mark.parametrize(
    "heads", [(6, 2, 64), (4, 4, 80), (8, 1, 128)], ids=["gqa3-d64", "mha-d80", "gqa8-d128"]
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_bit_identical_to_rotary_then_cache_write(device, force_triton, dtype, heads):
    slots = torch.tensor(SLOTS, device=device)
    check_against_todays_path(device, dtype, len(SLOTS), heads, slots)


@pytest.mark.parametrize("return_kv", [True, False])
@pytest.mark.parametrize("is_neox", [True, False])
def test_gptj_style_and_without_returned_kv(device, force_triton, is_neox, return_kv):
    slots = torch.tensor(SLOTS, device=device, dtype=torch.int32)
    check_against_todays_path(device, torch.bfloat16, len(SLOTS), (6, 2, 64), slots, is_neox, return_kv)


def test_prefill_sized_step_rotates_several_heads_per_program(device, force_triton):
    tokens = 130  # past the one-head-per-program threshold: blocks of heads, a partial last block
    slots = torch.randperm(17 * 16, device=device)[:tokens]
    slots[::9] = -1
    check_against_todays_path(device, torch.bfloat16, tokens, (6, 3, 64), slots)


def test_torch_fallback_is_todays_torch_path(force_torch):
    q, k, v = fused_qkv_views("cpu", torch.bfloat16, 7, 6, 2, 64)
    positions = torch.arange(7)
    cos_sin = build_cos_sin_cache(64, 16, 10000.0)
    slots = torch.tensor(SLOTS)
    k_cache, v_cache = random_caches("cpu", torch.bfloat16, 2, 64)
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    q_old, k_old = todays_path(positions, q, k, v, cos_sin, expected_k, expected_v, slots, True)
    q_new, k_new, v_new = rope_and_write_kv(
        positions, q, k, v, cos_sin, k_cache, v_cache, slots, return_kv=True
    )
    assert torch.equal(q_new, q_old) and torch.equal(k_new, k_old) and torch.equal(v_new, v)
    assert torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)


def test_bad_inputs_are_rejected():
    q, k, v = fused_qkv_views("cpu", torch.float32, 7, 6, 2, 64)
    cos_sin = build_cos_sin_cache(64, 16, 10000.0)
    k_cache, v_cache = random_caches("cpu", torch.float32, 2, 64)
    slots, positions = torch.tensor(SLOTS), torch.arange(7)
    with pytest.raises(ValueError, match="slot_mapping"):
        rope_and_write_kv(positions, q, k, v, cos_sin, k_cache, v_cache, slots[:3])
    with pytest.raises(ValueError, match="positions"):
        rope_and_write_kv(positions.float(), q, k, v, cos_sin, k_cache, v_cache, slots)
    with pytest.raises(ValueError, match="caches"):
        rope_and_write_kv(positions, q, k, v, cos_sin, k_cache[:, :, :1], v_cache[:, :, :1], slots)
    with pytest.raises(ValueError, match="cos_sin_cache"):
        rope_and_write_kv(positions, q, k, v, build_cos_sin_cache(32, 16, 10000.0), k_cache, v_cache, slots)


@pytest.mark.parametrize("round_normed", [True, False], ids=["qwen3-rounding", "gemma-rounding"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("tokens", [1, 3, 130], ids=lambda t: f"{t}tok")  # 130: several heads per program
def test_qk_norm_in_the_same_pass_matches_the_separate_norms(
    device, force_triton, dtype, tokens, round_normed
):
    """Qwen3's per-head RMSNorms of q and k folded into the pass: the separate norm kernels, then the
    rotary and write, up to the order of the sum of squares (fp32)."""
    from kernels.rms_norm import rms_norm
    from kernels.rope_kv_write import QKNorm

    q_heads, kv_heads, head_dim = 4, 2, 32
    q, k, v = fused_qkv_views(device, dtype, tokens, q_heads, kv_heads, head_dim)
    positions = torch.randint(0, 100, (tokens,), device=device)
    cos_sin = build_cos_sin_cache(head_dim, 100, 10000.0, None, device)
    weight_dtype = dtype if round_normed else torch.float32  # Gemma's norm keeps 1 + w in fp32
    norm = QKNorm(
        (1 + 0.2 * torch.randn(head_dim, device=device)).to(weight_dtype),
        (1 + 0.2 * torch.randn(head_dim, device=device)).to(weight_dtype),
        1e-6,
        round_normed,
    )
    blocks = tokens // 16 + 1
    slots = torch.randperm(blocks * 16, device=device)[:tokens]  # distinct: programs write in any order
    k_cache, v_cache = random_caches(device, dtype, kv_heads, head_dim, blocks=blocks)
    expected_k_cache, expected_v_cache = k_cache.clone(), v_cache.clone()
    q_normed = rms_norm(q.reshape(-1, head_dim), norm.q_weight, norm.eps, round_normed).view(q.shape)
    k_normed = rms_norm(k.reshape(-1, head_dim), norm.k_weight, norm.eps, round_normed).view(k.shape)
    q_old, k_old = todays_path(positions, q_normed, k_normed, v, cos_sin, expected_k_cache, expected_v_cache,
                               slots, True)  # fmt: skip
    q_new, k_new, _ = rope_and_write_kv(positions, q, k, v, cos_sin, k_cache, v_cache, slots, return_kv=True,
                                        qk_norm=norm)  # fmt: skip
    assert_close(q_new, q_old, dtype)
    assert_close(k_new, k_old, dtype)
    assert_close(k_cache, expected_k_cache, dtype)
    assert torch.equal(v_cache, expected_v_cache)
    ref_q, ref_k, _ = rope_and_write_kv_torch(positions, q, k, v, cos_sin, k_cache.clone(), v_cache.clone(),
                                              slots, return_kv=True, qk_norm=norm)  # fmt: skip
    assert_close(ref_q, q_old, dtype)
    assert_close(ref_k, k_old, dtype)


def test_a_qk_norm_weight_of_the_wrong_size_is_refused():
    from kernels.rope_kv_write import QKNorm

    q, k, v = fused_qkv_views(torch.device("cpu"), torch.float32, 1, 4, 2, 32)
    k_cache, v_cache = random_caches(torch.device("cpu"), torch.float32, 2, 32)
    cos_sin = build_cos_sin_cache(32, 100, 10000.0, None, torch.device("cpu"))
    norm = QKNorm(torch.ones(31), torch.ones(32), 1e-6)
    with pytest.raises(ValueError, match=r"the q norm's weight must be contiguous \[32\]"):
        rope_and_write_kv(torch.zeros(1, dtype=torch.long), q, k, v, cos_sin, k_cache, v_cache,
                          torch.zeros(1, dtype=torch.long), qk_norm=norm)  # fmt: skip
