"""Where a decode step's time goes on the GPU machine: GPU replay alone vs the engine's step.

Builds the benchmark model (random Llama-3.1-8B weights), then for batch 1 and batch 128:
  * graph replay back to back (GPU time), replay + synchronize (exposed launch latency),
  * the engine's own decode steps under cProfile (host functions by self time).

``--eager`` instead builds ``--arch`` (any ``engine.bench.random_arch`` name, ``--layers`` to cut it)
without CUDA graphs, so every kernel is attributed, and for each ``--case BATCH:CONTEXT`` profiles
(torch.profiler, CUDA kernels) the prefill of fresh prompts alone and the prefill plus
``--decode-steps`` decode steps: the difference divided by the steps is one decode step, kernel by
kernel; ``--prefill N`` prints the prefill of one N-token prompt the same way (issue 16).

``--host`` builds ``--arch`` as the benchmark does (CUDA graphs for decode) and, for each ``--prefill N``
and ``--case BATCH:CONTEXT``, prints where the host's time goes: the wall time, the GPU's kernel time
in the same window, Python functions by self time (cProfile) and torch ops by host self time with
their call counts; a wall far above the kernel time is host-bound work. Each run also prints the
caching allocator's counters across the timed run (retries and device allocations: cudaMalloc and
cudaFree wait for the device), how many synchronizing calls ``torch.cuda.set_sync_debug_mode`` saw,
and, from a CPU+CUDA trace, the GPU's idle time split into host-starved and device-side gaps with the
host work during the starved ones (``engine.bench.gpu_timeline``); ``--trace-dir`` keeps the traces.

    python3 scripts/gpu/profile_steps.py
    python3 scripts/gpu/profile_steps.py --eager --arch deepseek-v2-lite --case 1:576 --case 128:576 --prefill 2048
    python3 scripts/gpu/profile_steps.py --host --arch deepseek-v2-lite --prefill 2048 --case 1:1024
    python3 scripts/gpu/profile_steps.py --host --arch deepseek-v2-lite --prefill 2048 --before decode-bs1 --trace-dir /tmp/traces
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--eager", action="store_true", help="kernel breakdown per step without CUDA graphs")
    parser.add_argument("--host", action="store_true", help="host time of --prefill and --case runs")
    parser.add_argument("--arch", default="llama-3.1-8b", help="random_arch name (--eager)")
    parser.add_argument("--layers", type=int, help="keep only this many decoder layers (--eager)")
    parser.add_argument("--case", action="append", help="BATCH:CONTEXT decode cases (--eager; default 1:576)")
    parser.add_argument("--prefill", type=int, action="append", default=[], help="prompt lengths (--eager)")
    parser.add_argument("--decode-steps", type=int, default=8)
    parser.add_argument(
        "--moe-table", type=Path, help="--eager: fused-MoE tiles from this table, if it exists"
    )
    parser.add_argument("--device", default="cuda", help="--eager: cpu for a smoke run (CPU op self times)")
    parser.add_argument("--top", type=int, default=25, help="kernels listed per table")
    parser.add_argument("--trace-dir", type=Path, help="--host: keep each run's chrome trace here (gzipped)")
    parser.add_argument(
        "--before",
        choices=["decode-bs1"],
        help="--host: run this benchmark workload first (engine.bench.workloads), then the runs again",
    )
    parser.add_argument(
        "--batch-invariant",
        action="store_true",
        help="--eager: the engine in batch-invariant mode (issue 20)",
    )
    args = parser.parse_args(argv)
    if args.host:
        return host_breakdowns(args)
    if args.eager:
        return eager_breakdowns(args)
    return graph_and_host_profile()


def graph_and_host_profile() -> int:
    import torch

    from engine import LLM, SamplingParams
    from engine.bench.random_arch import write_config_dir
    from engine.bench.workloads import random_prompts

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = write_config_dir("llama-3.1-8b", Path(tmp) / "m")
        llm = LLM(
            str(model_dir), device="cuda", dtype="bfloat16", load_format="dummy",
            max_num_seqs=256, max_num_batched_tokens=8192, gpu_memory_utilization=0.85,
        )  # fmt: skip
        graphs = llm.engine.runner.graphs
        for batch, prompt_len, out_len in ((1, 1024, 128), (128, 512, 64)):
            prompts = random_prompts(batch, prompt_len, prompt_len, 128000, seed=batch)
            params = SamplingParams(max_tokens=out_len, ignore_eos=True, temperature=0.0)
            llm.generate(prompts, SamplingParams(max_tokens=4, ignore_eos=True, temperature=0.0))
            profiler = cProfile.Profile()
            torch.cuda.synchronize()
            started = time.perf_counter()
            profiler.enable()
            llm.generate([p[::-1] for p in prompts], params)
            profiler.disable()
            torch.cuda.synchronize()
            wall = time.perf_counter() - started
            size = next(s for s in graphs.sizes if s >= batch)
            graphs.packed[2, :size].fill_(-1)
            replay = graphs.replays[size]
            for _ in range(3):
                replay()
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(50):
                replay()
            torch.cuda.synchronize()
            back_to_back = (time.perf_counter() - t) / 50 * 1e3
            t = time.perf_counter()
            for _ in range(50):
                replay()
                torch.cuda.synchronize()
            synced = (time.perf_counter() - t) / 50 * 1e3
            print(
                f"batch {batch}: generate {wall:.3f}s ({out_len} tokens each, ~{wall / out_len * 1e3:.2f} ms/step "
                f"incl. prefill); graph replay back-to-back {back_to_back:.2f} ms, replay+sync {synced:.2f} ms"
            )
            buf = io.StringIO()
            pstats.Stats(profiler, stream=buf).sort_stats("tottime").print_stats(18)
            print(buf.getvalue())
            print(_kernel_breakdown(replay, steps=20))
    return 0


def eager_breakdowns(args) -> int:

    from engine import LLM, SamplingParams
    from engine.bench.random_arch import write_config_dir
    from engine.bench.workloads import random_prompts

    cases = [tuple(int(v) for v in case.split(":")) for case in (args.case or ["1:576"])]
    moe_tiles = "kernels/fused_moe_table.json or the default rule"
    if args.moe_table and args.moe_table.is_file():
        from kernels.fused_moe_configs import set_table_path

        set_table_path(args.moe_table)  # the engine runs in this process at tensor-parallel size 1
        moe_tiles = str(args.moe_table)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = write_config_dir(args.arch, Path(tmp) / "m")
        config = json.loads((model_dir / "config.json").read_text())
        layers_note = f"all {config['num_hidden_layers']} layers"
        if args.layers and args.layers < config["num_hidden_layers"]:
            layers_note = f"{args.layers} of {config['num_hidden_layers']} layers: per-layer times hold, step totals do not"
            config["num_hidden_layers"] = args.layers
            (model_dir / "config.json").write_text(json.dumps(config, indent=2))
        started = time.perf_counter()
        llm = LLM(
            str(model_dir), device=args.device, dtype="bfloat16", load_format="dummy", enforce_eager=True,
            max_num_seqs=256, max_num_batched_tokens=8192, gpu_memory_utilization=0.85,
            batch_invariant=args.batch_invariant,
        )  # fmt: skip
        print(
            f"{args.arch}: {layers_note}{', batch-invariant' if args.batch_invariant else ''}, eager (no CUDA graphs), fused-MoE tiles from {moe_tiles}; loaded in {time.perf_counter() - started:.0f} s"
        )
        vocab = config["vocab_size"]
        seeds = iter(range(1000, 10**6))  # fresh prompts for every run: no prefix-cache hits

        def profiled(batch: int, prompt_len: int, tokens: int) -> tuple[dict, float]:
            prompts = random_prompts(batch, prompt_len, prompt_len, vocab, seed=next(seeds))
            params = SamplingParams(max_tokens=tokens, ignore_eos=True, temperature=0.0)
            return _device_times(lambda: llm.generate(prompts, params), args.device)

        for batch, context in cases:
            profiled(batch, context, 2)  # compiles the kernels at these shapes
            prefill, prefill_wall = profiled(batch, context, 1)
            both, both_wall = profiled(batch, context, 1 + args.decode_steps)
            steps = args.decode_steps
            decode = {key: (us - prefill.get(key, (0.0, 0))[0], count - prefill.get(key, (0.0, 0))[1])
                      for key, (us, count) in both.items()}  # fmt: skip
            print(f"\n=== {args.arch} decode batch {batch}, context {context}: wall "
                  f"{(both_wall - prefill_wall) / steps * 1e3:.2f} ms/step eager ({steps} steps, prefill subtracted)")  # fmt: skip
            print(_format_times(decode, steps, f"kernels in one decode step (of {steps})", args.top))
        for length in args.prefill:
            profiled(1, length, 1)
            times, wall = profiled(1, length, 1)
            print(f"\n=== {args.arch} prefill of {length} tokens: wall {wall * 1e3:.1f} ms eager")
            print(_format_times(times, 1, f"kernels in the prefill of {length} tokens", args.top))
    return 0


def host_breakdowns(args) -> int:
    from engine import LLM, SamplingParams
    from engine.bench import workloads
    from engine.bench.random_arch import write_config_dir

    if args.moe_table and args.moe_table.is_file():
        from kernels.fused_moe_configs import set_table_path

        set_table_path(args.moe_table)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = write_config_dir(args.arch, Path(tmp) / "m")
        vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
        llm = LLM(
            str(model_dir), device="cuda", dtype="bfloat16", load_format="dummy",
            max_num_seqs=256, max_num_batched_tokens=8192, gpu_memory_utilization=0.85,
        )  # fmt: skip
        seeds = iter(range(1000, 10**6))
        runs = [(f"prefill of {n} tokens", 1, n, 1) for n in args.prefill]
        runs += [(f"batch {b}, prompt {c}, {args.decode_steps} tokens", b, c, args.decode_steps) for b, c in (
            tuple(int(v) for v in case.split(":")) for case in (args.case or []))]  # fmt: skip
        phases = [("", runs)]
        if args.before:
            phases.append((f" after {args.before}", runs))
        for suffix, phase_runs in phases:
            if suffix:
                print(f"\n--- {args.before}: {workloads.decode_bs1(llm, vocab).figures}")
            for title, batch, prompt_len, tokens in phase_runs:
                params = SamplingParams(max_tokens=tokens, ignore_eos=True, temperature=0.0)
                prompt_sets = iter(
                    [
                        workloads.random_prompts(batch, prompt_len, prompt_len, vocab, seed=next(seeds))
                        for _ in range(5)
                    ]
                )

                def work(params=params, prompt_sets=prompt_sets) -> None:
                    llm.generate(next(prompt_sets), params)

                _host_run(args, f"{title}{suffix}", work)
    return 0


def _host_run(args, title: str, work) -> None:
    """``work`` five times: a warm-up, timed with the allocator's counters and the sync check, under
    cProfile, under torch.profiler (CPU + CUDA, the timeline), and once more timed with Python's
    garbage collector off."""
    import gc
    import warnings

    import torch
    from torch.profiler import ProfilerActivity, profile

    from engine.bench.gpu_timeline import analyse, load_trace

    def timed() -> float:
        torch.cuda.synchronize()
        started = time.perf_counter()
        work()
        torch.cuda.synchronize()
        return time.perf_counter() - started

    work()  # compiles the kernels at these shapes
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()
    torch.cuda.set_sync_debug_mode("warn")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        wall = timed()
    torch.cuda.set_sync_debug_mode("default")
    after = torch.cuda.memory_stats()
    counters = {
        key: after.get(key, 0) - before.get(key, 0)
        for key in ("num_alloc_retries", "num_device_alloc", "num_device_free", "num_sync_all_streams")
    }
    syncs: dict[str, int] = {}
    for warning in caught:
        text = str(warning.message).splitlines()[0][:100]
        syncs[text] = syncs.get(text, 0) + 1
    profiler = cProfile.Profile()
    profiler.enable()
    work()
    torch.cuda.synchronize()
    profiler.disable()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        work()
        torch.cuda.synchronize()
    gc.disable()
    try:
        wall_no_gc = timed()
    finally:
        gc.enable()
    averages = prof.key_averages()
    print(
        f"\n=== {args.arch} {title}: wall {wall * 1e3:.1f} ms (unprofiled), {wall_no_gc * 1e3:.1f} ms with gc off"
    )
    print(f"allocator across the timed run: {counters}; synchronizing calls seen: {syncs or 'none'}")
    with tempfile.TemporaryDirectory() as scratch:
        trace_dir = args.trace_dir or Path(scratch)
        trace_dir.mkdir(parents=True, exist_ok=True)
        trace = trace_dir / (title.replace(" ", "_").replace(",", "") + ".json.gz")
        prof.export_chrome_trace(str(trace))  # gzipped, as the suffix asks
        print(analyse(load_trace(trace)).format(args.top))
    buf = io.StringIO()
    pstats.Stats(profiler, stream=buf).sort_stats("tottime").print_stats(args.top)
    print(buf.getvalue())
    ops = sorted(averages, key=lambda e: e.self_cpu_time_total, reverse=True)[: args.top]
    print("torch ops by host self time (us, calls):")
    for event in ops:
        print(f"  {event.self_cpu_time_total:10.0f} us {event.count:7d}x  {event.key[:90]}")


def _device_times(work, device: str = "cuda") -> tuple[dict[str, tuple[float, int]], float]:
    """GPU microseconds and launches per kernel name while ``work()`` runs (CUPTI sees graph replays'
    kernels too), and the wall seconds it took; on a CPU, the ops' self times instead."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    cuda = device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        sync()
        started = time.perf_counter()
        work()
        sync()
        wall = time.perf_counter() - started
    times = {}
    for event in prof.key_averages():
        if not cuda:
            us = event.self_cpu_time_total
        elif hasattr(event, "device_time_total"):
            us = event.device_time_total
        else:
            us = event.cuda_time_total
        if us > 0:
            times[event.key] = (us, event.count)
    return times, wall


def _format_times(times: dict[str, tuple[float, int]], steps: int, title: str, top: int = 25) -> str:
    rows = sorted(((us, count, key) for key, (us, count) in times.items() if us > 0), reverse=True)
    total = sum(us for us, _, _ in rows)
    lines = [f"{title}: {total / steps:.1f} us of GPU time per step"]
    lines += [
        f"  {us / steps:8.1f} us {100 * us / total:5.1f}%  {count / steps:6.1f}x  {key[:90]}"
        for us, count, key in rows[:top]
    ]
    return "\n".join(lines)


def _kernel_breakdown(replay, steps: int) -> str:
    """GPU time per kernel name inside the decode graph (CUPTI sees the kernels of a replay)."""

    def replays() -> None:
        for _ in range(steps):
            replay()

    times, _ = _device_times(replays)
    return _format_times(times, steps, f"kernels in one step (of {steps} replays)")


if __name__ == "__main__":
    sys.exit(main())
