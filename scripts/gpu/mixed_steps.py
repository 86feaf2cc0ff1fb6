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
    parser.add_argument(
        "--offline",
        type=int,
        default=0,
        metavar="N",
        help="also run N requests of the offline mix (engine.bench.workloads.offline's lengths) and print "
        "its steps by kind and size",
    )
    parser.add_argument(
        "--admission-batch", type=int, default=1, help="EngineConfig.admission_batch (default: %(default)s)"
    )
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
            admission_batch=args.admission_batch,
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

        def one_pass(tokens: int, prompts=None, params=None) -> tuple[float, list[tuple]]:
            if prompts is None:
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
        if args.offline:
            offline_mix(args.offline, vocab, one_pass, compiled)
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


def offline_mix(count: int, vocab: int, one_pass, compiled) -> None:
    """The offline workload's requests (same lengths and seed), its steps summed by kind: decode-only
    steps, and steps with prompt chunks by their token count."""
    from engine.bench.workloads import offline_requests

    prompts, params = offline_requests(count, vocab)
    wall, rows = one_pass(0, prompts, params)
    out_tokens = sum(p.max_tokens for p in params)
    print(
        f"\n== offline mix: {count} requests, wall {wall:.2f} s, {out_tokens / wall:,.0f} out tok/s, {len(rows)} steps"
    )
    print(
        f"{'kind':<34}{'steps':>7}{'span s':>9}{'median ms':>11}{'mean tokens':>13}{'mean 1-token rows':>19}"
    )
    kinds: dict[str, list[tuple]] = {}
    for row in rows:
        span, total, prompts_in, _, decodes = row
        if not prompts_in:
            kind = f"decode only, {'<= 256' if decodes <= 256 else '> 256'} rows"
        else:
            kind = next(
                f"prompt chunks, <= {b} tokens" for b in (512, 2048, 4096, 8192, 1 << 30) if total <= b
            )
        kinds.setdefault(kind, []).append(row)
    for kind, members in sorted(kinds.items()):
        spans = sorted(m[0] for m in members)
        print(
            f"{kind:<34}{len(members):>7}{sum(spans) / 1e3:>9.2f}{spans[len(spans) // 2]:>11.2f}"
            f"{sum(m[1] for m in members) / len(members):>13.0f}{sum(m[4] for m in members) / len(members):>19.1f}"
        )
    print(f"  GPU spans {sum(r[0] for r in rows) / 1e3:.2f} s of the {wall:.2f} s wall")
    for step, kernel in compiled:
        print(f"  compiled in step {step}: {kernel[:300]}")


if __name__ == "__main__":
    sys.exit(main())
