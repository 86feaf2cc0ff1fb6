"""On the GPU: greedy outputs of our engine against transformers on briefly trained tiny checkpoints.

Each tiny architecture is built, then trained for ``--train-steps`` on the tokenizer's corpus
(``engine.testing.tiny_training``): random tiny weights give near-flat logits whose bf16 argmax is decided by
rounding order, while trained ones are peaked as a real checkpoint's are. Prompts are cut from the
held-out text; each goes through ``engine.LLM`` and through ``transformers`` greedy ``generate``,
and the first N tokens are compared. Per prompt it prints identical or the first divergent index
with transformers' top-2 logit margin there (a few bf16 ulps means a near-tie that rounding decides,
not a wrong kernel), the mean top-2 margin over all steps, and per architecture the trained losses.
Exits 1 on any divergence.

    python3 scripts/gpu/check_engine_vs_hf.py                    # bf16, CUDA, Triton and torch kernels
    python3 scripts/gpu/check_engine_vs_hf.py --train-steps 0    # random weights, for comparison
    python3 scripts/gpu/check_engine_vs_hf.py --device cpu --dtype float32 --train-steps 30 --kernels torch
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# Fixed text prompts; scripts/gpu/diagnose_logits.py imports them (this script uses held-out text).
PROMPTS = [
    "The quick brown fox jumps over the lazy dog.",
    "def fibonacci(n):\n    return",
    "Once upon a time, in a land far away, there lived a",
    "1, 2, 3, 4,",
]


def hf_greedy(
    model_dir: Path, prompts: list[list[int]], tokens: int, dtype: str, device: str
) -> list[tuple[list[int], list[tuple[float, float]]]]:
    """Per prompt: transformers' greedy tokens and its top-2 logits at each step."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).to(device).eval()
    model.generation_config.eos_token_id = None  # full-length runs, as our engine with ignore_eos
    outs = []
    with torch.inference_mode():
        for ids in prompts:
            # One prompt, no attention_mask, as tests/engine/models/test_llm_vs_transformers.py does:
            # with an all-ones mask transformers (on the GPU) built Mistral's sliding window another way.
            out = model.generate(
                torch.tensor([ids], device=device),
                max_new_tokens=tokens,
                do_sample=False,
                pad_token_id=0,
                output_logits=True,
                return_dict_in_generate=True,
            )
            top2 = [tuple(step[0].float().topk(2).values.tolist()) for step in out.logits]
            outs.append((out.sequences[0, len(ids) :].tolist(), top2))
    del model
    return outs


def engine_greedy(model_dir: Path, prompts: list[list[int]], tokens: int, args) -> list[list[int]]:
    import torch

    from engine import LLM, SamplingParams

    llm = LLM(
        model_dir,
        device=args.device,
        dtype=args.dtype,
        num_gpu_blocks=256,
        sliding_window_kv=args.sliding_window_kv,
        enforce_eager=args.enforce_eager,
    )
    outs = llm.generate(prompts, SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True))
    del llm
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return [o.token_ids for o in outs]


def _verdict(same: int, tokens: int, top2: list[tuple[float, float]]) -> str:
    if same >= tokens:
        return f"identical {tokens}/{tokens}"
    # A margin of a bf16 ulp or two at the logits' magnitude is a near-tie that rounding order decides.
    first, second = top2[same]
    return (
        f"DIFF at token {same} (transformers' top-2 logits there {first:.4f} / {second:.4f}, "
        f"margin {first - second:.4f})"
    )


def _mean_margin(top2: list[tuple[float, float]]) -> float:
    return sum(first - second for first, second in top2) / len(top2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=32, help="greedy tokens compared per prompt")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--arch", action="append", help="default: every tiny architecture")
    parser.add_argument(
        "--kernels",
        nargs="+",
        default=["triton", "torch"],
        choices=("triton", "torch"),
        help="kernel paths to check (torch = the references, run on the device)",
    )
    parser.add_argument(
        "--train-steps",
        type=int,
        default=300,
        help="training steps per checkpoint (0: random weights, as before training existed)",
    )
    parser.add_argument(
        "--reference-dtype",
        help="transformers' dtype (default --dtype): float32 separates its rounding from ours",
    )
    parser.add_argument("--reference-device", help="transformers' device (default --device)")
    parser.add_argument(
        "--sliding-window-kv", default="bounded-replay", help="EngineConfig.sliding_window_kv of our engine"
    )
    parser.add_argument("--enforce-eager", action="store_true", help="our engine without CUDA graphs")
    parser.add_argument("--prompts", type=int, default=8, help="prompts cut from the held-out text")
    parser.add_argument("--seed", type=int, default=0, help="seed of the prompts and of training")
    args = parser.parse_args()
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # read when kernels are imported

    from engine.testing.tiny_model import ARCHES, make_tiny_model
    from engine.testing.tiny_training import heldout_prompts, train_tiny_model

    started = time.monotonic()
    failures = 0
    summaries = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, arch in enumerate(args.arch or ARCHES):
            model_dir = make_tiny_model(Path(tmp) / arch, arch=arch, seed=10 + n, dtype=args.dtype)
            trained = "random weights"
            if args.train_steps:
                result = train_tiny_model(
                    model_dir,
                    args.train_steps,
                    seed=args.seed + n,
                    device=args.device,
                    log_every=max(1, args.train_steps // 4),
                    log=lambda line, arch=arch: print(f"{arch:8s} {line}", flush=True),
                )
                trained = (
                    f"{result.steps} steps, train loss {result.train_loss:.3f}, held-out loss "
                    f"{result.heldout_loss:.3f} (from {result.initial_heldout_loss:.3f})"
                )
            prompts = heldout_prompts(model_dir, args.prompts, seed=args.seed)
            theirs = hf_greedy(
                model_dir,
                prompts,
                args.tokens,
                args.reference_dtype or args.dtype,
                args.reference_device or args.device,
            )
            diverged = 0
            for kernels in args.kernels:
                os.environ["CHASSIS_KERNELS"] = kernels
                ours = engine_greedy(model_dir, prompts, args.tokens, args)
                for i, (a, (b, top2)) in enumerate(zip(ours, theirs, strict=True)):
                    same = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), len(a))
                    diverged += same < args.tokens
                    print(
                        f"{arch:8s} kernels={kernels:6s} prompt {i} ({len(prompts[i])} tokens): "
                        f"{_verdict(same, args.tokens, top2)}; mean top-2 margin {_mean_margin(top2):.4f}",
                        flush=True,
                    )
            failures += diverged
            all_top2 = [t for _, top2 in theirs for t in top2]
            summaries.append(
                f"{arch:8s} {trained}; mean top-2 margin {_mean_margin(all_top2):.4f}; "
                f"{diverged}/{len(prompts) * len(args.kernels)} prompt runs differ"
            )
    print("\n".join(summaries))
    print(
        f"engine vs transformers, {args.dtype} on {args.device}, greedy {args.tokens} tokens: "
        f"{'all identical' if not failures else f'{failures} prompt run(s) differ'} "
        f"({time.monotonic() - started:.0f} s)"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
