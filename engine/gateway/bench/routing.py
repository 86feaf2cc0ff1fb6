"""``chassis bench routing``: the same seeded workload through a real gateway, once per policy.

Each policy gets freshly started replicas (cold caches), so the runs compare routing alone.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from engine.gateway.bench.cluster import Cluster
from engine.gateway.bench.replay import RequestResult, replay, scrape_prefix_cache
from engine.gateway.bench.workload import WorkloadShape, build_workload, total_requests

POLICIES = ("round_robin", "least_load", "session", "cache_aware")


@dataclass
class PolicyReport:
    policy: str
    requests: int
    failed: int
    prefix_cache_hit_rate: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    throughput_rps: float
    wall_s: float
    replica_share: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def summarize(
    policy: str, results: list[RequestResult], before: dict, after: dict, wall_s: float
) -> PolicyReport:
    hits = sum(after[u][0] - before[u][0] for u in after)
    queries = sum(after[u][1] - before[u][1] for u in after)
    ttfts = [r.ttft_s * 1000 for r in results if r.ok and r.ttft_s is not None]
    served = [r.replica for r in results if r.ok and r.replica]
    shares = {rid: served.count(rid) / len(served) for rid in sorted(set(served))} if served else {}
    return PolicyReport(
        policy=policy,
        requests=len(results),
        failed=sum(not r.ok for r in results),
        prefix_cache_hit_rate=hits / queries if queries else 0.0,
        ttft_p50_ms=statistics.median(ttfts) if ttfts else float("nan"),
        ttft_p99_ms=percentile(ttfts, 0.99),
        throughput_rps=len(results) / wall_s if wall_s else 0.0,
        wall_s=wall_s,
        replica_share=shares,
        errors=sorted({r.error for r in results if r.error})[:5],
    )


def run_policy(
    policy: str,
    model_dir: Path,
    workdir: Path,
    replicas: int,
    shape: WorkloadShape,
    seed: int,
    concurrency: int,
    max_tokens: int,
    load_margin: float,
    serve_args: list[str],
    log=print,
) -> PolicyReport:
    sessions = build_workload(shape, seed)
    total = total_requests(sessions)
    policy_config = {"name": policy, "load_margin": load_margin} if policy == "cache_aware" else policy
    cluster = Cluster(model_dir, workdir / policy, policy=policy_config, serve_args=serve_args)
    log(f"[{policy}] starting {replicas} replicas and the gateway ...")
    started = time.monotonic()
    with cluster:
        cluster.start(replicas)
        log(f"[{policy}] up in {time.monotonic() - started:.1f}s; replaying {total} requests")
        urls = [r.url for r in cluster.replicas]
        before = scrape_prefix_cache(urls)
        last = [0.0]

        def progress(done: int) -> None:
            if done == total or time.monotonic() - last[0] > 5:
                last[0] = time.monotonic()
                log(f"[{policy}] {done}/{total} requests")

        t0 = time.perf_counter()
        results = asyncio.run(
            replay(cluster.gateway.url, cluster.model_name, sessions, concurrency, max_tokens, progress)
        )
        wall = time.perf_counter() - t0
        after = scrape_prefix_cache(urls)
        # Replica ids in the gateway's header are r0..rN, in the same order as the urls.
    return summarize(policy, results, before, after, wall)


def format_table(reports: list[PolicyReport]) -> str:
    lines = [
        f"{'policy':<12} {'hit rate':>8} {'TTFT p50':>9} {'TTFT p99':>9} {'req/s':>6} {'failed':>6}  share per replica",
    ]
    for r in reports:
        share = " ".join(f"{rid}={s:.0%}" for rid, s in r.replica_share.items())
        lines.append(
            f"{r.policy:<12} {r.prefix_cache_hit_rate:>8.1%} {r.ttft_p50_ms:>7.1f}ms {r.ttft_p99_ms:>7.1f}ms "
            f"{r.throughput_rps:>6.2f} {r.failed:>6}  {share}"
        )
    return "\n".join(lines)


def run_routing_bench(args) -> list[PolicyReport]:
    from engine.tiny_model import make_tiny_model

    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="chassis-bench-routing-"))
    workdir.mkdir(parents=True, exist_ok=True)
    model_dir = (
        Path(args.model) if args.model else make_tiny_model(workdir / "tiny-model", arch="qwen3", seed=0)
    )
    shape = WorkloadShape(requests=args.requests)
    serve_args = ["--max-num-seqs", str(args.max_num_seqs)]
    if args.num_gpu_blocks:
        serve_args += ["--num-gpu-blocks", str(args.num_gpu_blocks)]
    reports = []
    for policy in args.policies:
        report = run_policy(
            policy,
            model_dir,
            workdir,
            args.replicas,
            shape,
            args.seed,
            args.concurrency,
            args.max_tokens,
            args.load_margin,
            serve_args,
            log=lambda m: print(m, file=sys.stderr, flush=True),
        )
        reports.append(report)
        print(format_table([report]).splitlines()[-1], file=sys.stderr, flush=True)
    print(format_table(reports))
    print(f"(logs and configs in {workdir})")
    return reports


def reports_json(reports: list[PolicyReport], args) -> dict:
    return {
        "command": " ".join(sys.argv),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "replicas": args.replicas,
        "requests": args.requests,
        "seed": args.seed,
        "concurrency": args.concurrency,
        "max_tokens": args.max_tokens,
        "policies": [asdict(r) for r in reports],
    }
