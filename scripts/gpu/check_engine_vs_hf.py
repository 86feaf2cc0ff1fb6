"""On the GPU: greedy bf16 outputs of our engine against transformers on tiny checkpoints.

For each architecture, the same prompts go through ``engine.LLM`` (Triton kernels on CUDA) and
through ``transformers`` ``generate`` (greedy), and the first N tokens are compared. Prints one
line per prompt and a summary; exits 1 on any mismatch.

    python3 scripts/gpu/check_engine_vs_hf.py --tokens 32 --dtype bfloat16
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
from pathlib import Path

PROMPTS = [
    "The quick brown fox jumps over the lazy dog.",
    "def fibonacci(n):\n    return",
    "Once upon a time, in a land far away, there lived a",
    "1, 2, 3, 4,",
]


def hf_greedy(model_dir: Path, prompt_ids: list[list[int]], tokens: int, dtype: str) -> list[list[int]]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=getattr(torch, dtype)).cuda().eval()
    outs = []
    with torch.inference_mode():
        for ids in prompt_ids:
            input_ids = torch.tensor([ids], device="cuda")
            out = model.generate(
                input_ids,
                attention_mask=torch.ones_like(input_ids),
                max_new_tokens=tokens,
                min_new_tokens=tokens,
                do_sample=False,
                pad_token_id=0,
                output_scores=True,
                return_dict_in_generate=True,
            )
            # Top-1 minus top-2 logit at each step: a divergence at a margin of a few bf16 ulps is a
            # near-tie that rounding order decides, not a wrong kernel.
            margins = [float(s[0].float().topk(2).values.diff().abs()) for s in out.scores]
            outs.append((out.sequences[0, len(ids) :].tolist(), margins))
    return outs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    parser.add_argument("--arch", action="append", help="default: every tiny architecture")
    parser.add_argument(
        "--kernels",
        nargs="+",
        default=["triton", "torch"],
        choices=("triton", "torch"),
        help="kernel paths to check (torch = the references, run on the GPU)",
    )
    args = parser.parse_args()

    import torch

    from engine import LLM, SamplingParams
    from engine.tiny_model import ARCHES, make_tiny_model

    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for n, arch in enumerate(args.arch or ARCHES):
            model_dir = make_tiny_model(Path(tmp) / arch, arch=arch, seed=10 + n, dtype=args.dtype)
            theirs = None
            for kernels in args.kernels:
                os.environ["CHASSIS_KERNELS"] = kernels
                llm = LLM(model_dir, device="cuda", dtype=args.dtype, num_gpu_blocks=256)
                prompt_ids = [llm.tokenizer.encode(p, add_special_tokens=True) for p in PROMPTS]
                ours = [
                    o.token_ids
                    for o in llm.generate(
                        prompt_ids, SamplingParams(max_tokens=args.tokens, temperature=0.0, ignore_eos=True)
                    )
                ]
                del llm
                gc.collect()
                torch.cuda.empty_cache()
                theirs = theirs or hf_greedy(model_dir, prompt_ids, args.tokens, args.dtype)
                for i, (a, (b, margins)) in enumerate(zip(ours, theirs, strict=True)):
                    same = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), len(a))
                    ok = same >= args.tokens
                    failures += not ok
                    why = f" (transformers' top-2 margin there: {margins[same]:.4f})" if not ok else ""
                    print(
                        f"{arch:8s} kernels={kernels:6s} prompt {i}: {'MATCH' if ok else 'DIFF'} "
                        f"first {same}/{args.tokens} tokens identical{why}"
                    )
    print(
        f"engine vs transformers, {args.dtype}, greedy {args.tokens} tokens: "
        f"{'all match' if not failures else f'{failures} prompt(s) differ'}"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
