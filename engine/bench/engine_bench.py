"""``chassis bench engine``: our engine's workloads, the transformers baseline and the physical floors
measured in one process, printed as a table and written as JSON."""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import sys
import tempfile
from pathlib import Path

from engine.config_cli import add_engine_arguments
from engine.core.gc_heap import startup_heap_frozen

WORKLOADS = ("decode-bs1", "prefill", "offline", "batch128", "static-batch", "serve")
# Sized for throughput workloads on one large GPU, not for a replica's defaults.
BENCH_ENGINE_DEFAULTS = {"gpu_memory_utilization": 0.85, "max_num_seqs": 256, "max_num_batched_tokens": 8192}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="checkpoint directory")
    source.add_argument("--random-arch", help="real architecture with random weights, e.g. llama-3.1-8b")
    parser.add_argument("--device", default="cuda", help="cuda | cpu | npu (default: %(default)s)")
    parser.add_argument(
        "--dtype", default="bfloat16", help="weights' and activations' dtype (default: %(default)s)"
    )
    parser.add_argument(
        "--hf-dtype",
        help="with --compare hf: transformers' dtype (default: --dtype); a GGUF file is dequantized "
        "to it, as transformers always loads one",
    )
    parser.add_argument(
        "--workload", action="append", choices=WORKLOADS + ("all",), help="repeatable; default: all"
    )
    parser.add_argument(
        "--compare", choices=("hf",), help="also run Hugging Face transformers eager generate"
    )
    parser.add_argument(
        "--offline-requests",
        type=int,
        default=2000,
        help="requests of the offline workload (default: %(default)s)",
    )
    parser.add_argument(
        "--prefill-lengths",
        type=_batch_sizes,
        default=(2048, 8192),
        help="prefill: comma-separated prompt lengths, for the engine and transformers (default: 2048,8192)",
    )
    parser.add_argument(
        "--hf-batch128",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="with --compare hf and batch128/offline: also time transformers at batch 128 (default: on)",
    )
    parser.add_argument(
        "--static-batch-sizes",
        type=_batch_sizes,
        default=(1, 16),
        help="static-batch: comma-separated batch sizes, each a batch of equal prompts generated at "
        "once, end to end (prefill included), as transformers' generate does (default: 1,16)",
    )
    parser.add_argument(
        "--static-prompt-len",
        type=int,
        default=128,
        help="static-batch: prompt tokens (default: %(default)s)",
    )
    parser.add_argument(
        "--static-output-len", type=int, default=64, help="static-batch: output tokens (default: %(default)s)"
    )
    parser.add_argument(
        "--serve-clients",
        type=int,
        default=64,
        help="serve: concurrent streaming clients (default: %(default)s)",
    )
    parser.add_argument(
        "--serve-requests", type=int, default=256, help="serve: requests in all (default: %(default)s)"
    )
    parser.add_argument(
        "--serve-length-scale",
        type=float,
        default=1.0,
        help="serve: multiply the offline prompt/output length ranges by this (default: %(default)s)",
    )
    add_engine_arguments(
        parser,
        model_dir=False,
        only=(
            "gpu_memory_utilization",
            "max_num_seqs",
            "max_num_batched_tokens",
            "admission_batch",
            "tensor_parallel_size",
            "gguf_weights",
            "shared_experts",
            "launch_overlap",
            "moe_graphs",
            "mla_split_floor",
        ),
        default_overrides=BENCH_ENGINE_DEFAULTS,
    )
    parser.add_argument(
        "--async-scheduling",
        choices=("auto", "on", "off", "ab"),
        default="auto",
        help="overlap scheduling of step N+1 with step N on the device (auto: on for CUDA); "
        "ab: run each workload off (figures suffixed _sync) then on, in the same process",
    )
    parser.add_argument(
        "--profile-host",
        action="store_true",
        help="run each in-process workload under cProfile and print where the host's time went",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="static-batch with --compare hf: both engines loaded at once, this many alternating rounds "
        "per batch size; figures are the medians (engine/bench/interleaved.py) (default: %(default)s)",
    )
    parser.add_argument("--json", type=Path, help="write every figure here")


def _batch_sizes(text: str) -> tuple[int, ...]:
    """Comma-separated positive integers (batch sizes, prompt lengths)."""
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"batch sizes must be >= 1, got {text!r}")
    return sizes


def _cpu_description() -> str:
    """The CPU model, its logical cores and torch's thread count, as this run saw them."""
    import os

    import torch

    model = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} logical cores, torch threads {torch.get_num_threads()}"


def _say(message: str) -> None:
    print(f"[bench] {message}", flush=True)


def _model_dir(args, tmp: Path) -> tuple[Path, dict]:
    from engine.bench.random_arch import hf_config, write_config_dir
    from engine.checkpoint.gguf_file import require_checkpoint
    from engine.checkpoint.gguf_metadata import gguf_configs

    if args.random_arch:
        return write_config_dir(args.random_arch, tmp / args.random_arch), hf_config(args.random_arch)
    model_dir = Path(args.model)
    gguf = require_checkpoint(model_dir)
    if gguf is not None:
        return gguf, gguf_configs(gguf)[0]
    return model_dir, json.loads((model_dir / "config.json").read_text())


def _build_hf(model_dir: Path, config: dict, args):
    from engine.bench.hf_baseline import build_hf_model, load_hf_model

    if args.random_arch:
        _say("transformers: building the model with random weights")
        return build_hf_model(config, args.device, args.hf_dtype)
    _say(f"transformers: loading {model_dir} as {args.hf_dtype}")
    return load_hf_model(model_dir, args.device, args.hf_dtype)


def _hf_figures(model_dir: Path, config: dict, args, ceilings, active_params: int) -> dict:
    import torch

    from engine.bench.hf_baseline import time_generate, time_prefill

    model = _build_hf(model_dir, config, args)
    implementations = {
        k: getattr(model.config, k, None) for k in ("_attn_implementation", "_experts_implementation")
    }
    _say(f"transformers: {type(model).__name__}, {implementations}")
    figures = {}
    workloads = set(args.workload)
    if "decode-bs1" in workloads:
        _say("transformers: batch 1, prompt 1024, 256 output tokens")
        result = time_generate(model, 1, 1024, 256, args.device)
        figures["hf_decode_bs1_tokens_per_s"] = result.output_tokens_per_s
    if "prefill" in workloads:
        for length in args.prefill_lengths:
            _say(f"transformers: prefill {length}")
            seconds = time_prefill(model, length, args.device)
            figures[f"hf_prefill_{length}_tokens_per_s"] = length / seconds
            if ceilings:
                figures[f"hf_prefill_{length}_mfu"] = (
                    2 * active_params * length / seconds / ceilings.matmul_flops_per_s
                )
    if args.hf_batch128 and ("batch128" in workloads or "offline" in workloads):
        _say("transformers: batch 128, prompt 512, 128 output tokens")
        figures["hf_batch128_output_tokens_per_s"] = time_generate(
            model, 128, 512, 128, args.device
        ).output_tokens_per_s
    if "static-batch" in workloads:
        for size in args.static_batch_sizes:
            _say(
                f"transformers: batch {size}, prompt {args.static_prompt_len}, {args.static_output_len} output tokens"
            )
            result = time_generate(model, size, args.static_prompt_len, args.static_output_len, args.device)
            figures[f"hf_static_bs{size}_output_tokens_per_s"] = result.output_tokens_per_s
    del model
    gc.collect()
    if args.device.startswith("cuda"):
        torch.cuda.empty_cache()
    return figures


def _run_workload(name: str, llm, config: dict, args, active_params: int, floor_inputs):
    from engine.bench import workloads as wl

    vocab = config["vocab_size"]
    ceilings = floor_inputs.ceilings if floor_inputs else None
    if name == "decode-bs1":
        return wl.decode_bs1(llm, vocab)
    if name == "prefill":
        return wl.prefill(
            llm,
            vocab,
            lengths=args.prefill_lengths,
            num_params=active_params,
            matmul_flops_per_s=ceilings.matmul_flops_per_s if ceilings else None,
        )
    if name == "offline":
        return wl.offline(llm, vocab, num_requests=args.offline_requests, floor_inputs=floor_inputs)
    if name == "static-batch":
        figures = {}
        for size in args.static_batch_sizes:
            result = wl.static_batch(
                llm, vocab, size, args.static_prompt_len, args.static_output_len, floor_inputs=floor_inputs
            )
            figures.update({f"bs{size}_{k}": v for k, v in result.figures.items()})
        return wl.WorkloadResult("static-batch", figures, result.notes)
    if name == "serve-reference":
        from engine.bench.serve_workload import serve_work
        from engine.bench.step_time import serve_reference

        options = _serve_options(args)
        return serve_reference(llm, serve_work(options, vocab), options.clients)
    return wl.static_batch(llm, vocab, floor_inputs=floor_inputs)


def _profiled(enabled: bool, fn, *args):
    """``fn(*args)``, under cProfile when enabled: the host functions by own time go to stdout."""
    if not enabled:
        return fn(*args)
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    try:
        return profiler.runcall(fn, *args)
    finally:
        buf = io.StringIO()
        pstats.Stats(profiler, stream=buf).sort_stats("tottime").print_stats(15)
        print(buf.getvalue(), flush=True)


def _build_engine(model_dir: Path, args, counts):
    from engine import LLM

    _say(
        f"engine: loading {args.random_arch or args.model} ({counts.total / 1e9:.2f} B parameters, "
        f"{counts.active / 1e9:.2f} B active)"
    )
    llm = LLM(
        str(model_dir),
        device=args.device,
        dtype=args.dtype,
        load_format="dummy" if args.random_arch else "auto",
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        admission_batch=args.admission_batch,
        gguf_weights=args.gguf_weights,
        shared_experts=args.shared_experts,
        launch_overlap=args.launch_overlap,
        moe_graphs=args.moe_graphs,
        mla_split_floor=args.mla_split_floor,
        gpu_memory_utilization=args.gpu_memory_utilization,
        tensor_parallel_size=args.tensor_parallel_size,
        async_scheduling={"auto": None, "on": True, "off": False, "ab": True}[args.async_scheduling],
    )
    graphs = getattr(llm.engine.runner, "moe_graphs", None)
    if graphs is not None:
        _say(
            f"engine: MoE block graphs: {len(graphs.layers)} layers x {len(graphs.sizes)} token counts "
            f"up to {graphs.sizes[-1]}, captured in {graphs.capture_s:.1f} s"
        )
    return llm


def _interleaved(model_dir: Path, config: dict, args, counts) -> dict:
    from engine.bench.interleaved import interleaved_static_batch

    llm = _build_engine(model_dir, args, counts)
    hf_model = _build_hf(model_dir, config, args)
    try:
        return interleaved_static_batch(
            llm,
            hf_model,
            config["vocab_size"],
            args.static_batch_sizes,
            args.static_prompt_len,
            args.static_output_len,
            args.rounds,
            args.device,
            say=_say,
        )
    finally:
        llm.shutdown()


def _run_in_process(workloads, model_dir, config, args, counts, floor_inputs, report) -> None:
    llm = _build_engine(model_dir, args, counts)
    report["async_scheduling"] = llm.engine.async_scheduling
    modes = [(False, "_sync"), (True, "")] if args.async_scheduling == "ab" else [(None, "")]
    with startup_heap_frozen():
        for name in workloads:
            for mode, suffix in modes:
                if mode is not None:
                    llm.engine.async_scheduling = mode  # safe between generate calls: none in flight
                _say(f"engine: {name}{suffix}")
                result = _profiled(
                    args.profile_host, _run_workload, name, llm, config, args, counts.active, floor_inputs
                )
                key = name.replace("-", "_")
                report["figures"].update({f"engine_{key}_{k}{suffix}": v for k, v in result.figures.items()})
                _say(
                    f"engine: {name}{suffix}: "
                    + ", ".join(f"{k}={v:,.2f}" for k, v in result.figures.items())
                )
    llm.shutdown()  # the other tensor-parallel ranks, if any
    del llm
    gc.collect()  # frees the device memory before a serve workload starts its own engine
    if args.device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


_RATIOS = {
    "ratio_decode_bs1_vs_hf": ("engine_decode_bs1_decode_tokens_per_s", "hf_decode_bs1_tokens_per_s"),
    "ratio_prefill_2048_vs_hf": ("engine_prefill_prefill_2048_tokens_per_s", "hf_prefill_2048_tokens_per_s"),
    "ratio_prefill_8192_vs_hf": ("engine_prefill_prefill_8192_tokens_per_s", "hf_prefill_8192_tokens_per_s"),
    "ratio_batch128_vs_hf": ("engine_batch128_output_tokens_per_s", "hf_batch128_output_tokens_per_s"),
}


def _add_ratios(figures: dict, static_batch_sizes=()) -> None:
    """Engine over transformers for every workload both ran in this process; a static batch also
    over transformers at batch 1 (what batching buys against one stream of transformers)."""
    ratios = dict(_RATIOS)
    for size in static_batch_sizes:
        ours = f"engine_static_batch_bs{size}_output_tokens_per_s"
        ratios[f"ratio_static_bs{size}_vs_hf"] = (ours, f"hf_static_bs{size}_output_tokens_per_s")
        ratios[f"ratio_static_bs{size}_vs_hf_bs1"] = (ours, "hf_static_bs1_output_tokens_per_s")
    for name, (ours, theirs) in ratios.items():
        if ours in figures and figures.get(theirs):
            figures[name] = figures[ours] / figures[theirs]


def _floor_figures(floor_inputs, active_params: int, prefill_lengths) -> dict:
    """The ceilings measured in this process and the model's floors on them (engine/bench/floors.py)."""
    from engine.bench.floors import active_weight_bytes, decode_floor_ms, prefill_floor_ms

    ceilings = floor_inputs.ceilings
    floor_ms = decode_floor_ms(active_weight_bytes(floor_inputs.cfg, floor_inputs.dtype), ceilings)
    figures = {
        "copy_TB_per_s": ceilings.copy_bytes_per_s / 1e12,
        "matmul_TFLOP_per_s": ceilings.matmul_flops_per_s / 1e12,
        "floor_decode_bs1_ms_per_token": floor_ms,
        "floor_decode_bs1_tokens_per_s": 1e3 / floor_ms,
    }
    for length in prefill_lengths:
        figures[f"floor_prefill_{length}_tokens_per_s"] = (
            length / prefill_floor_ms(active_params, length, ceilings) * 1e3
        )
    return figures


def _add_floor_fractions(figures: dict, prefill_lengths) -> None:
    """Engine over its floor for bs=1 decode and each prefill length, where both were measured."""
    pairs = {
        "fraction_decode_bs1_of_floor": (
            "engine_decode_bs1_decode_tokens_per_s",
            "floor_decode_bs1_tokens_per_s",
        )
    }
    for length in prefill_lengths:
        pairs[f"fraction_prefill_{length}_of_floor"] = (
            f"engine_prefill_prefill_{length}_tokens_per_s",
            f"floor_prefill_{length}_tokens_per_s",
        )
    for name, (ours, floor) in pairs.items():
        if ours in figures and figures.get(floor):
            figures[name] = figures[ours] / figures[floor]


def _serve_options(args):
    from engine.bench.serve_workload import ServeOptions

    scale = args.serve_length_scale
    return ServeOptions(
        clients=args.serve_clients,
        requests=args.serve_requests,
        prompt_len=(max(1, round(128 * scale)), max(1, round(1024 * scale))),
        output_len=(max(1, round(128 * scale)), max(1, round(512 * scale))),
        device=args.device,
        dtype=args.dtype,
        load_format="dummy" if args.random_arch else "auto",
        # The in-process engine's step budget, so the step times of the other workloads compare.
        extra_args=[
            "--max-num-batched-tokens",
            str(args.max_num_batched_tokens),
            "--admission-batch",
            str(args.admission_batch),
            "--tp",
            str(args.tensor_parallel_size),
            "--shared-experts",
            args.shared_experts,
            "--launch-overlap",
            args.launch_overlap,
            "--moe-graphs",
            args.moe_graphs,
            "--mla-split-floor",
            str(args.mla_split_floor),
        ],
    )


def _serve_figures(model_dir: Path, config: dict, args) -> dict:
    from engine.bench.serve_workload import serve

    _say("engine: serve")
    result = serve(model_dir, config["vocab_size"], _serve_options(args), say=_say)
    _say("engine: serve: " + ", ".join(f"{k}={v:,.2f}" for k, v in result.figures.items()))
    return {f"engine_serve_{k}": v for k, v in result.figures.items()}


def run(args: argparse.Namespace) -> int:
    from engine.bench.floors import FloorInputs, measure_ceilings
    from engine.checkpoint.model_config import parse_model_config
    from engine.checkpoint.model_facts import kv_bytes_per_token, parameter_counts

    args.hf_dtype = args.hf_dtype or args.dtype
    args.workload = list(WORKLOADS) if not args.workload or "all" in args.workload else args.workload
    if "serve" in args.workload and (
        args.serve_clients < 1 or args.serve_requests < 1 or args.serve_length_scale <= 0
    ):
        print("chassis bench engine: --serve-clients/--serve-requests must be >= 1, --serve-length-scale > 0")
        return 2
    if args.rounds < 1 or (args.rounds > 1 and (args.compare != "hf" or args.workload != ["static-batch"])):
        print(
            "chassis bench engine: --rounds is >= 1; above 1 it needs --compare hf and --workload static-batch alone"
        )
        return 2
    report: dict = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        "device": args.device,
        "dtype": args.dtype,
        "tensor_parallel_size": args.tensor_parallel_size,
        "max_num_seqs": args.max_num_seqs,
        "max_num_batched_tokens": args.max_num_batched_tokens,
        "admission_batch": args.admission_batch,
        "gguf_weights": args.gguf_weights,
        "shared_experts": args.shared_experts,
        "launch_overlap": args.launch_overlap,
        "moe_graphs": args.moe_graphs,
        "mla_split_floor": args.mla_split_floor,
        "hf_dtype": args.hf_dtype,
        "figures": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        model_dir, config = _model_dir(args, Path(tmp))
        cfg = parse_model_config(config)
        counts = parameter_counts(cfg)
        report["model"] = {
            "name": args.random_arch or str(args.model),
            "total_parameters": counts.total,
            "active_parameters": counts.active,
            "kv_bytes_per_token": kv_bytes_per_token(cfg, args.dtype),
        }
        floor_inputs = None
        if args.device == "cpu":
            report["hardware"] = _cpu_description()
            _say(f"hardware: {report['hardware']}")
        if args.device.startswith("cuda"):
            import torch

            report["hardware"] = torch.cuda.get_device_name()
            _say("measuring copy bandwidth and bf16 matmul rate")
            floor_inputs = FloorInputs(cfg, measure_ceilings(args.device), args.dtype, args.max_num_seqs)
            report["figures"].update(_floor_figures(floor_inputs, counts.active, args.prefill_lengths))
        interleaved = args.rounds > 1
        if interleaved:
            report["figures"].update(_interleaved(model_dir, config, args, counts))
            _add_ratios(report["figures"], args.static_batch_sizes)
        in_process = [name for name in args.workload if name != "serve" and not interleaved]
        if "serve" in args.workload:
            in_process.append("serve-reference")  # the engine's own step time under the same load
        if in_process:
            _run_in_process(in_process, model_dir, config, args, counts, floor_inputs, report)
            _write_json(report, args.json)  # kept if a later part is cut short (a time limit)
        # After our engine has freed the device: whatever transformers leaves behind (allocator
        # state, compiled kernels, host threads) cannot slow the engine's figures.
        if args.compare == "hf" and not interleaved:
            ceilings = floor_inputs.ceilings if floor_inputs else None
            report["figures"].update(_hf_figures(model_dir, config, args, ceilings, counts.active))
            _add_ratios(report["figures"], args.static_batch_sizes if "static-batch" in args.workload else ())
        _add_floor_fractions(report["figures"], args.prefill_lengths)
        if "serve" in args.workload:
            figures = report["figures"]
            figures.update(_serve_figures(model_dir, config, args))
            step = figures.get("engine_serve_reference_step_p50_ms")
            if step:
                figures["serve_itl_p50_over_engine_step_p50"] = figures["engine_serve_itl_p50_ms"] / step

    print()
    print(f"{'figure':<48} {'value':>14}")
    for key, value in report["figures"].items():
        print(f"{key:<48} {value:>14,.3f}")
    if args.json:
        _write_json(report, args.json)
        _say(f"wrote {args.json}")
    return 0


def _write_json(report: dict, path: Path | None) -> None:
    if path:
        path.write_text(json.dumps(report, indent=2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="chassis bench engine", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
