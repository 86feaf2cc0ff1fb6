import pytest
import torch

from kernels.latent_cache_write import write_latent, write_latent_torch

RANK, ROPE_DIM = 40, 8


def make_step(device, dtype, tokens=5):
    cache = torch.zeros(4, 4, RANK + ROPE_DIM, device=device, dtype=dtype)
    c = torch.randn(tokens, RANK, device=device).to(dtype)
    k_rope = torch.randn(tokens, ROPE_DIM, device=device).to(dtype)
    slots = torch.tensor([9, -1, 2, 15, 0][:tokens], device=device)
    return cache, slots, c, k_rope


def test_reference_fills_slots_and_skips_padding():
    cache, slots, c, k_rope = make_step("cpu", torch.float32)
    write_latent_torch(cache, slots, c, k_rope)
    flat = cache.view(-1, RANK + ROPE_DIM)
    for t, slot in enumerate(slots.tolist()):
        if slot >= 0:
            assert torch.equal(flat[slot], torch.cat([c[t], k_rope[t]]))
    assert int((flat.abs().sum(dim=1) > 0).sum()) == 4


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_matches_reference(device, force_triton, dtype):
    cache, slots, c, k_rope = make_step(device, dtype)
    expected = cache.clone()
    write_latent_torch(expected, slots, c, k_rope)
    write_latent(cache, slots.to(torch.int32), c, k_rope)
    assert torch.equal(cache, expected)


def test_bad_inputs_are_rejected():
    cache, slots, c, k_rope = make_step("cpu", torch.float32)
    with pytest.raises(ValueError, match="slot_mapping"):
        write_latent(cache, slots[:2], c, k_rope)
    with pytest.raises(ValueError, match="R \\+ P"):
        write_latent(cache, slots, c[:, :-1], k_rope)
