"""Routing decision time: the cache_aware pool with many replicas holding many cached blocks.

Times ``ModelPool.decide`` end to end (hash chain of the prompt, prefix match against every
replica, load comparison, pending-prefix marking), in-process, with no I/O. Tokenization is timed
apart, on the tiny model's real tokenizer and chat template, since it depends on the model.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass

from engine.kv.block_hash import hash_chain
from gateway.config import BreakerConfig, ModelRoute, PolicyConfig, ReplicaSpec
from gateway.metrics import GatewayMetrics
from gateway.pool import ModelPool
from measurement import percentile


@dataclass
class DecisionReport:
    replicas: int
    blocks_per_replica: int
    prompt_tokens: int
    block_size: int
    iterations: int
    decision_p50_us: float
    decision_p99_us: float
    decision_max_us: float
    # CPU time of the deciding thread: the decision's own cost, without preemption by other processes
    # (wall-clock p99 on a shared 2-core machine mostly measures the OS scheduler).
    decision_cpu_p50_us: float
    decision_cpu_p99_us: float
    tokenize_p50_us: float | None = None
    tokenize_p99_us: float | None = None


def build_pool(
    replicas: int, blocks: int, prompt_tokens: int, block_size: int, seed: int
) -> tuple[ModelPool, list[list[int]]]:
    rng = random.Random(seed)
    specs = tuple(ReplicaSpec.from_url(f"http://10.0.0.{i + 1}:8100", f"r{i}") for i in range(replicas))
    pool = ModelPool(
        ModelRoute("bench", PolicyConfig("cache_aware"), specs), BreakerConfig(), GatewayMetrics()
    )
    pool.block_size = block_size
    prompts = [[rng.randrange(150_000) for _ in range(prompt_tokens)] for _ in range(64)]
    chains = [hash_chain(p, block_size) for p in prompts]
    for replica in pool.replicas.values():
        for chain in rng.sample(chains, 8):  # some prompts' prefixes, to various depths
            pool.index.store(replica.replica_id, chain[: rng.randrange(1, len(chain) + 1)])
        missing = blocks - pool.index.size(replica.replica_id)
        pool.index.store(replica.replica_id, (rng.randbytes(16) for _ in range(max(0, missing))))
        replica.in_flight = rng.randrange(4)
    return pool, prompts


def run_decision_bench(
    replicas: int = 16,
    blocks: int = 10_000,
    prompt_tokens: int = 2048,
    block_size: int = 16,
    iterations: int = 5000,
    seed: int = 0,
    tokenizer=None,
) -> DecisionReport:
    pool, prompts = build_pool(replicas, blocks, prompt_tokens, block_size, seed)
    for prompt in prompts * 3:  # warm-up: first sight of each prompt fills the pending-prefix table
        pool.decide(prompt)
    times, cpu_times = [], []
    for i in range(iterations):
        prompt = prompts[i % len(prompts)]
        cpu_start = time.thread_time()
        start = time.perf_counter()
        pool.decide(prompt)
        times.append((time.perf_counter() - start) * 1e6)
        cpu_times.append((time.thread_time() - cpu_start) * 1e6)
    report = DecisionReport(
        replicas=replicas,
        blocks_per_replica=blocks,
        prompt_tokens=prompt_tokens,
        block_size=block_size,
        iterations=iterations,
        decision_p50_us=percentile(times, 50),
        decision_p99_us=percentile(times, 99),
        decision_max_us=max(times),
        decision_cpu_p50_us=percentile(cpu_times, 50),
        decision_cpu_p99_us=percentile(cpu_times, 99),
    )
    if tokenizer is not None:
        rng = random.Random(seed)
        words = " ".join(f"w{rng.randrange(10_000)}" for _ in range(prompt_tokens // 4))
        messages = [{"role": "system", "content": words}, {"role": "user", "content": "Summarize."}]
        tok_times = []
        for _ in range(min(iterations, 300)):
            start = time.perf_counter()
            tokenizer.encode_chat(messages, add_generation_prompt=True)
            tok_times.append((time.perf_counter() - start) * 1e6)
        report.tokenize_p50_us = percentile(tok_times, 50)
        report.tokenize_p99_us = percentile(tok_times, 99)
    return report


def format_report(report: DecisionReport) -> str:
    lines = [
        f"routing decision (cache_aware, {report.replicas} replicas x {report.blocks_per_replica} cached blocks, "
        f"{report.prompt_tokens}-token prompts, block size {report.block_size}, {report.iterations} decisions):",
        f"  p50 {report.decision_p50_us:.0f} us   p99 {report.decision_p99_us:.0f} us   "
        f"max {report.decision_max_us:.0f} us   (wall clock)",
        f"  p50 {report.decision_cpu_p50_us:.0f} us   p99 {report.decision_cpu_p99_us:.0f} us   (CPU time of the thread)",
    ]
    if report.tokenize_p50_us is not None:
        lines.append(
            f"  tokenization, measured apart: p50 {report.tokenize_p50_us:.0f} us   p99 {report.tokenize_p99_us:.0f} us"
        )
    return "\n".join(lines)


def report_dict(report: DecisionReport) -> dict:
    return asdict(report)
