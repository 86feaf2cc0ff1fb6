"""Where a batch's prompt steps go (issue 16): the batch-128 run's steps that carry prompt chunks
take longer than a prefill-only run of as many prompts, and the offline mix is made of such steps.

Builds ``--arch`` with random weights as ``engine.bench.engine_bench`` does (CUDA graphs for decode),
then for ``--batch`` prompts of ``--prompt-len`` tokens runs (a) a prefill-only pass (one output
token each) and (b) a pass that goes on decoding for ``--tokens`` tokens, on fresh prompts each, and
prints every step that did not replay a decode graph: its GPU span (CUDA events), its tokens, its
prompt requests (how many start at position 0) and its one-token rows. Then both passes once more
under torch.profiler: the CUDA kernels by total time, side by side, so the extra time of the mixed
steps is read kernel by kernel. Every Triton kernel compiled during the passes is listed under the
step that compiled it (a first compile of a tile choice costs 0.3-0.7 s on the H200).

    python3 scripts/gpu/mixed_steps.py --arch deepseek-v2-lite
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--arch", default="deepseek-v2-lite", help="engine.bench.random_arch name")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--prompt-len", type=int, default=576)
    parser.add_argument("--tokens", type=int, default=8, help="output tokens of the decoding pass")
    parser.add_argument("--top", type=int, default=22, help="kernels listed per pass")
    parser.add_argument("--no-profile", action="store_true", help="skip the torch.profiler passes")
    args = parser.parse_args(argv)

    import torch

    from engine import LLM, SamplingParams
    from engine.bench.random_arch import write_config_dir
    from engine.bench.workloads import random_prompts

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = write_config_dir(args.arch, Path(tmp) / args.arch)
        llm = LLM(
            str(model_dir), device="cuda", dtype="bfloat16", load_format="dummy",
            max_num_seqs=256, max_num_batched_tokens=8192, gpu_memory_utilization=0.85,
        )  # fmt: skip
        runner = llm.engine.runner
        vocab = llm.engine.model_config.vocab_size
        seeds = iter(range(1000, 10**6))
        llm.generate(random_prompts(4, 64, 64, vocab, 7), SamplingParams(max_tokens=4, ignore_eos=True))
        steps: list[tuple] = []
        launch = runner.launch

        def recording_launch(out, *a, **kw):
            prompts = [s for s in out.scheduled if s.num_tokens > 1]
            fresh = sum(1 for s in prompts if s.start == 0)
            steps.append((out.total_num_tokens, len(prompts), fresh, len(out.scheduled) - len(prompts)))
            return launch(out, *a, **kw)

        runner.launch = recording_launch
        compiled: list[tuple[int, str]] = []  # (step index in its pass, kernel and its specialization)

        def on_compile(*, repr: str, **_) -> None:  # noqa: A002 (Triton's keyword)
            compiled.append((len(steps) - 1, repr))

        from triton import knobs

        knobs.runtime.jit_post_compile_hook = on_compile

        def one_pass(tokens: int) -> tuple[float, list[tuple]]:
            prompts = random_prompts(args.batch, args.prompt_len, args.prompt_len, vocab, next(seeds))
            params = SamplingParams(max_tokens=tokens, ignore_eos=True, temperature=0.0)
            steps.clear()
            compiled.clear()
            runner.step_events = []
            torch.cuda.synchronize()
            started = time.perf_counter()
            try:
                llm.generate(prompts, params)
                torch.cuda.synchronize()
                wall = time.perf_counter() - started
                spans = [s.elapsed_time(e) for s, e in runner.step_events]
            finally:
                runner.step_events = None
            return wall, [(span, *step) for span, step in zip(spans, steps, strict=True)]

        for label, tokens in (("prefill only", 1), (f"{args.tokens} tokens", args.tokens)):
            wall, rows = one_pass(tokens)
            print(
                f"\n== {label}: {args.batch} prompts of {args.prompt_len}, wall {wall * 1e3:.1f} ms, {len(rows)} steps"
            )
            print(f"{'step':>5}{'span ms':>10}{'tokens':>8}{'prompts':>9}{'fresh':>7}{'one-token rows':>16}")
            for i, (span, total, prompts, fresh, decodes) in enumerate(rows):
                if prompts:
                    print(f"{i:>5}{span:>10.2f}{total:>8}{prompts:>9}{fresh:>7}{decodes:>16}")
            rest = [span for span, _, prompts, *_ in rows if not prompts]
            if rest:
                print(
                    f"  {len(rest)} decode-only steps: {sum(rest):.1f} ms, median {sorted(rest)[len(rest) // 2]:.2f} ms"
                )
            prompt_ms = sum(span for span, _, prompts, *_ in rows if prompts)
            print(f"  steps with prompt chunks: {prompt_ms:.1f} ms of GPU spans")
            for step, kernel in compiled:
                print(f"  compiled in step {step}: {kernel[:400]}")
        runner.launch = launch
        if not args.no_profile:
            from torch.profiler import ProfilerActivity, profile

            for label, tokens in (("prefill only", 1), (f"{args.tokens} tokens", args.tokens)):
                prompts = random_prompts(args.batch, args.prompt_len, args.prompt_len, vocab, next(seeds))
                params = SamplingParams(max_tokens=tokens, ignore_eos=True, temperature=0.0)
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    llm.generate(prompts, params)
                    torch.cuda.synchronize()
                print(f"\n== CUDA kernels, {label}")
                print(
                    prof.key_averages().table(
                        sort_by="cuda_time_total", row_limit=args.top, max_name_column_width=70
                    )
                )
        llm.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
