"""``chassis bench``: benchmarks, one subcommand each (the logic lives beside what it measures)."""

from __future__ import annotations

import argparse
import json
import sys

from engine.config_cli import add_engine_arguments

HELP = (
    "Run benchmarks: 'routing' (gateway policies over real replicas), 'engine' (engine workloads), "
    "'kv-capacity' (KV cache tokens per GiB), 'speculative' (speculative decoding vs none), "
    "'kv-tiers' (TTFT of a long prompt from host memory and disk vs recomputed), "
    "'structured' (grammar-constrained decoding's overhead), "
    "'disaggregation' (TTFT and ITL of prefill/decode replicas vs mixed ones), "
    "'kv-trace' (cacheable prompt tokens the KV tiers serve on a multi-tenant trace, across a restart), "
    "'ep-components' (one rank's MoE decode step parts on one device), "
    "'ep-scaling' (decode tokens/s per GPU projected over expert-parallel sizes)."
)


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return number


def _positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {value!r}") from None
    if not number > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return number


def add_routing_arguments(parser: argparse.ArgumentParser) -> None:
    from gateway.config import POLICIES  # light: no httpx/torch at parser time

    parser.add_argument(
        "--replicas", type=_positive, default=4, help="replica processes (default: %(default)s)"
    )
    parser.add_argument(
        "--requests", type=_positive, default=100, help="requests per policy (default: %(default)s)"
    )
    parser.add_argument("--seed", type=int, default=0, help="workload seed (default: %(default)s)")
    parser.add_argument(
        "--policies",
        nargs="+",
        choices=POLICIES,
        default=list(POLICIES),
        help="policies to run, in order (default: all)",
    )
    parser.add_argument(
        "--rate",
        type=_positive_float,
        default=2.5,
        help="requests per second, open loop (Poisson session arrivals; default: %(default)s)",
    )
    parser.add_argument(
        "--repeats",
        type=_positive,
        default=1,
        help="run every policy this many times, order alternating forward/reversed (default: %(default)s)",
    )
    parser.add_argument("--max-tokens", type=_positive, default=4, help="tokens generated per request")
    parser.add_argument(
        "--load-margin", type=float, default=4.0, help="cache_aware load margin (default: %(default)s)"
    )
    # The replicas' engine settings, as `chassis serve` declares them.
    add_engine_arguments(
        parser,
        model_dir=False,
        only=("max_num_seqs", "num_gpu_blocks"),
        default_overrides={"max_num_seqs": 16},
    )
    parser.add_argument("--model", default=None, help="checkpoint dir (default: a freshly made tiny model)")
    parser.add_argument("--workdir", default=None, help="where logs and configs go (default: a temp dir)")
    parser.add_argument("--json", metavar="OUT", default=None, help="also write the results as JSON to OUT")
    parser.add_argument(
        "--decision-only",
        action="store_true",
        help="only time routing decisions in-process (no replicas): --replicas (use 16), --blocks",
    )
    parser.add_argument(
        "--blocks", type=_positive, default=10_000, help="with --decision-only: cached blocks per replica"
    )


def add_kv_capacity_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="checkpoint directory")
    source.add_argument("--random-arch", help="a published config by name, e.g. deepseek-v2-lite")
    parser.add_argument("--dtype", default="bfloat16", help="KV cache dtype (default: %(default)s)")
    parser.add_argument("--tp", type=_positive, default=1, help="tensor-parallel size (default: 1)")
    parser.add_argument("--json", metavar="OUT", default=None, help="also write the figures as JSON to OUT")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    subparsers = parser.add_subparsers(dest="bench", metavar="BENCHMARK", required=True)
    routing = subparsers.add_parser(
        "routing",
        help="gateway routing policies over real CPU replicas of the tiny model",
        description="Start N replicas + a gateway per policy, replay a seeded multi-tenant workload, "
        "report prefix-cache hit rate, TTFT, throughput and each replica's share.",
    )
    add_routing_arguments(routing)
    from gateway.bench import disaggregation  # light: replicas and httpx only when it runs

    pd = subparsers.add_parser(
        "disaggregation",
        help="TTFT and ITL p99 of prefill/decode disaggregation vs mixed replicas, prefill-heavy load",
        description=disaggregation.__doc__,
    )
    disaggregation.add_arguments(pd)
    from gateway.bench import kv_trace  # light: replicas and httpx only when it runs

    trace = subparsers.add_parser(
        "kv-trace",
        help="share of a multi-tenant trace's cacheable prompt tokens the KV tiers serve, across a restart",
        description=kv_trace.__doc__,
    )
    kv_trace.add_arguments(trace)
    from engine.bench import engine_bench  # light: torch is imported only when it runs

    engine = subparsers.add_parser(
        "engine",
        help="engine workloads on one device vs transformers, with the physical floors",
        description=engine_bench.__doc__,
    )
    engine_bench.add_arguments(engine)
    capacity = subparsers.add_parser(
        "kv-capacity",
        help="tokens per GiB of KV cache: the model's layout (MLA latents) vs per-head K/V",
        description="Tokens one GiB of KV cache holds in the engine's per-layer layout and in an "
        "uncompressed per-head K/V layout, and their ratio (no weights loaded).",
    )
    add_kv_capacity_arguments(capacity)
    from engine.bench import speculative  # light: torch is imported only when it runs

    spec = subparsers.add_parser(
        "speculative",
        help="speculative decoding vs none: acceptance, mean accepted length, speedup per batch size",
        description=speculative.__doc__,
    )
    speculative.add_arguments(spec)
    from engine.bench import kv_tiers  # light: torch is imported only when it runs

    tiers = subparsers.add_parser(
        "kv-tiers",
        help="TTFT of a long prompt served from the host and disk KV tiers vs recomputed, with the "
        "pinned host-to-device and direct disk-read bandwidths",
        description=kv_tiers.__doc__,
    )
    kv_tiers.add_arguments(tiers)
    from engine.bench import swa_replay  # light: torch is imported only when it runs

    swa = subparsers.add_parser(
        "swa-replay",
        help="sliding-window layers on a long context: tokens a prefix hit recomputes and KV held, per "
        "sliding_window_kv mode",
        description=swa_replay.__doc__,
    )
    swa_replay.add_arguments(swa)
    from engine.bench import structured_overhead  # light: torch is imported only when it runs

    structured = subparsers.add_parser(
        "structured",
        help="structured decoding's cost: step time at a batch all constrained, TTFT of new and cached schemas",
        description=structured_overhead.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    structured_overhead.add_arguments(structured)
    from engine.bench import ep_components, ep_scaling  # light: torch is imported only when it runs

    components = subparsers.add_parser(
        "ep-components",
        help="one rank's decode step parts of a DeepSeek-class MoE model under expert parallelism, timed",
        description=ep_components.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ep_components.add_arguments(components)
    scaling = subparsers.add_parser(
        "ep-scaling",
        help="decode tokens/s per GPU projected at EP sizes from ep-components' JSON and link figures",
        description=ep_scaling.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ep_scaling.add_arguments(scaling)


def _write_json(path: str, data: dict) -> None:
    with open(path, "w") as f:
        json.dump(data, f, indent=2)
    print(f"wrote {path}", file=sys.stderr)


def run_routing(args: argparse.Namespace) -> int:
    if args.decision_only:
        from gateway.bench.decision import format_report, report_dict, run_decision_bench

        tokenizer = None
        if args.model:
            from engine.tokenizer import Tokenizer

            tokenizer = Tokenizer(args.model)
        report = run_decision_bench(
            replicas=args.replicas, blocks=args.blocks, seed=args.seed, tokenizer=tokenizer
        )
        print(format_report(report))
        if args.json:
            _write_json(args.json, report_dict(report))
        return 0 if report.decision_cpu_p99_us < 1000 else 1
    from gateway.bench.routing import reports_json, run_routing_bench

    reports = run_routing_bench(args)
    if args.json:
        _write_json(args.json, reports_json(reports, args))
    return 1 if any(r.failed for r in reports) else 0


def run_kv_capacity(args: argparse.Namespace) -> int:
    from engine.bench.kv_capacity import format_kv_capacity, kv_capacity
    from engine.checkpoint.model_config import load_model_config, parse_model_config

    if args.random_arch:
        from engine.bench.random_arch import hf_config

        cfg, name = parse_model_config(hf_config(args.random_arch)), args.random_arch
    else:
        cfg, name = load_model_config(args.model), args.model
    capacity = kv_capacity(cfg, args.dtype, args.tp)
    print(format_kv_capacity(name, capacity))
    if args.json:
        _write_json(args.json, capacity.to_dict())
    return 0


def run(args: argparse.Namespace) -> int:
    if args.bench == "routing":
        return run_routing(args)
    if args.bench == "disaggregation":
        from gateway.bench import disaggregation

        return disaggregation.run(args)
    if args.bench == "kv-trace":
        from chassis.gateway import load_tokenizer
        from gateway.bench import kv_trace

        if args.model is None:
            from engine.testing.smollm2 import smollm2_path

            args.model = str(smollm2_path())
        return kv_trace.run(args, load_tokenizer)
    if args.bench == "kv-capacity":
        return run_kv_capacity(args)
    if args.bench == "engine":
        from engine.bench import engine_bench

        return engine_bench.run(args)
    if args.bench == "speculative":
        from engine.bench import speculative

        return speculative.run(args)
    if args.bench == "kv-tiers":
        from engine.bench import kv_tiers

        return kv_tiers.run(args)
    if args.bench in ("ep-components", "ep-scaling"):
        from engine.bench import ep_components, ep_scaling

        return (ep_components if args.bench == "ep-components" else ep_scaling).run(args)
    if args.bench == "swa-replay":
        from engine.bench import swa_replay

        return swa_replay.run(args)
    if args.bench == "structured":
        from engine.bench import structured_overhead

        return structured_overhead.run(args)
    print(f"unknown benchmark {args.bench!r}", file=sys.stderr)
    return 2
