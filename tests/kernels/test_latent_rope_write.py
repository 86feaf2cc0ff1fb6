import pytest
import torch

from kernels.latent_rope_write import latent_rope_write, latent_rope_write_torch
from kernels.rotary import build_cos_sin_cache
from tests.kernels.tolerances import assert_close

HEADS, NOPE, RANK, ROPE = 3, 8, 40, 16  # a rank that is not a power of two: the masks
EPS = 1e-6


def make_step(device, dtype, tokens=4, slots=(9, -1, 2, 15)):
    """The fused input projection's rows ``[q (H * (N + P)) | c (R) | k_rope (P)]`` and views of them,
    as MLA's ``attend`` splits them."""
    qkv = torch.randn(tokens, HEADS * (NOPE + ROPE) + RANK + ROPE, device=device).to(dtype)
    q, latent = qkv.split([HEADS * (NOPE + ROPE), RANK + ROPE], dim=-1)
    q_rope = q.view(tokens, HEADS, NOPE + ROPE)[..., NOPE:]
    positions = torch.tensor([0, 7, 3, 30][:tokens], device=device)
    cos_sin = build_cos_sin_cache(ROPE, 64, 10000.0, device=device)
    norm_weight = (1 + 0.1 * torch.randn(RANK, device=device)).to(dtype)
    cache = torch.zeros(4, 4, RANK + ROPE, device=device, dtype=dtype)
    slot_mapping = torch.tensor(slots[:tokens], device=device)
    return positions, q_rope, latent, norm_weight, cos_sin, cache, slot_mapping


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("is_neox", [True, False])
def test_matches_the_norm_rotary_and_write_it_replaces(device, force_triton, dtype, is_neox):
    positions, q_rope, latent, weight, cos_sin, cache, slots = make_step(device, dtype)
    expected_cache = cache.clone()
    expected = latent_rope_write_torch(
        positions, q_rope, latent, weight, EPS, cos_sin, is_neox, expected_cache, slots
    )
    before = (q_rope.clone(), latent.clone())
    got = latent_rope_write(positions, q_rope, latent, weight, EPS, cos_sin, is_neox, cache, slots)
    for actual, reference in zip(got, expected, strict=True):
        assert actual.shape == reference.shape
        assert_close(actual, reference, dtype)
    assert_close(cache, expected_cache, dtype)
    assert torch.equal(q_rope, before[0]) and torch.equal(latent, before[1])  # the inputs stay as they were
    flat = cache.view(-1, RANK + ROPE)
    q_out, c, k_rope = got
    for t, slot in enumerate(slots.tolist()):
        if slot >= 0:  # the cache holds exactly what the step goes on with
            assert torch.equal(flat[slot], torch.cat([c[t], k_rope[t]]))
    assert int((flat.abs().sum(dim=1) > 0).sum()) == 3  # slot -1 wrote nothing


def test_bad_inputs_are_rejected():
    positions, q_rope, latent, weight, cos_sin, cache, slots = make_step("cpu", torch.float32)
    with pytest.raises(ValueError, match="norm weight of R values"):
        latent_rope_write(positions, q_rope, latent, weight[:-1], EPS, cos_sin, True, cache, slots)
    with pytest.raises(ValueError, match="slot_mapping must be int"):
        latent_rope_write(positions, q_rope, latent, weight, EPS, cos_sin, True, cache, slots[:2])
    with pytest.raises(ValueError, match="latent_cache must be"):
        latent_rope_write(positions, q_rope, latent, weight, EPS, cos_sin, True, cache[..., :-1], slots)
