"""Sliding-window KV groups on the GPU (issue 20 item 4): with CUDA graphs and async scheduling on,
a model of interleaved local and global layers gives the same greedy tokens with its windowed layers
keeping only their windows (bounded replay after prefix hits, full replay, and a small pool that
preempts) as with whole contexts and no cache. Exit 1 on any difference.

  python3 scripts/gpu/check_swa_kv.py --device cuda
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path


def _graph_steps(llm) -> int:
    graphs = llm.engine.runner.graphs
    return graphs.steps_run if graphs is not None else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=12)
    args = parser.parse_args()

    from engine import LLM, SamplingParams
    from engine.bench.random_arch import hf_config, write_id_tokenizer

    config = hf_config("tiny-qwen3-swa")
    config.update(sliding_window=args.window, torch_dtype=args.dtype)
    rng = random.Random(3)
    shared = [rng.randrange(3, config["vocab_size"]) for _ in range(700)]
    prompts = [shared[: rng.randrange(300, 700)] + [rng.randrange(3, 2000) for _ in range(rng.randrange(1, 90))]
               for _ in range(args.prompts)]  # fmt: skip
    params = SamplingParams(max_tokens=48, temperature=0.0, ignore_eos=True)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp)
        (model / "config.json").write_text(json.dumps(config))
        write_id_tokenizer(model, config["vocab_size"], config["eos_token_id"])
        # Engines one after another in one process: pools of a set size, not a share of what is free.
        common = dict(device=args.device, dtype=args.dtype, load_format="dummy", seed=1, max_model_len=1024)
        whole = LLM(
            model,
            sliding_window_kv="full-context",
            enable_prefix_caching=False,
            num_gpu_blocks=4096,
            **common,
        )
        reference = [o.token_ids for o in whole.generate(prompts, params)]
        whole.shutdown()
        del whole
        exact = (config["layer_types"].count("sliding_attention") - 1) * (args.window - 1)
        cases = {  # a margin covering the windowed layers' reach: the replay is exact
            "bounded-replay": dict(
                sliding_window_kv="bounded-replay", swa_replay_margin=exact, num_gpu_blocks=4096
            ),
            "full-replay": dict(sliding_window_kv="full-replay", num_gpu_blocks=4096),
            "bounded-replay, small pool": dict(
                sliding_window_kv="bounded-replay",
                swa_replay_margin=exact,
                num_gpu_blocks=80,
                max_num_batched_tokens=256,
            ),
        }
        for name, kwargs in cases.items():
            llm = LLM(model, **common, **kwargs)
            for round_ in ("first", "second (hits)"):
                got = [o.token_ids for o in llm.generate(prompts, params)]
                same = sum(a == b for a, b in zip(got, reference, strict=True))
                stats = llm.stats()
                print(f"{name:>28}, {round_}: {same}/{len(prompts)} identical to whole contexts; "
                      f"preemptions {stats.num_preemptions}, prefix hits {llm.engine.kv.prefix_cache_hits} "
                      f"tokens, graph steps {_graph_steps(llm)}", flush=True)  # fmt: skip
                failures += same != len(prompts)
            llm.shutdown()
            del llm
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
