"""Decode speed on a CPU with ``cpu_weight_layout`` auto against row-major, in one process, rounds
alternating so that a shared machine's load falls on both alike (engine/layers/cpu_weight_layout.py).

    python3 scripts/cpu_weight_layout_ab.py [--model GGUF_OR_DIR | --random-arch smollm2-135m] [--rounds 3]

Prints output tokens/s per round and layout at batch 1 and 16 (prompt 32, 64 tokens out, greedy),
and the median ratio auto / row-major.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="a checkpoint directory or GGUF file")
    source.add_argument("--random-arch", help="a shape of engine/bench/random_arch.py, random weights")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16])
    args = parser.parse_args()

    from engine import LLM, SamplingParams
    from engine.bench.interleaved import alternate, median_ratio
    from engine.bench.random_arch import write_config_dir
    from engine.bench.workloads import random_prompts

    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or str(write_config_dir(args.random_arch, Path(tmp) / args.random_arch))
        dummy = "dummy" if args.random_arch else "auto"
        engines = {
            layout: LLM(model, device="cpu", dtype="float32", load_format=dummy, cpu_weight_layout=layout)
            for layout in ("auto", "row-major")
        }
        params = SamplingParams(max_tokens=64, ignore_eos=True, temperature=0.0)

        def timed(llm, prompts) -> float:
            start = time.perf_counter()
            llm.generate(prompts, params)
            return 64 * len(prompts) / (time.perf_counter() - start)

        for size in args.batch_sizes:
            prompts = random_prompts(size, 32, 32, 1000, seed=size)
            for llm in engines.values():
                llm.generate(prompts, SamplingParams(max_tokens=4, ignore_eos=True, temperature=0.0))
            runs = {layout: lambda _, llm=llm, p=prompts: timed(llm, p) for layout, llm in engines.items()}
            rates: dict[str, list[float]] = {layout: [] for layout in engines}
            for round_, rate in enumerate(alternate(runs, args.rounds)):
                for layout, value in rate.items():
                    rates[layout].append(value)
                    print(f"batch {size} round {round_ + 1} {layout}: {value:.2f} out tok/s", flush=True)
            ratios = [a / r for a, r in zip(rates["auto"], rates["row-major"], strict=True)]
            ratio = median_ratio(rates["auto"], rates["row-major"])
            print(f"batch {size}: auto / row-major median {ratio:.3f} (rounds {ratios})")
        for llm in engines.values():
            llm.shutdown()


if __name__ == "__main__":
    main()
