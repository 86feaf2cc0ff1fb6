"""kernels/varlen_attention.py off CUDA: never offered, the offsets it hands flash attention, and its
self-check against per-request attention, with torch's entry point emulated (the CUDA call itself is
tested through MLA in tests/engine/layers/test_mla.py and scripts/gpu/check_varlen.py)."""

import torch

from kernels.varlen_attention import _offsets, varlen_available


def test_not_offered_off_cuda_or_for_head_sizes_and_dtypes_flash_attention_lacks():
    assert not varlen_available(torch.zeros(2, 2, 16, dtype=torch.bfloat16), 16)
    if torch.cuda.is_available():
        q = torch.zeros(2, 2, 16, device="cuda", dtype=torch.bfloat16)
        assert varlen_available(q, 192) and not varlen_available(q, 12) and not varlen_available(q, 264)
        # An fp32 DeepSeek engine on CUDA crashed at warm-up: "FlashAttention only support fp16 and bf16".
        assert not varlen_available(q.float(), 192)


def test_offsets_are_the_queries_then_the_contexts_each_from_zero():
    queries, contexts = _offsets((4, 5), (8, 5), torch.device("cpu"))
    assert queries.dtype == contexts.dtype == torch.int32
    assert queries.tolist() == [0, 4, 9] and contexts.tolist() == [0, 8, 13]
    assert queries.storage_offset() == contexts.storage_offset() == 0


def _emulated_varlen(top_left: bool = False):
    """torch's varlen entry point emulated request by request (``top_left``: the causal mask aligned
    at the context's start, as a wrong backend would)."""
    import torch.nn.functional as F

    def varlen(q, k, v, cu_q, cu_k, max_q, max_k, scale=None, window_size=(-1, -1), is_causal=False):
        assert window_size == (-1, 0) or is_causal
        outs = []
        for i in range(len(cu_q) - 1):
            qs, qe, ks, ke = int(cu_q[i]), int(cu_q[i + 1]), int(cu_k[i]), int(cu_k[i + 1])
            n, length = qe - qs, ke - ks
            first = 0 if top_left else length - n
            mask = torch.arange(length) <= torch.arange(first, first + n).unsqueeze(1)
            one = F.scaled_dot_product_attention(
                *(t.transpose(0, 1).float() for t in (q[qs:qe], k[ks:ke], v[ks:ke])),
                attn_mask=mask,
                scale=scale,
            )
            outs.append(one.transpose(0, 1).to(q.dtype))
        return torch.cat(outs)

    return varlen


def test_the_self_check_accepts_bottom_right_alignment_and_refuses_anything_else(monkeypatch, caplog):
    from kernels import varlen_attention

    monkeypatch.setattr(varlen_attention, "_varlen_attn", _emulated_varlen())
    assert varlen_attention.agrees_with_sdpa.__wrapped__(torch.device("cpu"))
    monkeypatch.setattr(varlen_attention, "_varlen_attn", _emulated_varlen(top_left=True))
    assert not varlen_attention.agrees_with_sdpa.__wrapped__(torch.device("cpu"))
    assert "request by request" in caplog.text
