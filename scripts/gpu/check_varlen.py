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
    failures += _engine_shaped(gen)
    return 1 if failures else 0


def _engine_shaped(gen) -> int:
    """Keys and values made the way LatentAttention._expand makes them (one kv_b_proj product, split
    into per-head views; the shared rope keys broadcast), attended both ways the layer does: the
    varlen call, and LatentAttention._causal (SDPA on transposed views) per request."""
    import types

    import torch
    import torch.nn.functional as F

    from engine.layers.latent_attention import LatentAttention
    from kernels import varlen_attention

    failures = 0
    for heads, nope, rope, width, rank in ((4, 12, 4, 8, 32), (16, 128, 64, 128, 512)):
        query_lens, context_lens = [4, 5], [8, 5]
        latent = torch.randn(sum(context_lens), rank, device="cuda", generator=gen).bfloat16()
        key_rope = torch.randn(sum(context_lens), rope, device="cuda", generator=gen).bfloat16()
        weight = (
            torch.randn(heads * (nope + width), rank, device="cuda", generator=gen) * rank**-0.5
        ).bfloat16()
        kv = F.linear(latent, weight).view(latent.shape[0], heads, -1)
        k_nope, v = kv.split([nope, width], dim=-1)
        k = torch.cat((k_nope, key_rope.unsqueeze(1).expand(-1, heads, -1)), dim=-1)
        q_all = torch.randn(sum(query_lens) + 2, heads, nope + rope, device="cuda", generator=gen).bfloat16()
        q = q_all[1 : 1 + sum(query_lens)]  # a slice of the step's rows, as _expanded passes it
        scale = (nope + rope) ** -0.5
        want = varlen_attention.causal_reference(q, k, v, query_lens, context_lens, scale)
        got = varlen_attention.causal_varlen(q, k, v, query_lens, context_lens, scale).float()
        layer = types.SimpleNamespace(scale=scale)
        per_request, first, start = [], 0, 0
        for n, length in zip(query_lens, context_lens, strict=True):
            per_request.append(
                LatentAttention._causal(
                    layer, q[start : start + n], k[first : first + length], v[first : first + length]
                )
            )
            first, start = first + length, start + n
        sdpa = torch.cat(per_request).float()
        variants = {"varlen": got, "_causal (SDPA per request)": sdpa}
        for backend in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION"):
            padded, first, start = [], 0, 0
            try:
                with torch.nn.attention.sdpa_kernel(getattr(torch.nn.attention.SDPBackend, backend)):
                    for n, length in zip(query_lens, context_lens, strict=True):
                        keys, values = k[first : first + length], v[first : first + length]
                        if backend == "FLASH_ATTENTION":
                            values = F.pad(values, (0, keys.shape[-1] - width))
                        one = LatentAttention._causal(layer, q[start : start + n], keys, values)
                        padded.append(one[..., :width])
                        first, start = first + length, start + n
            except RuntimeError as error:
                print(
                    f"     engine-shaped heads {heads}, _causal under {backend}: unavailable ({str(error)[:80]})"
                )
                continue
            variants[f"_causal under {backend}"] = torch.cat(padded).float()
        for name, out in variants.items():
            errors = [
                (out[a:b] - want[a:b]).abs().max().item()
                for a, b in ((0, query_lens[0]), (query_lens[0], sum(query_lens)))
            ]
            ok = max(errors) < 5e-2
            failures += not ok
            print(
                f"{'ok  ' if ok else 'FAIL'} engine-shaped heads {heads} k {nope}+{rope} v {width}, {name}: "
                f"max error per request {errors[0]:.4f} / {errors[1]:.4f}"
            )
    return failures


if __name__ == "__main__":
    sys.exit(main())
