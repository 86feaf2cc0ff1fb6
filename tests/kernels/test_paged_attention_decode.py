import pytest
import torch

from kernels import paged_attention_decode as decode_module
from kernels._arrival_counters import arrival_counters
from kernels.paged_attention_decode import (
    choose_num_splits,
    paged_attention_decode,
    paged_attention_decode_torch,
)
from tests.kernels.paged_cases import make_cache, naive_attention
from tests.kernels.tolerances import assert_close

# Partial last block, exactly one full block, a single token, and a context long enough to split.
SEQ_LENS = [20, 16, 1, 150]


def make_batch(device, dtype, q_heads=6, kv_heads=2, head_dim=64, seq_lens=SEQ_LENS):
    k_cache, v_cache, block_tables, seq_lens_t = make_cache(
        seq_lens, kv_heads, head_dim, dtype, device, pad_blocks=2
    )
    q = torch.randn(len(seq_lens), q_heads, head_dim, device=device).to(dtype)
    return q, k_cache, v_cache, block_tables, seq_lens_t


@pytest.mark.parametrize("sliding_window", [None, 8])
def test_reference_matches_float64(sliding_window):
    q, k_cache, v_cache, block_tables, seq_lens = make_batch("cpu", torch.float32)
    query_start_loc = torch.arange(len(SEQ_LENS) + 1, dtype=torch.int32)
    expected = naive_attention(
        q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, 0.125, sliding_window
    )
    actual = paged_attention_decode_torch(q, k_cache, v_cache, block_tables, seq_lens, 0.125, sliding_window)
    torch.testing.assert_close(actual.double(), expected, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("num_splits", [1, 3, None])
@pytest.mark.parametrize(
    ("dtype", "sliding_window"),
    [(torch.float32, None), (torch.float32, 40), (torch.bfloat16, None), (torch.float16, 5)],
)
def test_triton_matches_reference(device, force_triton, dtype, sliding_window, num_splits):
    args = make_batch(device, dtype)
    actual = paged_attention_decode(*args, 0.125, sliding_window, num_splits)
    assert_close(actual, paged_attention_decode_torch(*args, 0.125, sliding_window), dtype)


@pytest.mark.parametrize("sliding_window", [None, 8])
def test_softcapped_reference_matches_float64(sliding_window):
    q, k_cache, v_cache, block_tables, seq_lens = make_batch("cpu", torch.float32)
    query_start_loc = torch.arange(len(SEQ_LENS) + 1, dtype=torch.int32)
    expected = naive_attention(
        q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, 0.125, sliding_window, softcap=1.5
    )
    actual = paged_attention_decode_torch(
        q, k_cache, v_cache, block_tables, seq_lens, 0.125, sliding_window, softcap=1.5
    )
    torch.testing.assert_close(actual.double(), expected, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("num_splits", [1, 3])
@pytest.mark.parametrize(
    ("dtype", "sliding_window"), [(torch.float32, None), (torch.float32, 40), (torch.bfloat16, 5)]
)
def test_triton_softcap_matches_reference(device, force_triton, dtype, sliding_window, num_splits):
    args = make_batch(device, dtype, q_heads=4, kv_heads=2, head_dim=40)
    actual = paged_attention_decode(*args, 0.3, sliding_window, num_splits, softcap=1.5)
    expected = paged_attention_decode_torch(*args, 0.3, sliding_window, softcap=1.5)
    assert_close(actual, expected, dtype)
    assert not torch.allclose(
        actual.float(), paged_attention_decode_torch(*args, 0.3, sliding_window).float(), atol=1e-2
    )


@pytest.mark.parametrize(("q_heads", "kv_heads", "head_dim"), [(4, 4, 32), (8, 1, 80)])
def test_triton_head_layouts(device, force_triton, q_heads, kv_heads, head_dim):
    """MHA, and multi-query with a head_dim that is not a power of two."""
    args = make_batch(device, torch.float32, q_heads, kv_heads, head_dim, seq_lens=[70, 5])
    actual = paged_attention_decode(*args, 0.1, None, 4)
    assert_close(actual, paged_attention_decode_torch(*args, 0.1), torch.float32)


def test_more_splits_than_tiles_leaves_empty_splits_harmless(device, force_triton):
    args = make_batch(device, torch.float32, seq_lens=[3, 65])
    actual = paged_attention_decode(*args, 0.125, None, 8)
    assert_close(actual, paged_attention_decode_torch(*args, 0.125), torch.float32)


def test_num_splits_fills_the_device_for_small_batches():
    gpu_like = torch.device("cpu")  # the CPU path reports a nominal 16 compute units
    assert choose_num_splits(1, 8, 4096, gpu_like) == 4  # 2 * 16 SMs / 8 groups
    assert choose_num_splits(1, 1, 4096, gpu_like) == 32  # 2 * 16 SMs / 1 group
    assert choose_num_splits(1, 1, 300, gpu_like) == 5  # capped by 300 / 64 keys per split
    assert choose_num_splits(128, 8, 4096, gpu_like) == 1
    assert choose_num_splits(1, 1, 4096, gpu_like, sliding_window=512) == 8


def test_bad_inputs_are_rejected():
    q, k_cache, v_cache, block_tables, seq_lens = make_batch("cpu", torch.float32)
    with pytest.raises(ValueError, match="sequences"):
        paged_attention_decode(q[:2], k_cache, v_cache, block_tables, seq_lens, 0.1)
    with pytest.raises(ValueError, match="num_splits"):
        paged_attention_decode(q, k_cache, v_cache, block_tables, seq_lens, 0.1, num_splits=0)


@pytest.mark.parametrize("num_splits", [1, 4])
def test_padding_rows_with_empty_context_give_zeros_not_nan(device, force_triton, num_splits):
    """CUDA-graph padding rows carry seq_len 0; they must not poison the output with NaN."""
    q, k_cache, v_cache, block_tables, seq_lens = make_batch(device, torch.float32, seq_lens=[33, 1])
    seq_lens[1] = 0
    out = paged_attention_decode(q, k_cache, v_cache, block_tables, seq_lens, 0.125, None, num_splits)
    expected = paged_attention_decode_torch(q, k_cache, v_cache, block_tables, seq_lens, 0.125)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    assert torch.equal(expected[1], torch.zeros_like(expected[1]))
    assert_close(out, expected, torch.float32)


FUSED_CASES = [  # dtype, sliding window, q heads, kv heads, head_dim, splits
    (torch.float32, None, 6, 2, 64, 3),
    (torch.bfloat16, None, 6, 2, 64, 8),  # more splits than some sequences have tiles
    (torch.float16, 5, 6, 2, 64, 4),
    (torch.float32, 40, 8, 1, 80, 5),  # multi-query, head_dim not a power of two
    (torch.bfloat16, None, 4, 4, 32, 2),  # MHA
]


@pytest.mark.parametrize(
    ("dtype", "sliding_window", "q_heads", "kv_heads", "head_dim", "splits"), FUSED_CASES
)
def test_fused_reduce_gives_the_bits_of_the_reduce_kernel(
    device, force_triton, monkeypatch, dtype, sliding_window, q_heads, kv_heads, head_dim, splits
):
    """The last split program merges with the reduce kernel's arithmetic in its order, and leaves
    the arrival counters at zero for the next call (and every CUDA-graph replay)."""
    args = make_batch(device, dtype, q_heads, kv_heads, head_dim)
    separate = paged_attention_decode(*args, 0.125, sliding_window, splits, fused_reduce=False)
    monkeypatch.setattr(decode_module, "reduce_splits", None)  # a call of it would fail
    fused = [
        paged_attention_decode(*args, 0.125, sliding_window, splits, fused_reduce=True) for _ in range(3)
    ]
    assert all(torch.equal(out, separate) for out in fused)
    assert not arrival_counters(device, 1).any()
    assert_close(fused[0], paged_attention_decode_torch(*args, 0.125, sliding_window), dtype)
