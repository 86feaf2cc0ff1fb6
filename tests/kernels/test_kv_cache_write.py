import pytest
import torch

from kernels.kv_cache_write import write_kv_cache, write_kv_cache_torch


def naive_write(key, value, k_cache, v_cache, slot_mapping):
    block_size = k_cache.shape[1]
    for token, slot in enumerate(slot_mapping.tolist()):
        if slot >= 0:
            k_cache[slot // block_size, slot % block_size] = key[token]
            v_cache[slot // block_size, slot % block_size] = value[token]


def make_inputs(device, dtype, tokens=7, kv_heads=2, head_dim=64):
    key = torch.randn(tokens, kv_heads, head_dim, device=device).to(dtype)
    value = torch.randn(tokens, kv_heads, head_dim, device=device).to(dtype)
    k_cache = torch.zeros(4, 16, kv_heads, head_dim, device=device, dtype=dtype)
    slot_mapping = torch.tensor([3, -1, 17, 40, 63, 0, -1], device=device)[:tokens]
    return key, value, k_cache, torch.zeros_like(k_cache), slot_mapping


def test_reference_matches_naive_loop():
    key, value, k_cache, v_cache, slots = make_inputs("cpu", torch.float32)
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    naive_write(key, value, expected_k, expected_v, slots)
    write_kv_cache_torch(key, value, k_cache, v_cache, slots)
    assert torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)
    assert k_cache.abs().sum() > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("slot_dtype", [torch.int64, torch.int32])
def test_triton_matches_reference(device, force_triton, dtype, slot_dtype):
    key, value, k_cache, v_cache, slots = make_inputs(device, dtype)
    slots = slots.to(slot_dtype)
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    write_kv_cache_torch(key, value, expected_k, expected_v, slots)
    write_kv_cache(key, value, k_cache, v_cache, slots)
    assert torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)


def test_triton_reads_k_and_v_views_of_fused_qkv(device, force_triton):
    qkv = torch.randn(7, (6 + 2 + 2) * 32, device=device)
    key = qkv[:, 6 * 32 : 8 * 32].view(7, 2, 32)
    value = qkv[:, 8 * 32 :].view(7, 2, 32)
    k_cache = torch.zeros(4, 16, 2, 32, device=device)
    v_cache = torch.zeros_like(k_cache)
    slots = torch.tensor([5, 6, 7, 8, 9, -1, 31], device=device)
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    write_kv_cache_torch(key, value, expected_k, expected_v, slots)
    write_kv_cache(key, value, k_cache, v_cache, slots)
    assert torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)


def test_bad_inputs_are_rejected():
    key, value, k_cache, v_cache, slots = make_inputs("cpu", torch.float32)
    with pytest.raises(ValueError, match="slot_mapping"):
        write_kv_cache(key, value, k_cache, v_cache, slots[:3])
    with pytest.raises(ValueError, match="heads/dim"):
        write_kv_cache(key[:, :1], value[:, :1], k_cache, v_cache, slots)


@pytest.mark.parametrize("tokens", [1, 7])
def test_halves_of_one_cache_are_written_in_one_scatter(tokens):
    """A layer's cache is one [2, blocks, block_size, Hk, D] tensor: its halves are written together
    (kernels/kv_cache_write.py), and come out as two separate caches' would."""
    key, value, k_cache, v_cache, slots = make_inputs("cpu", torch.float32, tokens)
    key = torch.cat((key, torch.randn_like(key)), dim=1)[:, :2]  # strided rows, as a projection's views
    cache = torch.zeros(2, *k_cache.shape)
    for _ in range(2):  # the second call takes the remembered view
        write_kv_cache_torch(key, value, cache[0], cache[1], slots)
    write_kv_cache_torch(key, value, k_cache, v_cache, slots)
    assert torch.equal(cache[0], k_cache) and torch.equal(cache[1], v_cache)
    halves = cache[0], cache[1]
    write_kv_cache_torch(key * 2, value * 2, *halves, slots)
    write_kv_cache_torch(key * 3, value * 3, *halves, slots)  # the same halves: the memo's view
    naive_write(key * 3, value * 3, k_cache, v_cache, slots)
    assert torch.equal(cache[0], k_cache) and torch.equal(cache[1], v_cache)
    assert getattr(halves[0], "_kv_both", (None, None))[1] is not None
