import pytest
import torch

from kernels.mla_decode import (
    LARGE_BATCH,
    MlaDecodeTiles,
    choose_num_splits,
    default_tiles,
    mla_decode,
    mla_decode_reference,
    write_latent,
)
from tests.kernels.paged_cases import make_cache
from tests.kernels.tolerances import assert_close

# Partial last block, exactly one full block, a single token, and a context long enough to split.
SEQ_LENS = [20, 16, 1, 150]
RANK, ROPE_DIM = 40, 8  # not powers of two, so the tiles' masks are exercised


def make_batch(device, dtype, heads=4, rank=RANK, rope_dim=ROPE_DIM, seq_lens=SEQ_LENS, block_size=16):
    """Queries and a latent cache whose block tables are shuffled and padded with out-of-range ids."""
    cache, _, block_tables, seq_lens_t = make_cache(
        seq_lens, 1, rank + rope_dim, dtype, device, pad_blocks=2, block_size=block_size
    )
    q_latent = torch.randn(len(seq_lens), heads, rank, device=device).to(dtype)
    q_rope = torch.randn(len(seq_lens), heads, rope_dim, device=device).to(dtype)
    return q_latent, q_rope, cache.squeeze(2), block_tables, seq_lens_t


def naive_mla(q_latent, q_rope, latent_cache, block_tables, seq_lens, scale):
    """float64, one sequence, head and token at a time, straight from the definition."""
    rank, block_size = q_latent.shape[2], latent_cache.shape[1]
    out = torch.zeros(q_latent.shape, dtype=torch.float64)
    for b, seq_len in enumerate(seq_lens.tolist()):
        tokens = [
            latent_cache[int(block_tables[b, t // block_size]), t % block_size].double().cpu()
            for t in range(seq_len)
        ]
        for h in range(q_latent.shape[1]):
            ql, qr = q_latent[b, h].double().cpu(), q_rope[b, h].double().cpu()
            scores = torch.stack([(ql @ tok[:rank] + qr @ tok[rank:]) * scale for tok in tokens])
            out[b, h] = torch.softmax(scores, dim=0) @ torch.stack([tok[:rank] for tok in tokens])
    return out


@pytest.mark.parametrize("block_size", [16, 64])
def test_reference_matches_float64(block_size):
    args = make_batch("cpu", torch.float32, block_size=block_size)
    actual = mla_decode_reference(*args, 0.125)
    torch.testing.assert_close(actual.double(), naive_mla(*args, 0.125), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("num_splits", [1, 3, None])
@pytest.mark.parametrize("block_size", [16, 64])
def test_triton_matches_reference(device, force_triton, block_size, num_splits):
    args = make_batch(device, torch.float32, block_size=block_size)
    assert_close(mla_decode(*args, 0.125, num_splits), mla_decode_reference(*args, 0.125), torch.float32)


@pytest.mark.parametrize(
    "tiles", [None, MlaDecodeTiles(block_n=16, num_warps=4, num_stages=2, min_keys_per_split=16)]
)
def test_large_batches_and_other_tiles_match_the_reference(device, force_triton, tiles):
    args = make_batch(device, torch.float32, heads=2, seq_lens=[1 + 7 * b for b in range(LARGE_BATCH)])
    assert default_tiles(LARGE_BATCH) != default_tiles(LARGE_BATCH - 1)
    assert_close(mla_decode(*args, 0.125, tiles=tiles), mla_decode_reference(*args, 0.125), torch.float32)


def test_triton_more_heads_than_one_program_holds(device, force_triton):
    args = make_batch(device, torch.float32, heads=20, seq_lens=[37, 5])
    assert_close(mla_decode(*args, 0.1, 2), mla_decode_reference(*args, 0.1), torch.float32)


def test_more_splits_than_tiles_leaves_empty_splits_harmless(device, force_triton):
    args = make_batch(device, torch.float32, seq_lens=[3, 65])
    assert_close(mla_decode(*args, 0.125, 8), mla_decode_reference(*args, 0.125), torch.float32)


@pytest.mark.parametrize("split_floor", [16, 40])  # whole tiles, and one rounded up to them
def test_a_split_floor_leaves_the_splits_past_the_context_empty(device, force_triton, split_floor):
    """As in a CUDA graph: tables far wider than the contexts, so the host picks many splits; with a
    floor the short contexts use only the first few, the rest store nothing and the reduce reads
    only the live ones (an empty context still gets zeros)."""
    q_latent, q_rope, cache, tables, seq_lens = make_batch(device, torch.float32, seq_lens=[150, 20, 1, 0])
    wide = torch.cat([tables, torch.zeros(4, 60, dtype=tables.dtype, device=tables.device)], dim=1)
    tiles = MlaDecodeTiles(block_n=16, min_keys_per_split=16, split_floor=split_floor)
    args = (q_latent, q_rope, cache, wide, seq_lens, 0.125)
    out = mla_decode(*args, 16, tiles)
    assert_close(out, mla_decode_reference(*args), torch.float32)
    assert torch.equal(out[3], torch.zeros_like(out[3]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="bf16 tensor-core attention needs CUDA")
def test_a_split_floor_at_the_deepseek_v2_lite_shape_in_graph_wide_tables(force_triton):
    q_latent, q_rope, cache, tables, seq_lens = make_batch(
        "cuda", torch.bfloat16, heads=16, rank=512, rope_dim=64, seq_lens=[1280, 1, 129, 64]
    )
    wide = torch.cat([tables, torch.zeros(4, 2000, dtype=tables.dtype, device="cuda")], dim=1)
    args = (q_latent, q_rope, cache, wide, seq_lens, 0.07)
    out = mla_decode(*args, tiles=MlaDecodeTiles(split_floor=64))
    assert_close(out, mla_decode_reference(*args), torch.bfloat16)


def test_the_engine_split_floor_sets_the_small_batch_tiles_only():
    from kernels import mla_decode as module

    before = module.default_tiles(1)
    previous = module.set_split_floor(256)
    try:
        assert module.default_tiles(1).split_floor == 256
        assert module.default_tiles(module.LARGE_BATCH - 1).split_floor == 256
        assert module.default_tiles(module.LARGE_BATCH) == module.LARGE_BATCH_TILES
        assert module.split_floor() == 256
        with pytest.raises(ValueError, match="split floor must be 0 or more keys"):
            module.set_split_floor(-1)
    finally:
        module.set_split_floor(previous)
    assert module.default_tiles(1) == before


@pytest.mark.parametrize("num_splits", [1, 4])
def test_padding_rows_with_empty_context_give_zeros_not_nan(device, force_triton, num_splits):
    q_latent, q_rope, cache, block_tables, seq_lens = make_batch(device, torch.float32, seq_lens=[9, 0])
    out = mla_decode(q_latent, q_rope, cache, block_tables, seq_lens, 0.125, num_splits)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    assert_close(
        out, mla_decode_reference(q_latent, q_rope, cache, block_tables, seq_lens, 0.125), torch.float32
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="bf16 tensor-core attention needs CUDA")
@pytest.mark.parametrize("block_size", [16, 64])
@pytest.mark.parametrize("num_splits", [1, None])
def test_triton_bf16_deepseek_v2_lite_shape(force_triton, block_size, num_splits):
    args = make_batch("cuda", torch.bfloat16, heads=16, rank=512, rope_dim=64, seq_lens=[700, 1, 129, 64],
                      block_size=block_size)  # fmt: skip
    assert_close(mla_decode(*args, 0.07, num_splits), mla_decode_reference(*args, 0.07), torch.bfloat16)


def test_num_splits_fills_the_device_for_small_batches():
    cpu = torch.device("cpu")  # the CPU path reports a nominal 16 compute units
    assert choose_num_splits(1, 1, 4096, cpu) == 32  # 2 * 16 SMs / 1 program per split
    assert choose_num_splits(1, 1, 300, cpu) == 5  # capped by 300 / 64 tokens per split
    assert choose_num_splits(64, 1, 4096, cpu) == 1


def test_written_tokens_are_what_decode_attends_to():
    """Two sequences written token by token through non-contiguous pages, then decoded."""
    block_size, seq_lens = 4, [6, 3]
    block_tables = torch.tensor([[2, 0], [1, 3]], dtype=torch.int32)
    cache = torch.full((4, block_size, RANK + ROPE_DIM), float("nan"))  # unwritten slots must stay unread
    c, k_rope = torch.randn(sum(seq_lens), RANK), torch.randn(sum(seq_lens), ROPE_DIM)
    slots = [
        int(block_tables[b, t // block_size]) * block_size + t % block_size
        for b, n in enumerate(seq_lens)
        for t in range(n)
    ]
    write_latent(cache, torch.tensor(slots), c, k_rope)
    q_latent, q_rope = torch.randn(2, 3, RANK), torch.randn(2, 3, ROPE_DIM)
    seq_lens_t = torch.tensor(seq_lens, dtype=torch.int32)
    out = mla_decode(q_latent, q_rope, cache, block_tables, seq_lens_t, 0.2)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(
        out.double(), naive_mla(q_latent, q_rope, cache, block_tables, seq_lens_t, 0.2), atol=1e-6, rtol=1e-6
    )


def test_bad_inputs_are_rejected():
    q_latent, q_rope, cache, block_tables, seq_lens = make_batch("cpu", torch.float32)
    with pytest.raises(ValueError, match="R \\+ P"):
        mla_decode(q_latent, q_rope[..., :-1], cache, block_tables, seq_lens, 0.1)
    with pytest.raises(ValueError, match="block_tables"):
        mla_decode(q_latent, q_rope, cache, block_tables[:2], seq_lens, 0.1)
    with pytest.raises(ValueError, match="num_splits"):
        mla_decode(q_latent, q_rope, cache, block_tables, seq_lens, 0.1, num_splits=0)
