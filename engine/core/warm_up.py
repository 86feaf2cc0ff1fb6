"""Compile the kernels of every step shape before the first request, so no request pays for it.

Triton compiles a kernel the first time it sees a new tile-size choice (the varlen attention picks
one of four from the step's mean query length); on the H200 a compile costs 0.3-0.5 s, which a
first request (or a benchmark's timed region) would otherwise absorb. The decode graphs compiled
theirs at capture; this runs a few throwaway steps through the real scheduler and runner: a fresh
prefill, then one mixed step (a request decoding beside a new prompt) per attention tile size. Then
eager steps that sample every power-of-two count of rows up to ``max_num_seqs`` (that many short
prompts at once) and prefill every power-of-two count of tokens up to the step budget: kernels whose
tiles follow a row or token bucket (the LM head's GEMV table, the fused-MoE table) compile here too.
On the H200, DeepSeek-V2-Lite's first steps with 43 and 100 sampled rows took 0.7 and 0.5 s, against
0.13 s once compiled (issue 16, scripts/gpu/mixed_steps.py). It uses its own KV manager and
scheduler, so no counter, cached block or KV event of it remains.
"""

from __future__ import annotations

import random

from engine.kv.events import KVEventLog
from engine.kv.kv_manager import KVCacheManager
from engine.sampling.params import SamplingParams
from engine.scheduler.scheduler import Scheduler

# New-prompt lengths whose mixed steps (with two decoding requests beside them) give mean query
# lengths in each of the varlen attention kernel's tile classes (kernels/paged_attention.py).
MIXED_PROMPT_LENS = (3, 11, 23, 255)
# The smallest sampled-row and prefill-token buckets run on their own (smaller ones the steps above
# and the decode graphs cover), and the short prompts' length in the sampled-row steps.
FIRST_ROW_BUCKET, FIRST_TOKEN_BUCKET, SHORT_PROMPT = 16, 512, 4


def buckets(first: int, last: int) -> list[int]:
    """Powers of two from ``first`` below ``last``, then ``last`` itself (none when last < first)."""
    sizes = []
    size = first
    while size < last:
        sizes.append(size)
        size *= 2
    return sizes + [last] if last >= first else sizes


def warm_up(core) -> None:
    """Only on a fresh engine: its throwaway steps write KV blocks the real manager thinks free."""
    if core.has_unfinished() or core.kv.pool.num_cached_blocks or core.kv.pool.num_used_blocks:
        raise RuntimeError("warm_up must run before the engine serves any request")
    config = core.config
    kv, scheduler = core.kv, core.scheduler
    window_pool = kv.window.pool.num_blocks if kv.layout.hybrid else 0
    core.kv = KVCacheManager(
        kv.pool.num_blocks,
        config.block_size,
        False,
        KVEventLog(16),
        layout=kv.layout,
        num_window_blocks=window_pool,
    )
    core.scheduler = Scheduler(core.kv, config.max_num_batched_tokens, config.max_num_seqs)
    prompt_tokens, generation_tokens = core.prompt_tokens, core.generation_tokens
    try:
        _run(core)
    finally:
        core.kv, core.scheduler = kv, scheduler
        core.prompt_tokens, core.generation_tokens = prompt_tokens, generation_tokens


def _run(core) -> None:
    rng = random.Random(0)
    vocab = core.model_config.vocab_size
    longest = max(MIXED_PROMPT_LENS)
    if core.max_model_len <= longest + 2 * len(MIXED_PROMPT_LENS) + 8:
        return  # a toy context length: nothing worth compiling ahead

    def prompt(n: int) -> list[int]:
        return [rng.randrange(vocab) for _ in range(n)]

    def greedy(n: int) -> SamplingParams:
        return SamplingParams(max_tokens=n, ignore_eos=True, temperature=0.0)

    def drain() -> None:
        while core.has_unfinished():
            core.step()

    core.add_request(prompt(64), greedy(2 * len(MIXED_PROMPT_LENS) + 4), request_id="warm-up-long")
    core.step()
    for i, n in enumerate(MIXED_PROMPT_LENS):
        core.add_request(prompt(n), greedy(2), request_id=f"warm-up-{i}")
        core.step()
    drain()
    config = core.config
    rows_fit = min(config.max_num_seqs, config.max_num_batched_tokens // SHORT_PROMPT)
    for rows in buckets(FIRST_ROW_BUCKET, rows_fit):
        for i in range(rows):
            core.add_request(prompt(SHORT_PROMPT), greedy(1), request_id=f"warm-up-rows-{rows}-{i}")
        drain()
    for n in buckets(FIRST_TOKEN_BUCKET, min(config.max_num_batched_tokens, core.max_model_len - 1)):
        core.add_request(prompt(n), greedy(1), request_id=f"warm-up-tokens-{n}")
        drain()
