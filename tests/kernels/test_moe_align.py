import pytest
import torch

from kernels.moe_align import _align_torch, max_padded_pairs, moe_align_block_size


def random_ids(tokens, top_k, experts, dtype=torch.int64, skewed=False):
    """Random routing (experts may repeat within a token); ``skewed``: nearly all pairs on expert 1."""
    ids = torch.randint(0, experts, (tokens, top_k))
    if skewed:
        ids = torch.where(torch.rand(tokens, top_k) < 0.97, min(1, experts - 1), ids)
    return ids.to(dtype)


def assert_same_as_torch(ids, experts, block_m):
    actual = moe_align_block_size(ids, experts, block_m)
    expected = _align_torch(ids.cpu(), experts, block_m)
    for name in ("sorted_pair_ids", "expert_ids", "num_tokens_post_padded"):
        got, want = getattr(actual, name).cpu(), getattr(expected, name)
        assert got.dtype == want.dtype == torch.int32, name
        assert torch.equal(got, want), name
    return actual


@pytest.mark.parametrize("block_m", [16, 64])
@pytest.mark.parametrize("tokens", [0, 1, 7, 33, 300])
@pytest.mark.parametrize(("experts", "top_k"), [(3, 2), (5, 1), (64, 6), (128, 8), (256, 8)])
def test_triton_matches_torch(device, force_triton, experts, top_k, tokens, block_m):
    ids_dtype = torch.int32 if tokens % 2 else torch.int64
    assert_same_as_torch(random_ids(tokens, top_k, experts, ids_dtype).to(device), experts, block_m)


@pytest.mark.parametrize("ids_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize(("tokens", "top_k", "experts", "block_m"), [(50, 6, 64, 16), (300, 8, 128, 128)])
def test_triton_matches_torch_skewed(device, force_triton, ids_dtype, tokens, top_k, experts, block_m):
    ids = random_ids(tokens, top_k, experts, ids_dtype, skewed=True).to(device)
    assert_same_as_torch(ids, experts, block_m)


@pytest.mark.parametrize(("experts", "block_m"), [(64, 32), (256, 16)])
def test_triton_matches_torch_over_several_chunks(device, force_triton, experts, block_m):
    """2,400 pairs: three programs, each counting the pairs of the chunks before its own."""
    assert_same_as_torch(random_ids(300, 8, experts).to(device), experts, block_m)


@pytest.mark.parametrize("tokens", [1, 33, 300])
def test_triton_groups_every_pair_once_in_its_experts_tiles(device, force_triton, tokens):
    experts, top_k, block_m = 5, 2, 16
    ids = random_ids(tokens, top_k, experts)
    aligned = assert_same_as_torch(ids.to(device), experts, block_m)
    num_pairs = ids.numel()
    total = int(aligned.num_tokens_post_padded)
    entries = aligned.sorted_pair_ids.cpu()
    assert entries.numel() == max_padded_pairs(num_pairs, experts, block_m)
    assert torch.equal(
        entries[entries != num_pairs].sort().values, torch.arange(num_pairs, dtype=torch.int32)
    )
    assert torch.all(entries[total:] == num_pairs)
    flat = ids.view(-1)
    tiles = entries[:total].view(-1, block_m)
    tile_experts = aligned.expert_ids.cpu()
    assert torch.all(tile_experts[: tiles.shape[0]] >= 0) and torch.all(tile_experts[tiles.shape[0] :] == -1)
    for tile, expert in zip(tiles, tile_experts, strict=False):
        pairs = tile[tile != num_pairs].long()
        assert torch.all(flat[pairs] == expert)
        assert torch.all(pairs[1:] > pairs[:-1])  # the stable order
