import pytest
import torch

from kernels.paged_attention import paged_attention, paged_attention_torch
from tests.kernels.paged_cases import make_cache, naive_attention
from tests.kernels.tolerances import assert_close

# A fresh 7-token prefill, a 37-token cached prefix extended by 5, a decode with a partial last
# block, a decode at exactly one full block, and a 20-token prefill spanning two blocks.
SEQ_LENS = [7, 42, 20, 16, 20]
Q_LENS = [7, 5, 1, 1, 20]


def make_batch(device, dtype, q_heads=6, kv_heads=2, head_dim=64, seq_lens=SEQ_LENS, q_lens=Q_LENS):
    k_cache, v_cache, block_tables, seq_lens_t = make_cache(seq_lens, kv_heads, head_dim, dtype, device)
    query_start_loc = torch.tensor(
        [0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32, device=device
    )
    q = torch.randn(sum(q_lens), q_heads, head_dim, device=device).to(dtype)
    return q, k_cache, v_cache, block_tables, seq_lens_t, query_start_loc


@pytest.mark.parametrize("sliding_window", [None, 8])
def test_reference_matches_float64(sliding_window):
    args = make_batch("cpu", torch.float32)
    scale = 64**-0.5
    expected = naive_attention(*args, scale, sliding_window)
    actual = paged_attention_torch(*args, scale, sliding_window)
    torch.testing.assert_close(actual.double(), expected, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize(
    ("dtype", "sliding_window"),
    [(torch.float32, None), (torch.float32, 8), (torch.bfloat16, None), (torch.float16, 5)],
)
def test_triton_matches_reference(device, force_triton, dtype, sliding_window):
    args = make_batch(device, dtype)
    scale = 64**-0.5
    assert_close(
        paged_attention(*args, scale, sliding_window),
        paged_attention_torch(*args, scale, sliding_window),
        dtype,
    )


@pytest.mark.parametrize("sliding_window", [None, 8])
def test_softcapped_reference_matches_float64(sliding_window):
    args = make_batch("cpu", torch.float32)
    scale = 64**-0.5
    expected = naive_attention(*args, scale, sliding_window, softcap=1.5)
    actual = paged_attention_torch(*args, scale, sliding_window, softcap=1.5)
    torch.testing.assert_close(actual.double(), expected, atol=1e-6, rtol=1e-6)
    # the cap bites: scores of ~N(0, 1) are squeezed into (-1.5, 1.5)
    assert not torch.allclose(actual, paged_attention_torch(*args, scale, sliding_window), atol=1e-3)


@pytest.mark.parametrize(
    ("dtype", "sliding_window"),
    [(torch.float32, None), (torch.float32, 8), (torch.bfloat16, None), (torch.float16, 5)],
)
def test_triton_softcap_matches_reference(device, force_triton, dtype, sliding_window):
    args = make_batch(
        device, dtype, q_heads=4, kv_heads=2, head_dim=40, seq_lens=[7, 42, 77], q_lens=[7, 5, 66]
    )
    assert_close(
        paged_attention(*args, 0.3, sliding_window, softcap=1.5),
        paged_attention_torch(*args, 0.3, sliding_window, softcap=1.5),
        dtype,
    )


def test_a_cap_that_is_not_positive_is_rejected():
    args = make_batch("cpu", torch.float32)
    with pytest.raises(ValueError, match="softcap"):
        paged_attention(*args, 0.1, softcap=0.0)


@pytest.mark.parametrize(("q_heads", "kv_heads", "head_dim"), [(4, 4, 32), (8, 1, 80)])
def test_triton_head_layouts(device, force_triton, q_heads, kv_heads, head_dim):
    """MHA, and multi-query with a head_dim that is not a power of two."""
    args = make_batch(device, torch.float32, q_heads, kv_heads, head_dim, seq_lens=[19, 33], q_lens=[19, 2])
    assert_close(paged_attention(*args, 0.1), paged_attention_torch(*args, 0.1), torch.float32)


def test_triton_long_prefill_uses_several_query_tiles(device, force_triton):
    args = make_batch(device, torch.float32, 2, 1, 32, seq_lens=[150, 3], q_lens=[140, 3])
    assert_close(paged_attention(*args, 0.2), paged_attention_torch(*args, 0.2), torch.float32)


def test_triton_reads_q_view_of_fused_qkv(device, force_triton):
    q, *rest = make_batch(device, torch.float32, seq_lens=[9], q_lens=[9])
    qkv = torch.randn(9, (6 + 2 + 2) * 64, device=device)
    q_view = qkv[:, : 6 * 64].view(9, 6, 64)
    assert_close(
        paged_attention(q_view, *rest, 0.125), paged_attention_torch(q_view, *rest, 0.125), torch.float32
    )


def test_bad_inputs_are_rejected():
    q, k_cache, v_cache, block_tables, seq_lens, query_start_loc = make_batch("cpu", torch.float32)
    with pytest.raises(ValueError, match="query_start_loc"):
        paged_attention(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc[:-1], 0.1)
    with pytest.raises(ValueError, match="multiple of kv heads"):
        paged_attention(q[:, :5], k_cache, v_cache, block_tables, seq_lens, query_start_loc, 0.1)
    with pytest.raises(ValueError, match="sliding_window"):
        paged_attention(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, 0.1, sliding_window=0)


def test_triton_sequence_with_no_new_tokens_is_skipped(device, force_triton):
    q, k_cache, v_cache, block_tables, seq_lens, query_start_loc = make_batch(
        device, torch.float32, seq_lens=[12, 30, 9], q_lens=[3, 0, 2]
    )
    args = (q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, 0.125)
    assert_close(paged_attention(*args), paged_attention_torch(*args), torch.float32)
