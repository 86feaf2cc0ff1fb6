"""Where a decode step's time goes on the GPU machine: GPU replay alone vs the engine's step.

Builds the benchmark model (random Llama-3.1-8B weights), then for batch 1 and batch 128:
  * graph replay back to back (GPU time), replay + synchronize (exposed launch latency),
  * the engine's own decode steps under cProfile (host functions by self time).

    python3 scripts/gpu/profile_steps.py
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> int:
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


def _kernel_breakdown(replay, steps: int) -> str:
    """GPU time per kernel name inside the decode graph (CUPTI sees the kernels of a replay)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            replay()
        torch.cuda.synchronize()
    rows = []
    total = 0.0
    for event in prof.key_averages():
        us = event.device_time_total if hasattr(event, "device_time_total") else event.cuda_time_total
        if us <= 0:
            continue
        total += us
        rows.append((us, event.count, event.key))
    rows.sort(reverse=True)
    lines = [f"kernels in one step (of {steps} replays): {total / steps:.1f} us of GPU time"]
    lines += [f"  {us / steps:8.1f} us  {count // steps:4d}x  {key[:90]}" for us, count, key in rows[:25]]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
