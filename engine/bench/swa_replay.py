"""``chassis bench swa-replay``: what sliding-window layers cost a long context under each
``sliding_window_kv`` mode: the prompt tokens a prefix-cache hit recomputes, the KV blocks the
windowed layers hold, and the hit's time to first token.

One model with random weights (half its layers local, a 4,096-token window by default) and, per
mode, one engine: a long prompt decoded for a few tokens (its blocks held per step are recorded),
then the same prompt with a follow-up turn appended, served with ``max_tokens`` 1 (a prefix hit on
the first). ``full-context`` keeps every layer's whole context (exact hits, the most KV);
``full-replay`` keeps only windows and recomputes the whole prompt for the windowed layers on a hit;
``bounded-replay`` keeps only windows and recomputes window + ``swa_replay_margin`` tokens. Goals
(issue 20): the hit's recompute falls by >= 2x from full-replay to bounded-replay, and while decoding
the windowed layers hold at most their window and one block.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

MODES = ("full-context", "full-replay", "bounded-replay")
RECOMPUTE_GOAL = 2.0  # full-replay's recomputed tokens over bounded-replay's


@dataclass
class ModeResult:
    mode: str
    hit_prompt_tokens: int
    hit_recomputed_tokens: int  # prompt tokens of the follow-up request computed again
    hit_ttft_s: float
    window_blocks_decode_max: int  # blocks a windowed layer held per decode step, at most
    window_blocks_prefill_max: int
    main_blocks_decode_max: int  # blocks a full-attention layer held per decode step, at most
    kv_bytes_decode_max: int  # the request's KV over all layers while decoding, at most


@dataclass
class Report:
    arch: str
    device: str
    prompt_tokens: int
    window: int
    block_size: int
    replay_margin: int
    windowed_layers: int
    layers: int
    modes: list[ModeResult] = field(default_factory=list)
    recompute_ratio: float | None = None  # full-replay / bounded-replay
    window_bound_blocks: int | None = None  # window + one block, in blocks
    passed: bool | None = None
    seconds: float = 0.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--random-arch",
        default="tiny-qwen3-swa",
        help="model shape with random weights (engine/bench/random_arch.py); qwen3-8b-swa on a GPU",
    )
    parser.add_argument("--device", default="cpu", help="where the engines run (cpu, cuda)")
    parser.add_argument("--dtype", default="auto", help="weights and activations; auto: the shape's")
    parser.add_argument("--prompt-tokens", type=int, default=16_384, help="length of the long prompt")
    parser.add_argument(
        "--window", type=int, default=4096, help="the local layers' window (overrides the shape's)"
    )
    parser.add_argument("--follow-up-tokens", type=int, default=64, help="tokens the second request appends")
    parser.add_argument("--decode-tokens", type=int, default=16, help="tokens decoded after the long prompt")
    parser.add_argument("--block-size", type=int, default=16, help="tokens per KV block")
    parser.add_argument(
        "--max-num-batched-tokens", type=int, default=2048, help="token budget of a step (chunk)"
    )
    parser.add_argument(
        "--swa-replay-margin", type=int, default=140, help="bounded replay's margin before the window"
    )
    parser.add_argument(
        "--gpu-memory-utilization", type=float, default=0.9, help="share of the GPU each engine may fill"
    )
    parser.add_argument(
        "--modes", nargs="+", default=list(MODES), choices=MODES, help="sliding_window_kv modes to measure"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the prompts and the random weights")
    parser.add_argument("--json", help="write the report here")


def _say(message: str) -> None:
    print(f"[swa-replay] {message}", file=sys.stderr, flush=True)


def run_bench(args: argparse.Namespace) -> Report:
    import torch

    from engine import LLM, SamplingParams
    from engine.bench.random_arch import hf_config, write_id_tokenizer

    started = time.perf_counter()
    config = hf_config(args.random_arch)
    config["sliding_window"] = args.window
    windowed = sum(t == "sliding_attention" for t in config.get("layer_types", []))
    if not windowed:
        raise ValueError(f"{args.random_arch} has no sliding-window layers")
    gen = torch.Generator().manual_seed(args.seed)
    high = config["vocab_size"]
    prompt = torch.randint(3, high, (args.prompt_tokens,), generator=gen).tolist()
    follow_up = prompt + torch.randint(3, high, (args.follow_up_tokens,), generator=gen).tolist()
    report = Report(
        args.random_arch,
        args.device,
        args.prompt_tokens,
        args.window,
        args.block_size,
        args.swa_replay_margin,
        windowed,
        config["num_hidden_layers"],
    )
    with tempfile.TemporaryDirectory(prefix="chassis-swa-replay-") as tmp:
        model = Path(tmp) / "model"
        model.mkdir()
        (model / "config.json").write_text(json.dumps(config))
        write_id_tokenizer(model, high, config["eos_token_id"])
        for mode in args.modes:
            _say(f"{mode}: loading")
            llm = LLM(
                str(model),
                device=args.device,
                dtype=args.dtype,
                load_format="dummy",
                seed=args.seed,
                max_model_len=len(follow_up) + args.decode_tokens,
                max_num_seqs=1,
                max_num_batched_tokens=args.max_num_batched_tokens,
                block_size=args.block_size,
                gpu_memory_utilization=args.gpu_memory_utilization,
                sliding_window_kv=mode,
                swa_replay_margin=args.swa_replay_margin,
                warm_up=False,
            )
            report.modes.append(_measure(llm, mode, prompt, follow_up, args, SamplingParams))
            llm.shutdown()
            del llm
            gc.collect()  # the engine's cycles hold its weights and KV pool until collected
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
    _judge(report)
    report.seconds = time.perf_counter() - started
    return report


def _measure(llm, mode: str, prompt: list[int], follow_up: list[int], args, SamplingParams) -> ModeResult:
    kv = llm.engine.kv
    layout = kv.layout
    specs = llm.engine.runner.kv_cache_specs()
    window_specs = [specs[i] for i in layout.window_layers] if layout.has_window_group else []
    main_specs = [specs[i] for i in layout.main_layers]
    per_step: list[tuple[int, int, int]] = []  # (new tokens, main blocks, window blocks) per step
    allocate = kv.allocate_slots

    def recording(request, num_computed_tokens, num_new_tokens, prefix_hit=None):
        ok = allocate(request, num_computed_tokens, num_new_tokens, prefix_hit)
        if ok:
            rid = request.request_id
            main = len(kv.block_ids(rid)) if not layout.all_windowed else 0
            window = kv.window.num_held(rid) if kv.window is not None else main
            per_step.append((num_new_tokens, main, window))
        return ok

    kv.allocate_slots = recording
    _say(f"{mode}: a {len(prompt)}-token prompt, {args.decode_tokens} tokens decoded")
    llm.generate([prompt], SamplingParams(max_tokens=args.decode_tokens, temperature=0.0, ignore_eos=True))
    decode = [step for step in per_step if step[0] == 1]
    prefill = [step for step in per_step if step[0] > 1]
    kv.allocate_slots = allocate
    _say(f"{mode}: the prompt and a {len(follow_up) - len(prompt)}-token follow-up, one token")
    begun = time.perf_counter()
    out = llm.generate([follow_up], SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True))[0]
    ttft = time.perf_counter() - begun
    block_bytes = sum(s.block_bytes for s in main_specs)
    window_bytes = sum(s.block_bytes for s in window_specs)
    kv_decode = max(m * block_bytes + w * window_bytes for _, m, w in decode) if decode else 0
    return ModeResult(
        mode=mode,
        hit_prompt_tokens=len(follow_up),
        hit_recomputed_tokens=len(follow_up) - out.num_cached_tokens,
        hit_ttft_s=ttft,
        window_blocks_decode_max=max((w for _, _, w in decode), default=0),
        window_blocks_prefill_max=max((w for _, _, w in prefill), default=0),
        main_blocks_decode_max=max((m for _, m, _ in decode), default=0),
        kv_bytes_decode_max=kv_decode,
    )


def _judge(report: Report) -> None:
    by_mode = {m.mode: m for m in report.modes}
    report.window_bound_blocks = -(-report.window // report.block_size) + 1
    bounded, full = by_mode.get("bounded-replay"), by_mode.get("full-replay")
    if bounded is None or full is None:
        return
    report.recompute_ratio = full.hit_recomputed_tokens / max(bounded.hit_recomputed_tokens, 1)
    report.passed = (
        report.recompute_ratio >= RECOMPUTE_GOAL
        and bounded.window_blocks_decode_max <= report.window_bound_blocks
    )


def format_report(report: Report) -> str:
    lines = [
        f"{report.arch} on {report.device}: {report.prompt_tokens}-token prompt, window {report.window}, "
        f"{report.windowed_layers} of {report.layers} layers local, blocks of {report.block_size}, "
        f"margin {report.replay_margin}",
        f"{'mode':<16}{'recomputed on hit':>19}{'hit TTFT s':>12}{'local blocks decode':>21}"
        f"{'local blocks prefill':>22}{'global blocks':>15}{'KV MiB decode':>15}",
    ]
    for m in report.modes:
        lines.append(
            f"{m.mode:<16}{m.hit_recomputed_tokens:>12} / {m.hit_prompt_tokens:<5}{m.hit_ttft_s:>12.3f}"
            f"{m.window_blocks_decode_max:>21}{m.window_blocks_prefill_max:>22}{m.main_blocks_decode_max:>15}"
            f"{m.kv_bytes_decode_max / (1 << 20):>15.1f}"
        )
    if report.recompute_ratio is not None:
        lines.append(
            f"recompute on a hit, full-replay / bounded-replay: {report.recompute_ratio:.2f}x (goal >= "
            f"{RECOMPUTE_GOAL:.0f}x); local blocks while decoding <= window + one block "
            f"({report.window_bound_blocks}): {'PASS' if report.passed else 'FAIL'}"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    report = run_bench(args)
    print(format_report(report))
    if args.json:
        Path(args.json).write_text(json.dumps(asdict(report), indent=2))
        _say(f"wrote {args.json}")
    return 0 if report.passed in (True, None) else 1


if __name__ == "__main__":
    _parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(_parser)
    sys.exit(run(_parser.parse_args()))
