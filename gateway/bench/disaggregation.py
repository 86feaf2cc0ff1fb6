"""``chassis bench disaggregation``: TTFT and ITL of prefill/decode disaggregation vs mixed serving.

The same seeded prefill-heavy load (long unique prompts, open-loop arrivals, short answers with
``ignore_eos``) goes through a real gateway twice, each time to freshly started CPU replicas of
one checkpoint: P + D mixed replicas, then P prefill and D decode replicas sharing one KV
directory (gateway/disaggregation.py). It prints TTFT and ITL p50/p99 side by side; percentiles
come from ``measurement``, the streams are timed by ``measurement.sse`` (gateway/bench/replay.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

MODES = ("mixed", "disaggregated")


def _at_least_one(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return number


def _rate(value: str) -> float:
    number = float(value)
    if not number > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return number


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--prefill", type=_at_least_one, default=1, help="prefill replicas (default: %(default)s)"
    )
    parser.add_argument(
        "--decode", type=_at_least_one, default=1, help="decode replicas (default: %(default)s)"
    )
    parser.add_argument(
        "--requests", type=_at_least_one, default=40, help="requests per mode (default: %(default)s)"
    )
    parser.add_argument("--rate", type=_rate, default=2.0, help="requests per second, open loop")
    parser.add_argument(
        "--prompt-words", type=_at_least_one, default=170, help="words per prompt (~4.7 tokens each)"
    )
    parser.add_argument("--max-tokens", type=_at_least_one, default=16, help="tokens generated per request")
    parser.add_argument("--seed", type=int, default=0, help="workload seed (default: %(default)s)")
    parser.add_argument(
        "--max-num-seqs", type=_at_least_one, default=16, help="the replicas' batch (default: 16)"
    )
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES), help="modes, in order")
    parser.add_argument("--model", default=None, help="checkpoint dir (default: a freshly made tiny model)")
    parser.add_argument("--workdir", default=None, help="where logs and configs go (default: a temp dir)")
    parser.add_argument("--json", metavar="OUT", default=None, help="also write the results as JSON to OUT")


def roles(mode: str, prefill: int, decode: int) -> tuple[str, ...]:
    if mode == "mixed":
        return ("mixed",) * (prefill + decode)
    return ("prefill",) * prefill + ("decode",) * decode


def run_mode(mode: str, args, model_dir: Path, workdir: Path, log=print):
    from gateway.bench.cluster import Cluster
    from gateway.bench.replay import replay_open_loop, scrape_prefix_cache
    from gateway.bench.routing import summarize, warm_up
    from gateway.bench.workload import WorkloadShape, build_workload

    shape = WorkloadShape(
        requests=args.requests,
        popular_share=0.0,
        group_share=0.0,
        conversation_share=0.0,  # every request a unique long prompt: prefill-heavy
        unique_words=args.prompt_words,
        rate=args.rate,
    )
    sessions = build_workload(shape, args.seed)
    cluster = Cluster(
        model_dir,
        workdir / mode,
        policy="cache_aware",
        serve_args=["--max-num-seqs", str(args.max_num_seqs), "--engine-in-thread"],
        roles=roles(mode, args.prefill, args.decode),
    )
    log(f"[{mode}] starting {args.prefill + args.decode} replicas and the gateway ...")
    with cluster.start(args.prefill + args.decode):
        warm_up(cluster, args.max_tokens)
        urls = [r.url for r in cluster.replicas]
        before = scrape_prefix_cache(urls)
        log(f"[{mode}] replaying {len(sessions)} requests at {args.rate:g}/s")
        started = time.perf_counter()
        results = asyncio.run(
            replay_open_loop(
                cluster.gateway.url, cluster.model_name, sessions, args.max_tokens, extra={"ignore_eos": True}
            )
        )
        wall = time.perf_counter() - started
        after = scrape_prefix_cache(urls)
        phases = prefill_phases(cluster.gateway.url)
    report = summarize(mode, results, before, after, wall)
    report.decisions = phases  # the prefill phases' outcomes stand in for routing decisions here
    return report


def prefill_phases(gateway_url: str) -> dict[str, int]:
    """The gateway's prefill phases by outcome (ok, busy, connect, ...); empty for mixed replicas."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    found: dict[str, int] = {}
    for family in text_string_to_metric_families(httpx.get(f"{gateway_url}/metrics", timeout=5.0).text):
        for sample in family.samples:
            if sample.name == "chassis_gateway_prefill_phases_total":
                outcome = sample.labels.get("outcome", "")
                found[outcome] = found.get(outcome, 0) + int(sample.value)
    return found


def format_table(reports) -> str:
    lines = [
        f"{'mode':<14} {'TTFT p50':>9} {'TTFT p99':>9} {'ITL p50':>8} {'ITL p99':>8} {'req/s':>6} {'failed':>6}"
        "  prefill phases"
    ]
    for r in reports:
        lines.append(
            f"{r.policy:<14} {r.ttft_p50_ms:>7.1f}ms {r.ttft_p99_ms:>7.1f}ms {r.itl_p50_ms:>6.1f}ms "
            f"{r.itl_p99_ms:>6.1f}ms {r.throughput_rps:>6.2f} {r.failed:>6}  "
            + (" ".join(f"{k}={v}" for k, v in sorted(r.decisions.items())) or "-")
        )
    return "\n".join(lines)


def run(args) -> int:
    from gateway.bench.routing import bench_model

    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="chassis-bench-pd-"))
    workdir.mkdir(parents=True, exist_ok=True)
    model_dir = Path(args.model) if args.model else bench_model(workdir)
    reports = [
        run_mode(mode, args, model_dir, workdir, log=lambda m: print(m, file=sys.stderr, flush=True))
        for mode in args.modes
    ]
    print(format_table(reports))
    print(f"(logs and configs in {workdir})")
    if args.json:
        data = {"command": " ".join(sys.argv), "args": vars(args), "modes": [asdict(r) for r in reports]}
        Path(args.json).write_text(json.dumps(data, indent=2, default=str))
    return 1 if any(r.failed for r in reports) else 0
