"""Issue 20 acceptance 1: batch-invariant mode gives bitwise identical tokens and logprobs whatever the
batch, the chunk size and the prefix cache, and what the mode costs in throughput.

On the H200: a Llama-3.1-8B-shape engine with random bf16 weights (``load_format dummy``) in
batch-invariant mode (CUDA graphs, async scheduling, chunked prefill and prefix caching on) runs
``--prompts`` prompts of varied lengths (a third of them sharing one of a few prefixes), greedy and
seeded sampling (temperature, top-p, top-k) alternating, top-2 logprobs on every request, in these
configurations, each compared token for token and logprob bit for bit with the reference
``b256`` (all prompts at once, prefix cache emptied first, chunk 2048):

  alone       every prompt (or the first ``--alone``) one at a time, prefix cache emptied before each (no hits)
  b8          batches of 8, prefix cache emptied first (hits only between prompts sharing a prefix)
  b256-hits   all at once again: every full prompt block is a prefix-cache hit
  c64         all at once with chunks of 64 tokens, prefix cache emptied first
  c64-b8-hits batches of 8 with chunks of 64, prompts cached

The chunk size is the scheduler's token budget (``max_num_batched_tokens``); the script lowers it
on the built engine rather than loading the model again. Then the cost: decode tok/s at batch 1
(``engine/bench/workloads.decode_bs1``) and the offline mix (``workloads.offline``, fewer
requests) in batch-invariant mode and, on a second engine, in normal mode, side by side with the
goals (at most 25 % slower offline, 10 % at batch 1). ``--sweep`` then times the invariant GEMM at
a few other tile configs against cuBLAS at the 8B shapes (``scripts/gpu/tune_invariant_matmul.py``
times every row bucket and writes the table the engine uses). ``--time-budget`` skips the cost part
and the sweep (said so) when they would not fit. Exit status 1 when any output differs (or the mode was not on).

  python3 scripts/gpu/batch_invariance.py --device cuda --json "$OUT/batch_invariance.json"

On CPU the test (tests/scripts/gpu/test_batch_invariance.py) runs it on the tiny-llama shape with
every kernel in Triton's interpreter, so the script itself is exercised.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

REFERENCE = "b256"
CONFIGS = ("alone", "b8", REFERENCE, "b256-hits", "c64", "c64-b8-hits")
OFFLINE_GOAL = 0.75  # batch-invariant offline throughput / normal mode's, at least
BS1_GOAL = 0.90


def make_prompts(count: int, low: int, high: int, vocab: int, seed: int) -> list[list[int]]:
    """``count`` prompts of ``low..high`` tokens; every third one starts with one of ``count // 64``
    (at least one) shared prefixes of a quarter of the mean length (at least ``low``), so
    prefix-cache hits happen between prompts."""
    rng = random.Random(seed)
    prefix_len = min(max(low, (low + high) // 4), high - 1)
    prefixes = [[rng.randrange(3, vocab) for _ in range(prefix_len)] for _ in range(max(count // 64, 1))]
    prompts = []
    for i in range(count):
        length = rng.randint(low, high)
        head = prefixes[i // 3 % len(prefixes)] if i % 3 == 0 else []
        prompts.append(head + [rng.randrange(3, vocab) for _ in range(max(length - len(head), 1))])
    return prompts


def make_params(count: int, max_tokens: int):
    """Greedy and seeded sampling alternating (top-p and top-k in turn), top-2 logprobs on all."""
    from engine import SamplingParams

    params = []
    for i in range(count):
        sampled = i % 2 == 1
        params.append(
            SamplingParams(
                max_tokens=max_tokens,
                ignore_eos=True,
                logprobs=2,
                temperature=0.8 if sampled else 0.0,
                top_p=0.9 if i % 4 == 1 else 1.0,
                top_k=50 if i % 4 == 3 else 0,
                seed=1000 + i if sampled else None,
            )
        )
    return params


def fingerprint(output) -> tuple:
    """Tokens and every logprob (chosen and top) as exact float bits."""
    logprobs = tuple(
        (lp.token_id, lp.logprob.hex(), tuple((t, v.hex()) for t, v in lp.top))
        for lp in output.logprobs or ()
    )
    return tuple(output.token_ids), logprobs


def config_shape(name: str, count: int, chunk: int, big_chunk: int) -> tuple[int, int]:
    """(batch, token budget) of a configuration named by its parts: ``b<N>`` batches of N (default
    all at once), ``c<N>`` a budget of N tokens (``c64``: ``--chunk``; default the engine's), and
    ``hits`` to keep the prefix cache (else emptied first). E.g. ``b32-c4096-hits``."""
    batch, budget = count, big_chunk
    for part in name.split("-"):
        if part[:1] in ("b", "c") and part[1:].isdigit():
            value = int(part[1:])
            if part[0] == "b":
                batch = value
            else:
                budget = chunk if value == 64 else value
    return batch, budget


def run_config(llm, name: str, prompts, params, alone: int, chunk: int, big_chunk: int) -> list[tuple]:
    """The fingerprints of one configuration's outputs, in prompt order."""
    core = llm.engine
    batch, budget = config_shape(name, len(prompts), chunk, big_chunk)
    core.scheduler.max_num_batched_tokens = budget
    if not name.endswith("-hits") and not core.kv.reset_prefix_cache():
        print(f"WARNING {name}: the prefix cache could not be emptied (blocks still held)", flush=True)
    if name == "alone":
        outputs = []
        for prompt, p in zip(prompts[:alone], params[:alone], strict=True):
            core.kv.reset_prefix_cache()
            outputs += llm.generate([prompt], p)
    else:
        outputs = []
        for start in range(0, len(prompts), batch):
            outputs += llm.generate(prompts[start : start + batch], params[start : start + batch])
    core.scheduler.max_num_batched_tokens = big_chunk
    return [fingerprint(o) for o in outputs]


def first_difference(a: tuple, b: tuple) -> int:
    """The first output position where two fingerprints differ (token or any logprob)."""
    (tokens_a, logprobs_a), (tokens_b, logprobs_b) = a, b
    rows_a = list(zip(tokens_a, logprobs_a or [None] * len(tokens_a), strict=True))
    rows_b = list(zip(tokens_b, logprobs_b or [None] * len(tokens_b), strict=True))
    for i, (row_a, row_b) in enumerate(zip(rows_a, rows_b, strict=False)):
        if row_a != row_b:
            return i
    return min(len(tokens_a), len(tokens_b))


def check_invariance(llm, args, vocab: int) -> dict:
    prompts = make_prompts(args.prompts, args.min_prompt, args.max_prompt, vocab, args.seed)
    params = make_params(args.prompts, args.max_tokens)
    big_chunk = llm.engine.scheduler.max_num_batched_tokens
    # warm-up (compiles every kernel variant) on other prompts
    warm = min(8, len(params))
    llm.generate(make_prompts(warm, args.min_prompt, args.max_prompt, vocab, args.seed + 1), params[:warm])
    results, seconds = {}, {}
    configs = args.configs or CONFIGS
    for name in (REFERENCE, *[c for c in configs if c != REFERENCE]):
        start = time.perf_counter()
        results[name] = run_config(llm, name, prompts, params, args.alone, args.chunk, big_chunk)
        seconds[name] = time.perf_counter() - start
    reference = results[REFERENCE]
    report = {}
    for name in (REFERENCE, *[c for c in configs if c != REFERENCE]):
        got = results[name]
        same = sum(a == b for a, b in zip(got, reference, strict=False))
        first_diff = next((i for i, (a, b) in enumerate(zip(got, reference, strict=False)) if a != b), None)
        report[name] = {"identical": same, "outputs": len(got), "first_differing_prompt": first_diff,
                        "seconds": round(seconds[name], 2)}  # fmt: skip
        where = [
            (i, first_difference(a, b))
            for i, (a, b) in enumerate(zip(got, reference, strict=False))
            if a != b
        ]
        if where:  # where each differing output first differs: its prompt, and the position in its output
            report[name]["differences"] = [
                {"prompt": i, "position": pos, "prompt_tokens": len(prompts[i]), "sampled": i % 2 == 1}
                for i, pos in where[:64]
            ]
            at_first = sum(pos == 0 for _, pos in where)
            print(f"{name:>12}: {at_first} of {len(where)} differ at their first output token", flush=True)
        note = "" if first_diff is None else f"  first difference: prompt {first_diff}"
        print(f"{name:>12}: {same}/{len(got)} outputs bitwise identical to {REFERENCE} "
              f"(tokens and logprobs), {seconds[name]:.1f} s{note}", flush=True)  # fmt: skip
    return report


def build(model_dir: Path, args, batch_invariant: bool):
    from engine import LLM

    return LLM(
        model_dir,
        device=args.device,
        dtype=args.dtype,
        load_format="dummy",
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_model_len=args.max_model_len,
        batch_invariant=batch_invariant,
        gpu_memory_utilization=args.gpu_memory_utilization,
        kernels=args.kernels,
        enforce_eager=args.enforce_eager,
        async_scheduling=False if args.no_async_scheduling else None,
    )


def measure_cost(llm, args, vocab: int) -> dict:
    from engine.bench import workloads

    bs1 = workloads.decode_bs1(llm, vocab, prompt_len=args.bs1_prompt, output_len=args.bs1_output)
    offline = workloads.offline(llm, vocab, num_requests=args.offline_requests)
    return {
        "decode_bs1_tokens_per_s": bs1.figures["decode_tokens_per_s"],
        "decode_bs1_graph_replay_ms": bs1.figures.get("graph_replay_ms"),
        "offline_output_tokens_per_s": offline.figures["output_tokens_per_s"],
    }


# Llama-3.1-8B's products (N, K): q/k/v, o, gate/up, down, LM head.
SWEEP_SHAPES = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (128256, 4096))
SWEEP_ROWS = (1, 8, 256, 2048)


def sweep_matmul_configs() -> dict:
    """Microseconds per product of the invariant GEMM at a few tile configs against cuBLAS, at the
    8B shapes; ``default`` is what the engine runs (a verified table entry, else the reference)."""
    import torch

    from kernels.invariant_matmul import MatmulConfig, invariant_matmul
    from kernels.invariant_matmul_configs import BLOCK_M, reference_config

    candidates = {
        "default": None,
        "n64k64s4": MatmulConfig(BLOCK_M, 64, 64),
        "n64k128s3": MatmulConfig(BLOCK_M, 64, 128, num_stages=3),
        "n128k64s4": MatmulConfig(BLOCK_M, 128, 64),
        "n32k256s3": MatmulConfig(BLOCK_M, 32, 256, num_stages=3),
    }
    results: dict = {}

    def timed(fn) -> float:
        for _ in range(3):
            fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(10):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 10 * 1e3

    for n, k in SWEEP_SHAPES:
        weight = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        for rows in SWEEP_ROWS:
            x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
            line = {"cublas": timed(lambda x=x, w=weight: torch.nn.functional.linear(x, w))}
            for name, config in candidates.items():
                line[name] = timed(lambda x=x, w=weight, c=config: invariant_matmul(x, w, config=c))
            results[f"{n}x{k} M={rows}"] = line
            cells = "  ".join(f"{name} {us:8.1f}" for name, us in line.items())
            print(
                f"sweep {n:>6}x{k:<5} M={rows:<5} us: {cells}  (reference {reference_config(n, k).label()})",
                flush=True,
            )
    return results


def release_memory() -> None:
    """After an engine's shutdown and last reference: give its device memory back for the next."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--random-arch", default="llama-3.1-8b")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument(
        "--kernels", default=None, help="EngineConfig.kernels (triton: the CPU test, interpreted)"
    )
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument(
        "--alone", type=int, help="the first N prompts also run one at a time (default: every prompt)"
    )
    parser.add_argument("--min-prompt", type=int, default=16)
    parser.add_argument("--max-prompt", type=int, default=640)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--chunk", type=int, default=64, help="the small chunk size (token budget)")
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--max-model-len", type=int, default=2048)
    # two engines in turn: each takes under half, so the second fits even before the first's memory is back
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.45)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-cost", action="store_true", help="only the invariance check")
    parser.add_argument("--sweep", action="store_true", help="then time a few GEMM tile configs (CUDA)")
    parser.add_argument("--bs1-prompt", type=int, default=1024)
    parser.add_argument("--bs1-output", type=int, default=128)
    parser.add_argument("--offline-requests", type=int, default=128)
    parser.add_argument(
        "--time-budget", type=float, default=225.0, help="seconds; the cost part is skipped past it"
    )
    parser.add_argument(
        "--cost-seconds", type=float, default=90.0, help="what the cost part takes besides a build"
    )
    parser.add_argument(
        "--configs",
        nargs="+",
        help=f"configurations to compare with {REFERENCE} (default: {' '.join(CONFIGS)})",
    )
    parser.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs (a diagnosis)")
    parser.add_argument("--no-async-scheduling", action="store_true", help="a diagnosis")
    parser.add_argument(
        "--decode-block-m",
        type=int,
        help="the split decode's tile height (kernels/invariant_attention.DECODE_BLOCK_M) for this run",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    if args.alone is None:
        args.alone = args.prompts
    if args.decode_block_m:
        from kernels import invariant_attention

        invariant_attention.DECODE_BLOCK_M = args.decode_block_m

    from engine.bench.random_arch import hf_config, write_config_dir
    from engine.layers.batch_invariant import batch_invariant

    vocab = hf_config(args.random_arch)["vocab_size"]
    report: dict = {"arch": args.random_arch, "prompts": args.prompts, "alone": args.alone,
                    "max_tokens": args.max_tokens, "decode_block_m": args.decode_block_m}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = write_config_dir(args.random_arch, Path(tmp) / "model")
        llm = build(model_dir, args, batch_invariant=True)
        if not batch_invariant():
            print("FAIL: the engine did not turn batch-invariant mode on", flush=True)
            return 1
        build_seconds = time.perf_counter() - started
        print(f"engine built in {build_seconds:.1f} s", flush=True)
        report["invariance"] = check_invariance(llm, args, vocab)
        failed = any(r["identical"] != r["outputs"] for r in report["invariance"].values())
        elapsed = time.perf_counter() - started
        # the cost part: another engine build and four short workloads (about 90 s on the H200)
        if args.skip_cost or elapsed + build_seconds + args.cost_seconds > args.time_budget:
            print(f"cost: SKIPPED ({elapsed:.0f} s spent of the {args.time_budget:.0f} s budget)", flush=True)
            llm.shutdown()
        else:
            cost = {"batch_invariant": measure_cost(llm, args, vocab)}
            llm.shutdown()
            del llm
            release_memory()
            llm = build(model_dir, args, batch_invariant=False)
            cost["normal"] = measure_cost(llm, args, vocab)
            llm.shutdown()
            report["cost"] = cost
            inv, normal = cost["batch_invariant"], cost["normal"]
            for key, goal in (
                ("decode_bs1_tokens_per_s", BS1_GOAL),
                ("offline_output_tokens_per_s", OFFLINE_GOAL),
            ):
                ratio = inv[key] / normal[key]
                report[f"{key}_ratio"] = ratio
                verdict = "meets" if ratio >= goal else "MISSES"
                print(f"{key:>30}: batch-invariant {inv[key]:9.1f}  normal {normal[key]:9.1f}  ratio {ratio:.3f} "
                      f"({verdict} the goal >= {goal:.2f})", flush=True)  # fmt: skip
        if args.sweep and time.perf_counter() - started < args.time_budget - 30:
            report["sweep_us"] = sweep_matmul_configs()
        elif args.sweep:
            print("sweep: SKIPPED (budget)", flush=True)
    report["passed"] = not failed
    report["seconds"] = round(time.perf_counter() - started, 1)
    print(f"batch invariance: {'PASSED' if not failed else 'FAILED'} in {report['seconds']} s", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
