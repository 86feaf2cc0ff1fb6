"""The fused-SDPA paged attention (the path without Triton) against the float64 oracle, and the
property that lets it pad a batch to its longest context: a row's output is the same, bit for bit,
whatever else shares the batch."""

import pytest
import torch

from kernels.invariance import set_batch_invariant
from kernels.paged_attention_sdpa import paged_attention_decode_sdpa, paged_attention_sdpa
from tests.kernels.paged_cases import make_cache, naive_attention
from tests.kernels.test_paged_attention import make_batch

SCALE = 64**-0.5


@pytest.mark.parametrize("sliding_window", [None, 8])
def test_varlen_matches_float64(sliding_window):
    args = make_batch("cpu", torch.float32)
    expected = naive_attention(*args, SCALE, sliding_window)
    actual = paged_attention_sdpa(*args, SCALE, sliding_window)
    torch.testing.assert_close(actual.double(), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("invariant", [False, True])
@pytest.mark.parametrize("sliding_window", [None, 8])
def test_softcapped_varlen_matches_float64(sliding_window, invariant):
    """Soft-capped scores are no option of torch's fused kernel: the calls run the torch math (or,
    batch-invariant, ``cpu_invariant.attend``) instead."""
    args = make_batch("cpu", torch.float32)
    expected = naive_attention(*args, SCALE, sliding_window, softcap=1.5)
    before = set_batch_invariant(invariant)
    try:
        actual = paged_attention_sdpa(*args, SCALE, sliding_window, softcap=1.5)
    finally:
        set_batch_invariant(before)
    torch.testing.assert_close(actual.double(), expected, atol=1e-5, rtol=1e-5)


def _decode_batch(seq_lens, q_heads=6, kv_heads=2, head_dim=64):
    k_cache, v_cache, block_tables, lens = make_cache(seq_lens, kv_heads, head_dim, torch.float32, "cpu")
    q = torch.randn(len(seq_lens), q_heads, head_dim)
    return q, k_cache, v_cache, block_tables, lens


@pytest.mark.parametrize("sliding_window", [None, 8])
def test_decode_matches_float64(sliding_window):
    q, k_cache, v_cache, block_tables, lens = _decode_batch([1, 16, 17, 40, 3])
    query_start_loc = torch.arange(len(lens) + 1, dtype=torch.int32)
    expected = naive_attention(
        q, k_cache, v_cache, block_tables, lens, query_start_loc, SCALE, sliding_window
    )
    actual = paged_attention_decode_sdpa(q, k_cache, v_cache, block_tables, lens, SCALE, sliding_window)
    torch.testing.assert_close(actual.double(), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("invariant", [False, True])
@pytest.mark.parametrize("sliding_window", [None, 8])
def test_softcapped_decode_matches_float64(sliding_window, invariant):
    q, k_cache, v_cache, block_tables, lens = _decode_batch([1, 16, 17, 40, 3, 300])
    query_start_loc = torch.arange(len(lens) + 1, dtype=torch.int32)
    expected = naive_attention(
        q, k_cache, v_cache, block_tables, lens, query_start_loc, SCALE, sliding_window, softcap=1.5
    )
    before = set_batch_invariant(invariant)
    try:
        actual = paged_attention_decode_sdpa(
            q, k_cache, v_cache, block_tables, lens, SCALE, sliding_window, softcap=1.5
        )
    finally:
        set_batch_invariant(before)
    torch.testing.assert_close(actual.double(), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("sliding_window", [None, 8])
def test_decode_row_is_independent_of_the_batch(sliding_window):
    q, k_cache, v_cache, block_tables, lens = _decode_batch([5, 70, 33, 129])
    together = paged_attention_decode_sdpa(q, k_cache, v_cache, block_tables, lens, SCALE, sliding_window)
    for b in range(len(lens)):
        rows = slice(b, b + 1)
        alone = paged_attention_decode_sdpa(
            q[rows], k_cache, v_cache, block_tables[rows], lens[rows], SCALE, sliding_window
        )
        assert torch.equal(alone[0], together[b])


def test_empty_batch():
    q, k_cache, v_cache, block_tables, lens = _decode_batch([4])
    out = paged_attention_decode_sdpa(q[:0], k_cache, v_cache, block_tables[:0], lens[:0], SCALE)
    assert out.shape == (0, *q.shape[1:])


def test_decode_follows_tables_rewritten_in_place():
    """A step's gather plan is reused by the step's every layer, never by a later step whose static
    buffers (the decode-graph path) were rewritten in place."""
    q, k_cache, v_cache, block_tables, lens = _decode_batch([20, 40])
    first = paged_attention_decode_sdpa(q, k_cache, v_cache, block_tables, lens, SCALE)
    lens[0] = 9
    block_tables[1, :3] = block_tables[1, :3].flip(0)  # its three blocks, in another order
    again = paged_attention_decode_sdpa(q, k_cache, v_cache, block_tables, lens, SCALE)
    fresh = paged_attention_decode_sdpa(q, k_cache, v_cache, block_tables.clone(), lens.clone(), SCALE)
    assert torch.equal(again, fresh)
    assert not torch.equal(again, first)


def _fused_rows_gathered(q, k_cache, v_cache, tables, lens, sliding_window):
    """Each row's fused call over its keys gathered page by page, flattened, sliced and transposed."""
    block_size, rows = k_cache.shape[1], []
    for b, n in enumerate(lens.tolist()):
        first = 0 if sliding_window is None else max(0, n - sliding_window)
        pages = tables[b, : -(-n // block_size)].long()
        keys = k_cache.index_select(0, pages).flatten(0, 1)[first:n]
        values = v_cache.index_select(0, pages).flatten(0, 1)[first:n]
        out = torch.nn.functional.scaled_dot_product_attention(
            q[b : b + 1].unsqueeze(2),
            keys.transpose(0, 1).unsqueeze(0),
            values.transpose(0, 1).unsqueeze(0),
            scale=SCALE,
            enable_gqa=True,
        )
        rows.append(out.squeeze(2))
    return torch.cat(rows)


@pytest.mark.parametrize("sliding_window", [None, 8])
@pytest.mark.parametrize("seq_lens", [[40], [1, 16, 17, 40, 3]])
@pytest.mark.parametrize("consecutive", [True, False])
def test_decode_rows_attend_over_views_with_the_gathered_bits(sliding_window, seq_lens, consecutive):
    """Decode rows attend over a view of their keys, in the cache itself where every row's blocks
    are consecutive, else in the gathered pages: the bits of the fused call over the keys gathered,
    flattened, sliced and transposed."""
    q, k_cache, v_cache, tables, lens = _decode_batch(seq_lens)
    if consecutive:
        num_blocks, block_size = k_cache.shape[:2]
        tables = torch.full((len(seq_lens), num_blocks), num_blocks + 1000, dtype=torch.int32)
        start = 0
        for b, n in enumerate(seq_lens):
            count = -(-n // block_size)
            tables[b, :count] = torch.arange(start, start + count, dtype=torch.int32)
            start += count
    actual = paged_attention_decode_sdpa(q, k_cache, v_cache, tables, lens, SCALE, sliding_window)
    assert torch.equal(actual, _fused_rows_gathered(q, k_cache, v_cache, tables, lens, sliding_window))
    query_start_loc = torch.arange(len(lens) + 1, dtype=torch.int32)
    expected = naive_attention(q, k_cache, v_cache, tables, lens, query_start_loc, SCALE, sliding_window)
    torch.testing.assert_close(actual.double(), expected, atol=1e-5, rtol=1e-5)
