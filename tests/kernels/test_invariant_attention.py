import pytest
import torch

from kernels import invariant_attention as invariant_attention_module
from kernels.invariant_attention import invariant_attention, invariant_tiles
from tests.kernels.paged_cases import make_cache, naive_attention
from tests.kernels.tolerances import assert_close

Q_HEADS, KV_HEADS, HEAD_DIM = 8, 2, 32
CONTEXT = 200  # the target sequence's keys, all in the cache
TARGET = 140  # the query position whose output must not change
SCALE = HEAD_DIM**-0.5


def _launch(queries, k_cache, v_cache, tables, spans, window, softcap=None, decode_only=False):
    """One launch over several sequences: ``spans`` is ``[(table row, first position, stop)]``; each
    sequence feeds its queries ``queries[table row][first:stop]``. Returns the per-sequence outputs."""
    q = torch.cat([queries[row][first:stop] for row, first, stop in spans])
    seq_lens = torch.tensor([stop for _, _, stop in spans], dtype=torch.int32, device=q.device)
    lens = [stop - first for _, first, stop in spans]
    query_start_loc = torch.tensor(
        [0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=q.device
    )
    block_tables = tables[[row for row, _, _ in spans]]
    out = invariant_attention(
        q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, SCALE, window, softcap, decode_only
    )
    expected = naive_attention(
        q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, SCALE, window, softcap
    )
    return out, expected, query_start_loc.tolist()


def test_tiles_depend_on_the_model_only():
    assert invariant_tiles(4) == (16, 64, 4)
    assert invariant_tiles(1) == (64, 64, 4)
    assert invariant_tiles(128) == (1, 128, 4)


@pytest.mark.parametrize("softcap", [None, 1.5])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("window", [None, 50])
def test_a_query_has_the_same_bits_in_every_launch(
    device, force_triton, row_invariant_dot, monkeypatch, dtype, window, softcap
):
    split_launches = []
    original = invariant_attention_module._launch_split_decode
    monkeypatch.setattr(
        invariant_attention_module,
        "_launch_split_decode",
        lambda *args: split_launches.append(args[-1]) or original(*args),
    )
    lengths = [CONTEXT, 120, 90]  # the target sequence and two neighbours
    k_cache, v_cache, tables, _ = make_cache(lengths, KV_HEADS, HEAD_DIM, dtype, device)
    queries = [torch.randn(n, Q_HEADS, HEAD_DIM, device=device).to(dtype) for n in lengths]
    launches = {
        "decode alone": [(0, TARGET, TARGET + 1)],
        "decode among others": [(1, 100, 101), (2, 50, 51), (0, TARGET, TARGET + 1), (1, 7, 8)],
        "chunk of 64": [(0, 128, 192)],
        "chunk of 64 beside a prompt": [(2, 0, 90), (0, 128, 192), (1, 119, 120)],
        "whole prompt": [(0, 0, CONTEXT)],
        "prefix hit": [(1, 0, 40), (0, 137, 145)],
        "chunk of 16 at the end": [(0, 125, TARGET + 1)],
        "split decode alone": [(0, TARGET, TARGET + 1)],
        "split decode among others": [(1, 100, 101), (2, 50, 51), (0, TARGET, TARGET + 1), (1, 7, 8)],
    }
    results = {}
    for name, spans in launches.items():
        decode_only = name.startswith("split")
        out, expected, starts = _launch(
            queries, k_cache, v_cache, tables, spans, window, softcap, decode_only
        )
        assert_close(out.cpu(), expected.to(dtype), dtype)
        index = next(i for i, (row, *_) in enumerate(spans) if row == 0)
        results[name] = out[starts[index] + TARGET - spans[index][1]]
    assert split_launches and min(split_launches) >= 2  # segment slots: the split decode ran
    reference = results.pop("decode alone")
    for name, row in results.items():
        assert torch.equal(row, reference), name
