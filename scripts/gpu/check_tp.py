"""On >= 2 GPUs: greedy outputs of tensor_parallel_size=2 against 1 (NCCL, CUDA graphs as served).

Tiny checkpoints of every architecture, plus one with a single KV head (replicated on both ranks),
written in bf16; the same prompts through ``LLM(tensor_parallel_size=1)`` and ``=2``, first N tokens
compared. A divergence is printed with the TP=1 top-1 minus top-2 logit margin at that step: a
margin of a few bf16 ulps is a near-tie that all-reduce rounding order decides. Exits 1 on any
mismatch. Each checkpoint is first trained ``--train-steps`` steps (``engine.testing.tiny_training``):
random tiny weights give near-flat logits whose bf16 argmax any change of summation order flips,
trained ones are peaked as a real model's are.

    python3 scripts/gpu/check_tp.py --tokens 32 --dtype bfloat16
    python3 scripts/gpu/check_tp.py --train-steps 0    # random weights
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
from pathlib import Path

PROMPTS = [
    "The quick brown fox jumps over the lazy dog.",
    "def fibonacci(n):\n    return",
    "Once upon a time, in a land far away, there lived a",
    "1, 2, 3, 4,",
]
CASES = [("llama", 2), ("mistral", 2), ("qwen2", 2), ("qwen3", 2), ("qwen3", 1)]  # (arch, KV heads)


def generate(model_dir: Path, tp: int, tokens: int, dtype: str, device: str):
    import torch

    from engine import LLM, SamplingParams

    params = SamplingParams(max_tokens=tokens, min_tokens=tokens, temperature=0.0, ignore_eos=True)
    # Few graph sizes (4 prompts): capture and warm-up stay short for the 10 engines this builds.
    with LLM(
        model_dir, device=device, dtype=dtype, tensor_parallel_size=tp, num_gpu_blocks=256, max_num_seqs=8
    ) as llm:
        llm.engine.runner.keep_logits = True
        outs = llm.generate(PROMPTS, params)
        logits = [torch.stack(llm.engine.recorded_logits[o.request_id]) for o in outs]
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    return [o.token_ids for o in outs], logits


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu: a dry run with gloo")
    parser.add_argument(
        "--train-steps", type=int, default=300, help="training steps per checkpoint (0: random)"
    )
    parser.add_argument("--only", metavar="ARCH", help="only the cases of this architecture")
    args = parser.parse_args()

    import torch

    from engine.testing.tiny_model import make_tiny_model
    from engine.testing.tiny_training import train_tiny_model

    if args.device == "cuda" and torch.cuda.device_count() < 2:
        print(f"needs 2 GPUs, found {torch.cuda.device_count()}")
        return 2
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for seed, (arch, kv_heads) in enumerate(CASES, start=1):
            if args.only and arch != args.only:
                continue
            model_dir = make_tiny_model(
                Path(tmp) / f"{arch}-kv{kv_heads}",
                arch=arch,
                seed=seed,
                dtype=args.dtype,
                num_kv_heads=kv_heads,
            )
            if args.train_steps:
                result = train_tiny_model(
                    model_dir, args.train_steps, seed=seed, device=args.device, log=lambda _: None
                )
                print(
                    f"{arch} kv={kv_heads}: trained {result.steps} steps, held-out loss {result.heldout_loss:.3f}"
                )
            single, single_logits = generate(model_dir, 1, args.tokens, args.dtype, args.device)
            split, split_logits = generate(model_dir, 2, args.tokens, args.dtype, args.device)
            for i, (a, b) in enumerate(zip(single, split, strict=True)):
                diff = float((single_logits[i] - split_logits[i]).abs().max())
                if a == b:
                    print(
                        f"ok    {arch} kv={kv_heads} prompt {i}: {len(a)} tokens match (max |dlogit| {diff:.3g})"
                    )
                    continue
                step = next(j for j, (x, y) in enumerate(zip(a, b, strict=True)) if x != y)
                top2 = single_logits[i][step].float().topk(2).values
                margin = float(top2[0] - top2[1])
                print(
                    f"DIFF  {arch} kv={kv_heads} prompt {i}: first divergence at token {step} "
                    f"(tp1 {a[step]} vs tp2 {b[step]}); tp1 top-2 margin there {margin:.4g}"
                )
                failures += 1
    cases = [c for c in CASES if not args.only or c[0] == args.only]
    print(f"{failures} mismatching prompts of {len(cases) * len(PROMPTS)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
