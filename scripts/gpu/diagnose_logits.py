"""Localise engine-vs-transformers differences: first-token logits, per kernel path and dtype.

For each tiny architecture and dtype, compares the prefill (first sampled token) logits of our
engine with transformers' on the same device: max |diff|, and transformers' top-1 minus top-2 margin.
A logic bug shows as a large diff in float32; bf16 rounding shows as a small diff that only flips
near-ties.

    python3 scripts/gpu/diagnose_logits.py --device cuda
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from scripts.gpu.check_engine_vs_hf import PROMPTS  # noqa: E402


def patch_per_op(worst: dict[str, float]) -> None:
    """Make every kernel op the layers call run both paths, return Triton's, record the worst
    max|triton - torch| / max|torch| per op (a bug shows as a ratio far above bf16's ~1e-2)."""
    import engine.layers.attention as attention
    import engine.layers.mlp as mlp
    import engine.layers.norm as norm
    import engine.layers.rotary as rotary
    from kernels._common import set_mode

    def both(name, fn):
        def wrapped(*args, **kwargs):
            set_mode("torch")
            ref = fn(*args, **kwargs)
            set_mode("triton")
            out = fn(*args, **kwargs)
            pairs = zip(out, ref, strict=True) if isinstance(out, tuple) else [(out, ref)]
            for a, b in pairs:
                scale = b.float().abs().max().clamp_min(1e-6)
                ratio = ((a.float() - b.float()).abs().max() / scale).item()
                worst[name] = max(worst.get(name, 0.0), ratio)
            return out

        return wrapped

    for module, names in (
        (norm, ("rms_norm", "fused_add_rms_norm")),
        (rotary, ("rotary_embedding",)),
        (mlp, ("silu_and_mul",)),
        (attention, ("paged_attention", "paged_attention_decode")),
    ):
        for name in names:
            setattr(module, name, both(name, getattr(module, name)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--kernels", nargs="+", default=["triton", "torch"])
    parser.add_argument("--arch", action="append")
    parser.add_argument("--per-op", action="store_true", help="run Triton and torch side by side per op")
    args = parser.parse_args()
    worst: dict[str, float] = {}
    if args.per_op:
        patch_per_op(worst)
        args.kernels = ["triton"]

    import torch
    from transformers import AutoModelForCausalLM

    from engine import LLM, SamplingParams
    from engine.testing.tiny_model import ARCHES, make_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        for n, arch in enumerate(args.arch or ARCHES):
            for dtype in args.dtype:
                model_dir = make_tiny_model(
                    Path(tmp) / f"{arch}-{dtype}", arch=arch, seed=10 + n, dtype=dtype
                )
                hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype))
                hf = hf.to(args.device).eval()
                for kernels in args.kernels:
                    os.environ["CHASSIS_KERNELS"] = kernels
                    llm = LLM(
                        model_dir, device=args.device, dtype=dtype, num_gpu_blocks=256, enforce_eager=True
                    )
                    llm.engine.runner.keep_logits = True
                    for i, text in enumerate(PROMPTS):
                        ids = llm.tokenizer.encode(text, add_special_tokens=True)
                        llm.engine.recorded_logits.clear()
                        llm.generate([ids], SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True))
                        ours = next(iter(llm.engine.recorded_logits.values()))[0].float()
                        with torch.inference_mode():
                            theirs = hf(torch.tensor([ids], device=args.device)).logits[0, -1].float().cpu()
                        top2 = theirs.topk(2).values
                        print(
                            f"{arch:8s} {dtype:9s} {kernels:6s} prompt {i}: max|diff|="
                            f"{(ours - theirs).abs().max().item():.4f} hf-margin={(top2[0] - top2[1]).item():.4f} "
                            f"argmax ours/hf={ours.argmax().item()}/{theirs.argmax().item()}",
                            flush=True,
                        )
                    del llm
                    if worst:
                        print(
                            f"{arch:8s} {dtype:9s} per-op worst relative diff: "
                            + ", ".join(f"{k}={v:.2e}" for k, v in sorted(worst.items())),
                            flush=True,
                        )
                        worst.clear()
                del hf
    return 0


if __name__ == "__main__":
    sys.exit(main())
