import pytest
import torch

from kernels.rotary import build_cos_sin_cache, rotary_embedding, rotary_embedding_torch
from tests.kernels.tolerances import assert_close

LLAMA3_SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}


def naive_rotary(positions, x, head_dim, base, is_neox):
    """float64 rotation written from the RoPE definition, pair by pair."""
    half = head_dim // 2
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    angles = positions.double()[:, None] * inv_freq[None, :]
    cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]
    x64 = x.double()
    first = torch.arange(half) if is_neox else torch.arange(0, head_dim, 2)
    second = first + half if is_neox else first + 1
    out = torch.empty_like(x64)
    out[..., first] = x64[..., first] * cos - x64[..., second] * sin
    out[..., second] = x64[..., second] * cos + x64[..., first] * sin
    return out


@pytest.mark.parametrize("is_neox", [True, False])
def test_reference_matches_float64(is_neox):
    positions = torch.tensor([0, 1, 5, 99, 3, 3, 42])
    q, k = torch.randn(7, 6, 64), torch.randn(7, 2, 64)
    cache = build_cos_sin_cache(64, 100, 10000.0, None, "cpu")
    q_out, k_out = rotary_embedding_torch(positions, q, k, cache, is_neox)
    torch.testing.assert_close(
        q_out.double(), naive_rotary(positions, q, 64, 10000.0, is_neox), atol=1e-5, rtol=1e-5
    )
    torch.testing.assert_close(
        k_out.double(), naive_rotary(positions, k, 64, 10000.0, is_neox), atol=1e-5, rtol=1e-5
    )


@pytest.mark.parametrize("scaling", [None, LLAMA3_SCALING], ids=["default", "llama3"])
def test_cache_matches_hf_llama_rotary(scaling):
    pytest.importorskip("transformers")
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    rope_parameters = (
        {"rope_type": "default", "rope_theta": 500000.0}
        if scaling is None
        else {
            **scaling,
            "rope_theta": 500000.0,
        }
    )
    config = LlamaConfig(
        hidden_size=6 * 64,
        num_attention_heads=6,
        num_key_value_heads=2,
        max_position_embeddings=512,
        rope_parameters=rope_parameters,
    )
    hf = LlamaRotaryEmbedding(config)
    positions = torch.tensor([0, 1, 7, 63, 64, 300, 511])
    cache = build_cos_sin_cache(64, 512, 500000.0, scaling, "cpu")
    q, k = torch.randn(7, 6, 64), torch.randn(7, 2, 64)
    cos, sin = hf(q, positions[None, :])
    hf_q, hf_k = apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos, sin)
    torch.testing.assert_close(
        cache[positions], torch.cat((cos[0, :, :32], sin[0, :, :32]), dim=-1), atol=0, rtol=0
    )
    q_out, k_out = rotary_embedding_torch(positions, q, k, cache)
    torch.testing.assert_close(q_out, hf_q[0].transpose(0, 1), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(k_out, hf_k[0].transpose(0, 1), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_triton_matches_reference(device, force_triton, dtype, is_neox):
    positions = torch.tensor([0, 1, 5, 99, 3, 3, 42], device=device)
    q = torch.randn(7, 6, 64, device=device).to(dtype)
    k = torch.randn(7, 2, 64, device=device).to(dtype)
    cache = build_cos_sin_cache(64, 100, 10000.0, LLAMA3_SCALING, device)
    q_out, k_out = rotary_embedding(positions, q, k, cache, is_neox)
    q_ref, k_ref = rotary_embedding_torch(positions, q, k, cache, is_neox)
    assert_close(q_out, q_ref, dtype)
    assert_close(k_out, k_ref, dtype)


def test_triton_reads_q_and_k_views_of_fused_qkv(device, force_triton):
    qkv = torch.randn(7, (6 + 2 + 2) * 32, device=device)
    q = qkv[:, : 6 * 32].view(7, 6, 32)
    k = qkv[:, 6 * 32 : 8 * 32].view(7, 2, 32)
    positions = torch.arange(7, device=device)
    cache = build_cos_sin_cache(32, 16, 10000.0, None, device)
    q_out, k_out = rotary_embedding(positions, q, k, cache)
    q_ref, k_ref = rotary_embedding_torch(positions, q, k, cache)
    assert q_out.is_contiguous() and k_out.is_contiguous()
    assert_close(q_out, q_ref, torch.float32)
    assert_close(k_out, k_ref, torch.float32)


def test_bad_inputs_are_rejected():
    cache = build_cos_sin_cache(64, 16, 10000.0)
    q, k = torch.randn(3, 4, 64), torch.randn(3, 2, 64)
    with pytest.raises(ValueError, match="positions"):
        rotary_embedding(torch.arange(4), q, k, cache)
    with pytest.raises(ValueError, match="cos_sin_cache"):
        rotary_embedding(torch.arange(3), q, k, build_cos_sin_cache(32, 16, 10000.0))
    with pytest.raises(ValueError, match="unsupported rope scaling"):
        build_cos_sin_cache(64, 16, 10000.0, {"rope_type": "longrope", "factor": 2.0})
    with pytest.raises(ValueError, match="missing"):
        build_cos_sin_cache(64, 16, 10000.0, {"rope_type": "yarn", "factor": 2.0})
    with pytest.raises(ValueError, match="missing"):
        build_cos_sin_cache(64, 16, 10000.0, {"rope_type": "llama3", "factor": 8.0})


def test_q_and_k_back_to_back_in_memory_but_separate_tensors_are_rotated_apart():
    """Two tensors the allocator placed back to back (here: two numpy views' separate storages) are
    not one fused projection's output: rotating them side by side would read past q's storage."""
    import numpy as np

    heads, head_dim = 4, 32
    buffer = np.random.default_rng(0).standard_normal(2 * heads * head_dim).astype(np.float32)
    q = torch.from_numpy(buffer[: heads * head_dim]).view(1, heads, head_dim)
    k = torch.from_numpy(buffer[heads * head_dim :]).view(1, heads, head_dim)
    assert k.data_ptr() == q.data_ptr() + q.numel() * q.element_size()
    positions = torch.tensor([5])
    cos_sin = build_cos_sin_cache(head_dim, 16, 10000.0, None, torch.device("cpu"))
    q_rot, k_rot = rotary_embedding_torch(positions, q, k, cos_sin)
    q_alone, _ = rotary_embedding_torch(positions, q.clone(), q.clone(), cos_sin)
    k_alone, _ = rotary_embedding_torch(positions, k.clone(), k.clone(), cos_sin)
    assert torch.equal(q_rot, q_alone) and torch.equal(k_rot, k_alone)
