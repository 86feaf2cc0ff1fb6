"""``chassis bench kv-tiers``: time to first token of a long prompt served from the host-memory and
disk KV tiers vs recomputed, with the machine's ceilings measured in the same run.

One engine (random weights with a real shape, Llama-3.1-8B by default) with a host tier and a disk
tier. First the pinned host-to-device bandwidth and the disk's uncached read bandwidth (in the disk
tier's directory), then, after a warm-up round with another prompt, one prompt three times with
``max_tokens`` 1: recomputed (in no tier); served from host memory (the device pool evicted, which
offloads the prefix to both tiers); served from disk (the device pool evicted again, the host tier
emptied, the block files' cached pages dropped). The tiers' onload counters give each onload's bytes
and time, so its bandwidth is judged against the ceiling it runs into: the host-to-device link for
host memory, the disk for disk. Goals (issue 21): each onload at >= 70 % of its ceiling, a host hit
>= 5x faster than recompute. The disk tier and the read probe go in ``--kv-disk-cache-dir``
(default: a temporary directory; point it at the disk the deployment would use).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from engine.config_cli import add_engine_arguments

MIB = 1 << 20
ONLOAD_GOAL = 0.70  # of the measured ceiling
HOST_SPEEDUP_GOAL = 5.0  # recompute TTFT over host-hit TTFT


@dataclass
class Case:
    """One serving of the prompt: recompute, host or disk."""

    name: str
    ttft_s: float
    cached_tokens: int  # prompt tokens not recomputed
    tier_hit_tokens: dict[str, int]  # per tier, tokens onloaded during this case
    onload_bytes: int = 0  # from this case's tier
    onload_s: float = 0.0
    onload_gb_per_s: float | None = None
    ceiling: str | None = None  # the bandwidth the onload is judged against
    onload_fraction: float | None = None  # of that ceiling
    speedup_vs_recompute: float | None = None
    first_token: int | None = None


@dataclass
class Report:
    arch: str
    device: str
    prompt_tokens: int
    kv_bytes_per_token: int
    disk_dir: str
    h2d_gb_per_s: float
    h2d_method: str
    disk_read_gb_per_s: float
    disk_read_method: str
    page_cache_dropped: bool  # before the disk case; False: the disk reads may have come from memory
    page_cache_note: str | None
    cases: list[Case] = field(default_factory=list)
    goals: dict[str, dict] = field(default_factory=dict)  # name -> value, goal, passed
    same_first_token: bool | None = None
    seconds: float = 0.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--random-arch",
        default="llama-3.1-8b",
        help="architecture with random weights (default: %(default)s)",
    )
    parser.add_argument("--device", default="cpu", help="cpu | cuda (default: %(default)s)")
    parser.add_argument("--dtype", default="bfloat16", help="weights' and KV dtype (default: %(default)s)")
    parser.add_argument(
        "--prompt-tokens", type=int, default=8192, help="prompt length (default: %(default)s)"
    )
    parser.add_argument(
        "--copy-mib",
        type=int,
        default=1024,
        help="size of the pinned host-to-device copy that measures the link (default: %(default)s)",
    )
    parser.add_argument(
        "--disk-read-mib",
        type=int,
        default=2048,
        help="size of the file that measures the disk's uncached reads (default: %(default)s)",
    )
    parser.add_argument(
        "--warmup",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="first run the three cases with another prompt, unreported: the engine's own start-up "
        "warm-up is off, this compiles the measured steps instead (default: on)",
    )
    parser.add_argument("--seed", type=int, default=0, help="prompt token seed (default: %(default)s)")
    parser.add_argument(
        "--profile-host",
        metavar="OUT",
        default=None,
        help="also cProfile the measured host-memory case (host side) and write its top functions to OUT",
    )
    add_engine_arguments(
        parser,
        model_dir=False,
        only=("kv_disk_cache_dir", "gpu_memory_utilization", "max_num_batched_tokens", "block_size"),
        default_overrides={"max_num_batched_tokens": 8192},
    )
    parser.add_argument("--json", metavar="OUT", default=None, help="also write the report as JSON to OUT")


def kv_bytes_per_token(config: dict, dtype: str) -> int:
    """Keys and values of every layer for one token (MLA's latent is smaller: an upper bound)."""
    import torch

    heads = config.get("num_key_value_heads", config["num_attention_heads"])
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    itemsize = getattr(torch, dtype).itemsize
    return config["num_hidden_layers"] * 2 * heads * head_dim * itemsize


def run_bench(args: argparse.Namespace) -> Report:
    import torch

    from engine import LLM
    from engine.bench import bandwidth
    from engine.bench.random_arch import hf_config, write_config_dir

    started = time.perf_counter()
    device = torch.device(args.device)
    config = hf_config(args.random_arch)
    per_token = kv_bytes_per_token(config, args.dtype)
    prompt_mib = math.ceil(args.prompt_tokens * per_token / MIB)
    with tempfile.TemporaryDirectory(prefix="chassis-kv-tiers-") as tmp:
        # A fresh directory each run, inside --kv-disk-cache-dir (the disk to measure): blocks an
        # earlier run left would turn the recompute case into a disk hit.
        parent = Path(args.kv_disk_cache_dir) if args.kv_disk_cache_dir else Path(tmp)
        parent.mkdir(parents=True, exist_ok=True)
        disk_dir = Path(tempfile.mkdtemp(prefix="chassis-kv-tiers-", dir=parent))
        _say(f"pinned host-to-device copy of {args.copy_mib} MiB")
        h2d = bandwidth.host_to_device(device, args.copy_mib * MIB)
        _say(f"{h2d.gb_per_s:.1f} GB/s; uncached read of a {args.disk_read_mib} MiB file in {disk_dir}")
        disk = bandwidth.disk_read(disk_dir, args.disk_read_mib * MIB)
        _say(f"{disk.gb_per_s:.2f} GB/s ({disk.method}); loading {args.random_arch}")
        llm = LLM(
            str(write_config_dir(args.random_arch, Path(tmp) / "model")),
            device=args.device,
            dtype=args.dtype,
            load_format="dummy",
            max_model_len=args.prompt_tokens + args.block_size,
            max_num_seqs=1,
            max_num_batched_tokens=args.max_num_batched_tokens,
            gpu_memory_utilization=args.gpu_memory_utilization,
            block_size=args.block_size,
            kv_host_cache_mib=prompt_mib + prompt_mib // 4 + 16,
            kv_disk_cache_dir=str(disk_dir),
            kv_disk_cache_mib=max(10_240, 4 * prompt_mib),
            warm_up=False,  # the warm-up round runs the very steps measured; no other shape matters
        )
        gen = torch.Generator().manual_seed(args.seed)
        high = config["vocab_size"]

        def prompt() -> list[int]:
            return torch.randint(3, high, (args.prompt_tokens,), generator=gen).tolist()

        report = Report(
            args.random_arch,
            args.device,
            args.prompt_tokens,
            per_token,
            str(disk_dir),
            h2d.gb_per_s,
            h2d.method,
            disk.gb_per_s,
            disk.method,
            page_cache_dropped=True,
            page_cache_note=None,
        )
        if args.warmup:
            _say("warm-up round")
            _serve_three_ways(llm, prompt(), disk_dir, replace(report, cases=[]))
        _say("measured round")
        _serve_three_ways(llm, prompt(), disk_dir, report, args.profile_host)
        llm.shutdown()
        shutil.rmtree(disk_dir, ignore_errors=True)
    _judge(report)
    report.seconds = time.perf_counter() - started
    return report


def _serve_three_ways(
    llm, tokens: list[int], disk_dir: Path, report: Report, profile_host: str | None = None
) -> None:
    from engine.bench import bandwidth

    report.cases.append(_serve(llm, tokens, "recompute"))
    _evict_device_pool(llm)  # offloads the prompt's blocks to host memory and disk
    report.cases.append(_serve(llm, tokens, "host", profile_host))
    _evict_device_pool(llm)  # both tiers hold the blocks already: nothing written
    host = next(t for t in llm.engine.kv_tiers.tiers if t.name == "host")
    host.clear()
    problem = bandwidth.drop_page_cache(sorted(disk_dir.glob("*/*.kvb")))
    report.page_cache_dropped, report.page_cache_note = problem is None, problem
    report.cases.append(_serve(llm, tokens, "disk"))


def _serve(llm, tokens: list[int], name: str, profile: str | None = None) -> Case:
    import cProfile
    import io
    import pstats

    from engine import SamplingParams

    before = llm.stats().kv_tiers
    profiler = cProfile.Profile() if profile else None
    started = time.perf_counter()
    if profiler:
        profiler.enable()
    (out,) = llm.generate([tokens], SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True))
    wall = time.perf_counter() - started
    if profiler:
        profiler.disable()
        text = io.StringIO()
        stats = pstats.Stats(profiler, stream=text)
        stats.sort_stats("cumulative").print_stats(45)
        stats.sort_stats("tottime").print_stats(30)
        Path(profile).write_text(text.getvalue())
    after = llm.stats().kv_tiers
    metrics = out.metrics
    ttft = wall
    if metrics is not None and metrics.first_token_time is not None:
        ttft = metrics.first_token_time - metrics.arrival_time
    case = Case(
        name,
        ttft,
        out.num_cached_tokens,
        {t: after[t].hit_tokens - before[t].hit_tokens for t in after},
        first_token=out.token_ids[0] if out.token_ids else None,
    )
    if name in after:
        case.onload_bytes = after[name].onload_bytes - before[name].onload_bytes
        case.onload_s = after[name].onload_seconds - before[name].onload_seconds
    _say(f"{name}: TTFT {ttft * 1e3:.1f} ms, {out.num_cached_tokens} cached tokens")
    return case


def _evict_device_pool(llm) -> None:
    """Hand every free block out and back, as a long request would: each cached block is evicted
    (offloaded to the tiers that lack it) and the device pool holds no prefix afterwards."""
    pool = llm.engine.kv.pool
    pool.free(reversed(pool.allocate(pool.num_free_blocks)))


def _judge(report: Report) -> None:
    cases = {c.name: c for c in report.cases}
    recompute = cases["recompute"]
    ceilings = {
        "host": ("host-to-device", report.h2d_gb_per_s),
        "disk": ("disk read", report.disk_read_gb_per_s),
    }
    for name, (label, ceiling) in ceilings.items():
        case = cases[name]
        case.speedup_vs_recompute = recompute.ttft_s / case.ttft_s
        case.ceiling = label
        if case.onload_s > 0:
            case.onload_gb_per_s = case.onload_bytes / case.onload_s / 1e9
            case.onload_fraction = case.onload_gb_per_s / ceiling
        report.goals[f"{name}_onload_vs_{label.replace(' ', '_').replace('-', '_')}"] = _goal(
            case.onload_fraction, ONLOAD_GOAL
        )
    report.goals["host_speedup_vs_recompute"] = _goal(cases["host"].speedup_vs_recompute, HOST_SPEEDUP_GOAL)
    firsts = {c.first_token for c in report.cases}
    report.same_first_token = len(firsts) == 1


def _goal(value: float | None, goal: float) -> dict:
    return {"value": value, "goal": goal, "passed": value is not None and value >= goal}


def tiers_were_hit(report: Report) -> bool:
    """The host case onloaded from host memory only and the disk case from disk only."""
    cases = {c.name: c for c in report.cases}
    return (
        all(
            cases[name].tier_hit_tokens.get(name, 0) > 0
            and cases[name].tier_hit_tokens.get(name) == cases[name].cached_tokens
            for name in ("host", "disk")
        )
        and cases["recompute"].cached_tokens == 0
    )


def format_report(report: Report) -> str:
    def fmt(value, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    lines = [
        f"{report.arch} on {report.device}, {report.prompt_tokens}-token prompt "
        f"({report.prompt_tokens * report.kv_bytes_per_token / 1e9:.2f} GB of KV), tiers in {report.disk_dir}",
        f"pinned host-to-device: {report.h2d_gb_per_s:.2f} GB/s ({report.h2d_method})",
        f"disk direct read:      {report.disk_read_gb_per_s:.2f} GB/s ({report.disk_read_method})",
    ]
    if not report.page_cache_dropped:
        lines.append(f"WARNING: block files' page cache not dropped: {report.page_cache_note}")
    lines.append("")
    lines.append(
        f"{'served from':<12}{'TTFT ms':>9}{'cached':>8}{'onload MB':>11}{'onload ms':>11}"
        f"{'GB/s':>8}{'of ceiling':>12}{'speedup':>9}"
    )
    for c in report.cases:
        lines.append(
            f"{c.name:<12}{c.ttft_s * 1e3:>9.1f}{c.cached_tokens:>8}"
            f"{(fmt(c.onload_bytes / 1e6, '.1f') if c.onload_bytes else '-'):>11}"
            f"{(fmt(c.onload_s * 1e3, '.1f') if c.onload_bytes else '-'):>11}"
            f"{fmt(c.onload_gb_per_s, '.2f'):>8}{fmt(c.onload_fraction, '.0%'):>12}"
            f"{fmt(c.speedup_vs_recompute, '.2f'):>9}"
        )
    lines.append("")
    for name, goal in report.goals.items():
        value = goal["value"]
        shown = fmt(value, ".0%") if "onload" in name else fmt(value, ".2f") + "x"
        target = f">= {goal['goal']:.0%}" if "onload" in name else f">= {goal['goal']:.0f}x"
        lines.append(f"{name:<40}{shown:>8}  goal {target:<7} {'PASS' if goal['passed'] else 'FAIL'}")
    lines.append(f"same first token in all three cases: {report.same_first_token}; {report.seconds:.0f} s")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    report = run_bench(args)
    print(format_report(report))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(asdict(report), f, indent=2)
        print(f"wrote {args.json}", file=sys.stderr)
    if not tiers_were_hit(report):
        print("the host and disk cases did not (only) onload from their tiers", file=sys.stderr)
        return 1
    return 0


def _say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="chassis bench kv-tiers", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
