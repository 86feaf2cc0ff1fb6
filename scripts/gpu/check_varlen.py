"""kernels/varlen_attention.causal_varlen against per-request SDPA with a bottom-right causal mask,
on CUDA, for packed requests with and without cached prefixes (issue 16's MLA prefill path).

    python3 scripts/gpu/check_varlen.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> int:
    import torch

    from kernels import varlen_attention

    print(f"torch {torch.__version__}, parameters {sorted(varlen_attention._PARAMETERS)}")
    failures = 0
    gen = torch.Generator(device="cuda").manual_seed(0)
    for heads, dim, width in ((4, 16, 8), (16, 192, 128)):
        for query_lens, context_lens in (([5], [5]), ([4, 5], [8, 5]), ([3, 7, 2, 64], [10, 7, 6, 300])):
            q = torch.randn(sum(query_lens), heads, dim, device="cuda", generator=gen).bfloat16()
            k = torch.randn(sum(context_lens), heads, dim, device="cuda", generator=gen).bfloat16()
            v = torch.randn(sum(context_lens), heads, width, device="cuda", generator=gen).bfloat16()
            got = varlen_attention.causal_varlen(q, k, v, query_lens, context_lens, dim**-0.5).float()
            want = varlen_attention.causal_reference(q, k, v, query_lens, context_lens, dim**-0.5)
            error = (got - want).abs().max().item()
            ok = error < 2e-2
            failures += not ok
            print(
                f"{'ok  ' if ok else 'FAIL'} heads {heads} dim {dim}/{width} q {query_lens} k {context_lens}: max error {error:.4f}"
            )
    # The offsets as two views into one buffer (what the first version passed): read from its start?
    q = torch.randn(9, 4, 16, device="cuda", generator=gen).bfloat16()
    k = torch.randn(13, 4, 16, device="cuda", generator=gen).bfloat16()
    v = torch.randn(13, 4, 16, device="cuda", generator=gen).bfloat16()
    both = torch.tensor([0, 4, 9, 0, 8, 13], dtype=torch.int32, device="cuda")
    sliced = varlen_attention._varlen_attn(
        q, k, v, both[:3], both[3:], 5, 8, scale=0.25, **varlen_attention._CAUSAL
    ).float()
    error = (sliced - varlen_attention.causal_reference(q, k, v, [4, 5], [8, 5], 0.25)).abs().max().item()
    print(f"offsets as views into one buffer: max error {error:.4f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
