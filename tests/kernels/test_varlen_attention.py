"""kernels/varlen_attention.py off CUDA: never offered, and the offsets it hands flash attention
(the CUDA call itself is tested through MLA in tests/engine/layers/test_mla.py)."""

import torch

from kernels.varlen_attention import _offsets, varlen_available


def test_not_offered_off_cuda_or_for_head_sizes_flash_attention_lacks():
    assert not varlen_available(torch.zeros(2, 2, 16), 16)
    if torch.cuda.is_available():
        q = torch.zeros(2, 2, 16, device="cuda")
        assert varlen_available(q, 192) and not varlen_available(q, 12) and not varlen_available(q, 264)


def test_offsets_are_the_queries_then_the_contexts_each_from_zero():
    queries, contexts = _offsets((4, 5), (8, 5), torch.device("cpu"))
    assert queries.dtype == contexts.dtype == torch.int32
    assert queries.tolist() == [0, 4, 9] and contexts.tolist() == [0, 8, 13]
    assert queries.storage_offset() == contexts.storage_offset() == 0
