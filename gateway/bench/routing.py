"""``chassis bench routing``: the same seeded workload through a real gateway, once per policy.

Each policy gets freshly started replicas (cold prefix caches), warmed up the same way before
timing, and the same open-loop arrivals, so the runs compare routing alone. With ``--repeats`` the
policy order alternates (forward, then reversed) so that drifting machine load favours none.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gateway.bench.cluster import Cluster
from gateway.bench.replay import RequestResult, replay_open_loop, scrape_prefix_cache
from gateway.bench.workload import Words, WorkloadShape, build_workload, total_requests
from measurement import percentile

POLICIES = ("round_robin", "least_load", "session", "cache_aware")
# The workload's long prefixes need more context than the test model's 1,024 tokens.
BENCH_MAX_POSITIONS = 4096


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
    # Requests whose prompt was at least half served from the prefix cache: TTFT p50 falls among
    # these when they are more than half of all requests.
    mostly_cached_share: float = 0.0
    replica_share: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    # The gateway's routing decisions by reason: "load" counts cache_aware requests that left the
    # replica with the longest cached prefix because it was busier than the margin allows.
    decisions: dict[str, int] = field(default_factory=dict)
    repeat: int = 0
    # 1-minute load average of the machine before and after the run: other jobs skew TTFT.
    load_before: float = 0.0
    load_after: float = 0.0
    # Inter-token latency over every gap of every successful stream.
    itl_p50_ms: float = float("nan")
    itl_p99_ms: float = float("nan")


def summarize(
    policy: str, results: list[RequestResult], before: dict, after: dict, wall_s: float
) -> PolicyReport:
    hits = sum(after[u][0] - before[u][0] for u in after)
    queries = sum(after[u][1] - before[u][1] for u in after)
    ttfts = [r.ttft_s * 1000 for r in results if r.ok and r.ttft_s is not None]
    itls = [gap * 1000 for r in results if r.ok for gap in r.itl_s]
    served = [r.replica for r in results if r.ok and r.replica]
    shares = {rid: served.count(rid) / len(served) for rid in sorted(set(served))} if served else {}
    return PolicyReport(
        policy=policy,
        requests=len(results),
        failed=sum(not r.ok for r in results),
        prefix_cache_hit_rate=hits / queries if queries else 0.0,
        ttft_p50_ms=percentile(ttfts, 50, default=float("nan")),
        ttft_p99_ms=percentile(ttfts, 99, default=float("nan")),
        throughput_rps=len(results) / wall_s if wall_s else 0.0,
        wall_s=wall_s,
        mostly_cached_share=sum(r.ok and 2 * r.cached_tokens >= r.prompt_tokens > 0 for r in results)
        / max(1, len(results)),
        replica_share=shares,
        errors=sorted({r.error for r in results if r.error})[:5],
        itl_p50_ms=percentile(itls, 50, default=float("nan")),
        itl_p99_ms=percentile(itls, 99, default=float("nan")),
    )


def scrape_decisions(gateway_url: str) -> dict[str, int]:
    text = httpx.get(f"{gateway_url}/metrics", timeout=5.0).text
    found: dict[str, int] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "chassis_gateway_routing_decisions_total":
                reason = sample.labels.get("reason", "")
                found[reason] = found.get(reason, 0) + int(sample.value)
    return found


def warm_up(cluster: Cluster, max_tokens: int, words: int = 200) -> None:
    """The same warm-up for every replica before timing: two unrelated long prompts sent straight to
    each (first-call allocations and code paths), then one through the gateway (its tokenizer)."""
    text = Words(random.Random(987_654)).text

    async def one(client: httpx.AsyncClient, url: str, i: int) -> None:
        body = {
            "model": cluster.model_name,
            "messages": [
                {"role": "system", "content": f"Warm-up {i}: {text(words)}"},
                {"role": "user", "content": "Go."},
            ],
            "max_tokens": max_tokens,
            "temperature": 0,
        }
        (await client.post(f"{url}/v1/chat/completions", json=body)).raise_for_status()

    async def all_replicas() -> None:
        async with httpx.AsyncClient(timeout=120) as client:
            for round_ in range(2):
                urls = [r.url for r in cluster.replicas]
                await asyncio.gather(*(one(client, u, round_ * len(urls) + i) for i, u in enumerate(urls)))
            await one(client, cluster.gateway.url, -1)

    asyncio.run(all_replicas())


def start_cluster(
    policy: str,
    model_dir: Path,
    workdir: Path,
    replicas: int,
    load_margin: float,
    serve_args: list[str],
    repeat: int = 0,
) -> Cluster:
    """Fresh replicas (cold prefix caches) and a gateway routing with ``policy``, all ready."""
    policy_config = {"name": policy, "load_margin": load_margin} if policy == "cache_aware" else policy
    cluster = Cluster(model_dir, workdir / f"{policy}-{repeat}", policy=policy_config, serve_args=serve_args)
    try:
        return cluster.start(replicas)
    except BaseException:
        cluster.stop()
        raise


def run_policy(
    policy: str,
    model_dir: Path,
    workdir: Path,
    replicas: int,
    shape: WorkloadShape,
    seed: int,
    max_tokens: int,
    load_margin: float,
    serve_args: list[str],
    log=print,
    repeat: int = 0,
    cluster: Cluster | None = None,
    while_replaying: Callable[[], None] | None = None,
) -> PolicyReport:
    """``cluster``: one ``start_cluster`` made for this policy (it is stopped here), else this starts
    its own; ``while_replaying`` is called as the timed replay begins."""
    sessions = build_workload(shape, seed)
    total = total_requests(sessions)
    name = f"{policy}-{repeat}"
    started = time.monotonic()
    if cluster is None:
        log(f"[{name}] starting {replicas} replicas and the gateway ...")
        cluster = start_cluster(policy, model_dir, workdir, replicas, load_margin, serve_args, repeat)
    with cluster:
        up = time.monotonic() - started
        warm_up(cluster, max_tokens)
        log(
            f"[{name}] up in {up:.1f}s, warm in {time.monotonic() - started - up:.1f}s; replaying {total} requests "
            f"at {shape.rate:g}/s (load average {os.getloadavg()[0]:.1f})"
        )
        urls = [r.url for r in cluster.replicas]
        before = scrape_prefix_cache(urls)
        load_before = os.getloadavg()[0]
        last = [0.0]

        def progress(done: int) -> None:
            if done == total or time.monotonic() - last[0] > 5:
                last[0] = time.monotonic()
                log(f"[{name}] {done}/{total} requests")

        if while_replaying is not None:
            while_replaying()
        t0 = time.perf_counter()
        results = asyncio.run(
            replay_open_loop(cluster.gateway.url, cluster.model_name, sessions, max_tokens, progress)
        )
        wall = time.perf_counter() - t0
        after = scrape_prefix_cache(urls)
        decisions = scrape_decisions(cluster.gateway.url)
    report = summarize(policy, results, before, after, wall)
    report.decisions = decisions
    report.repeat, report.load_before, report.load_after = repeat, load_before, os.getloadavg()[0]
    return report


def run_policies_overlapped(
    policies: list[str], model_dir: Path, workdir: Path, replicas: int, **run
) -> dict[str, PolicyReport]:
    """``run_policy`` for each policy in turn, each on fresh replicas, the next policy's starting while
    the previous one replays. For tests, whose figures are hit rates and shares: the startups load
    the machine during a replay, so its TTFTs are not the bench's."""
    reports: dict[str, PolicyReport] = {}
    shared = {"load_margin": run["load_margin"], "serve_args": run["serve_args"]}
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending: list[Future[Cluster]] = []
        try:
            for i, policy in enumerate(policies):
                cluster = pending.pop().result() if pending else None
                following = policies[i + 1 : i + 2]

                def start_following(following=following) -> None:
                    for name in following:
                        pending.append(
                            pool.submit(start_cluster, name, model_dir, workdir, replicas, **shared)
                        )

                reports[policy] = run_policy(
                    policy,
                    model_dir,
                    workdir,
                    replicas,
                    cluster=cluster,
                    while_replaying=start_following,
                    **run,
                )
        finally:
            for started in pending:  # a run failed while the next policy's replicas were starting
                with contextlib.suppress(Exception):
                    started.result().stop()
    return reports


def format_table(reports: list[PolicyReport]) -> str:
    lines = [
        f"{'policy':<12} {'run':>3} {'hit rate':>8} {'cached':>6} {'TTFT p50':>9} {'TTFT p99':>9} "
        f"{'req/s':>6} {'failed':>6} {'load':>9}  share per replica",
    ]
    for r in reports:
        share = " ".join(f"{rid}={s:.0%}" for rid, s in r.replica_share.items())
        lines.append(
            f"{r.policy:<12} {r.repeat:>3} {r.prefix_cache_hit_rate:>8.1%} {r.mostly_cached_share:>6.0%} "
            f"{r.ttft_p50_ms:>7.1f}ms "
            f"{r.ttft_p99_ms:>7.1f}ms {r.throughput_rps:>6.2f} {r.failed:>6} "
            f"{r.load_before:>4.1f}-{r.load_after:<4.1f}  {share}"
        )
    return "\n".join(lines)


def policy_order(policies: list[str], repeats: int) -> list[tuple[int, str]]:
    """(repeat, policy) in run order: forward, reversed, forward, ..."""
    order = []
    for k in range(repeats):
        order += [(k, p) for p in (policies if k % 2 == 0 else list(reversed(policies)))]
    return order


def bench_model(workdir: Path) -> Path:
    from engine.testing.tiny_model import make_tiny_model

    return make_tiny_model(workdir / "tiny-model", arch="qwen3", seed=0, max_positions=BENCH_MAX_POSITIONS)


def run_routing_bench(args) -> list[PolicyReport]:
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="chassis-bench-routing-"))
    workdir.mkdir(parents=True, exist_ok=True)
    model_dir = Path(args.model) if args.model else bench_model(workdir)
    shape = WorkloadShape(requests=args.requests, rate=args.rate)
    serve_args = ["--max-num-seqs", str(args.max_num_seqs)]
    if args.num_gpu_blocks:
        serve_args += ["--num-gpu-blocks", str(args.num_gpu_blocks)]
    reports = []
    for repeat, policy in policy_order(list(args.policies), args.repeats):
        report = run_policy(
            policy,
            model_dir,
            workdir,
            args.replicas,
            shape,
            args.seed,
            args.max_tokens,
            args.load_margin,
            serve_args,
            log=lambda m: print(m, file=sys.stderr, flush=True),
            repeat=repeat,
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
        "rate": args.rate,
        "repeats": args.repeats,
        "load_average_now": os.getloadavg()[0],
        "max_tokens": args.max_tokens,
        "policies": [asdict(r) for r in reports],
    }
