"""The engine's benchmark workloads (Llama-3.1-8B shape on one GPU by default).

Every workload uses seeded random prompts and fixed output lengths (``ignore_eos``), so runs are
comparable across engines and weight values.
"""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import asdict, dataclass, field


@dataclass
class WorkloadResult:
    name: str
    figures: dict[str, float] = field(default_factory=dict)
    notes: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def random_prompts(count: int, low: int, high: int, vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    # Avoid the highest ids, where checkpoints keep special tokens.
    return [[rng.randrange(10, vocab - 300) for _ in range(rng.randint(low, high))] for _ in range(count)]


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _timed_generate(llm, prompts, params) -> tuple[float, list]:
    _sync()
    started = time.perf_counter()
    outs = llm.generate(prompts, params)
    _sync()
    return time.perf_counter() - started, outs


@dataclass
class TimedRun:
    """A timed ``generate``: its wall seconds and outputs, the GPU's idle fraction and per-step spans
    in ms (CUDA events; None / empty off CUDA), and how many of its steps replayed a decode graph."""

    seconds: float
    outs: list
    idle: float | None
    spans: list[float]
    graph_steps: int | None

    @property
    def steps(self) -> int:
        return len(self.spans)

    def span_figures(self) -> dict[str, float]:
        """Its median step span, its ten longest together, and its graph replays."""
        figures = {}
        if self.spans:
            figures["step_span_p50_ms"] = statistics.median(self.spans)
            figures["step_span_top10_ms"] = sum(sorted(self.spans)[-10:])
        if self.graph_steps is not None:
            figures["graph_steps"] = self.graph_steps
        return figures


def _timed_with_idle(llm, prompts, params) -> TimedRun:
    """Time ``generate`` and measure the GPU's idle fraction from CUDA events around each step's
    GPU work (from its first input copy to its sampled ids). The events sit in stream order, so
    the spans never overlap, even when the host queues step N+1 before step N has run."""
    runner = llm.engine.runner
    graphs = runner.graphs
    replays_before = graphs.steps_run if graphs is not None else 0
    runner.step_events = []
    try:
        seconds, outs = _timed_generate(llm, prompts, params)
        events = runner.step_events
    finally:
        runner.step_events = None
    spans = [start.elapsed_time(end) for start, end in events]
    idle = max(0.0, 1.0 - sum(spans) / 1e3 / seconds) if spans else None
    graph_steps = graphs.steps_run - replays_before if graphs is not None else None
    return TimedRun(seconds, outs, idle, spans, graph_steps)


def _cgroup_throttled_us() -> int | None:
    """CPU time the container's cgroup quota has throttled so far (None outside a cgroup v2 quota)."""
    try:
        for line in open("/sys/fs/cgroup/cpu.stat"):
            if line.startswith("throttled_usec"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _decode_pass(llm, prompt: list[int], output_len: int) -> dict[str, float]:
    """One prefill-only run and one full run of ``prompt`` (last token flipped, so each misses
    the prefix cache): decode step time = (full - prefill) / (output_len - 1), plus where it went."""
    from engine import SamplingParams

    one = SamplingParams(max_tokens=1, ignore_eos=True, temperature=0.0)
    full = SamplingParams(max_tokens=output_len, ignore_eos=True, temperature=0.0)
    prefill_s, _ = _timed_generate(llm, [prompt[:-1] + [prompt[-1] ^ 1]], one)
    thread_cpu, process_cpu, throttled = time.thread_time(), time.process_time(), _cgroup_throttled_us()
    run = _timed_with_idle(llm, [prompt[:-2] + [prompt[-2] ^ 1, prompt[-1]]], full)
    total_s = run.seconds
    assert len(run.outs[0].token_ids) == output_len
    step_ms = (total_s - prefill_s) / (output_len - 1) * 1e3
    figures = {
        "ms_per_step": step_ms,
        "decode_tokens_per_s": 1e3 / step_ms,
        "e2e_tokens_per_s": output_len / total_s,
        "prefill_ms": prefill_s * 1e3,
        # Host diagnostics: CPU time of the engine's thread and of the whole process per step.
        "host_thread_cpu_ms_per_step": (time.thread_time() - thread_cpu) / output_len * 1e3,
        "process_cpu_ms_per_step": (time.process_time() - process_cpu) / output_len * 1e3,
    }
    if throttled is not None:
        figures["cgroup_throttled_ms"] = (_cgroup_throttled_us() - throttled) / 1e3
    # GPU spans per step (events) vs wall, and whether the decode steps ran as graph replays.
    if run.idle is not None:
        figures["gpu_idle_fraction"] = run.idle
        figures["gpu_ms_per_step"] = total_s * (1 - run.idle) / max(run.steps, 1) * 1e3
    if run.graph_steps is not None:
        figures["graph_steps"] = run.graph_steps
    return figures


def decode_bs1(
    llm, vocab: int, prompt_len: int = 1024, output_len: int = 256, seed: int = 0
) -> WorkloadResult:
    """Two timed passes with different prompts: the figures are the second (steady state), the
    first pass's step time is kept as ``first_pass_ms_per_step``."""
    from engine import SamplingParams

    first, second, other = random_prompts(3, prompt_len, prompt_len, vocab, seed)
    # Warm-up at the real prompt length (Triton compiles per tile shape), with other tokens.
    llm.generate([other], SamplingParams(max_tokens=8, ignore_eos=True, temperature=0.0))
    first_pass = _decode_pass(llm, first, output_len)
    figures = _decode_pass(llm, second, output_len)
    figures["first_pass_ms_per_step"] = first_pass["ms_per_step"]
    graph_ms = _graph_replay_ms(llm)
    if graph_ms is not None:
        figures["graph_replay_ms"] = graph_ms  # GPU time of one step alone: the rest is host time
    return WorkloadResult(
        "decode-bs1",
        figures,
        f"prompt {prompt_len}, output {output_len}; step time excludes the prefill measured separately; "
        "second of two passes",
    )


def _graph_replay_ms(llm, size: int = 1, iters: int = 100) -> float | None:
    """Mean of back-to-back replays of the batch-``size`` decode graph (CUDA events). Single-rank
    only: a tensor-parallel graph holds all-reduces that every rank must replay together."""
    import torch

    if llm.engine.config.tensor_parallel_size > 1:
        return None
    graphs = llm.engine.runner.graphs
    if graphs is None or size not in graphs.replays:
        return None
    graphs.packed[2, :size].fill_(-1)  # slot -1: the timing replays write no KV anywhere
    replay = graphs.replays[size]
    for _ in range(5):
        replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / iters


def prefill(
    llm,
    vocab: int,
    lengths=(2048, 8192),
    seed: int = 0,
    num_params: int | None = None,
    matmul_flops_per_s: float | None = None,
) -> WorkloadResult:
    from engine import SamplingParams

    one = SamplingParams(max_tokens=1, ignore_eos=True, temperature=0.0)
    figures: dict[str, float] = {}
    for n, length in enumerate(lengths):
        prompts = random_prompts(3, length, length, vocab, seed + 100 * n)
        llm.generate([prompts[0]], one)  # warm-up at this shape
        times = sorted(_timed_generate(llm, [p], one)[0] for p in prompts[1:] + prompts[:1])
        seconds = times[len(times) // 2]
        figures[f"prefill_{length}_tokens_per_s"] = length / seconds
        if num_params and matmul_flops_per_s:
            figures[f"prefill_{length}_mfu"] = 2 * num_params * length / seconds / matmul_flops_per_s
    return WorkloadResult(
        "prefill", figures, "one prompt at a time, prefix caching defeated by distinct prompts"
    )


def _floor_figures(floor_inputs, prompts, output_lens, seconds: float) -> dict[str, float]:
    """The workload's physical floor (engine/bench/floors.py) and how close the run came to it."""
    if floor_inputs is None:
        return {}
    from engine.bench.floors import workload_floor

    floor = workload_floor(
        floor_inputs.cfg,
        [len(p) for p in prompts],
        output_lens,
        floor_inputs.ceilings,
        floor_inputs.dtype,
        floor_inputs.max_num_seqs,
    )
    return {
        "floor_seconds": floor.seconds,
        "floor_compute_seconds": floor.compute_s,
        "floor_kv_read_seconds": floor.kv_read_s,
        "floor_weight_read_seconds": floor.weight_read_s,
        "floor_output_tokens_per_s": sum(output_lens) / floor.seconds,
        "fraction_of_floor": floor.seconds / seconds,
    }


def offline_requests(num_requests: int, vocab: int, seed: int = 0) -> tuple[list[list[int]], list]:
    """The offline mix's prompts (128-1,024 random tokens) and sampling parameters (128-512 output
    tokens, ``ignore_eos``, greedy)."""
    from engine import SamplingParams

    rng = random.Random(seed)
    prompts = random_prompts(num_requests, 128, 1024, vocab, seed)
    params = [
        SamplingParams(max_tokens=rng.randint(128, 512), ignore_eos=True, temperature=0.0) for _ in prompts
    ]
    return prompts, params


def offline(llm, vocab: int, num_requests: int = 2000, seed: int = 0, floor_inputs=None) -> WorkloadResult:
    """``floor_inputs``: an ``engine.bench.floors.FloorInputs`` to also report the physical floor."""
    prompts, params = offline_requests(num_requests, vocab, seed)
    llm.generate(prompts[:8], params[:8])  # warm-up
    run = _timed_with_idle(llm, prompts, params)
    seconds, outs, idle, steps = run.seconds, run.outs, run.idle, run.steps
    out_tokens = sum(len(o.token_ids) for o in outs)
    in_tokens = sum(len(p) for p in prompts)
    figures = {
        "output_tokens_per_s": out_tokens / seconds,
        "total_tokens_per_s": (in_tokens + out_tokens) / seconds,
        "seconds": seconds,
        "requests": num_requests,
        "steps": steps,
    }
    if idle is not None:
        figures["gpu_idle_fraction"] = idle
    figures.update(run.span_figures())
    figures.update(_floor_figures(floor_inputs, prompts, [p.max_tokens for p in params], seconds))
    return WorkloadResult(
        "offline",
        figures,
        "prompts uniform in [128, 1024], outputs uniform in [128, 512], ignore_eos, all submitted at once; "
        "gpu_idle_fraction = 1 - sum(step GPU spans) / wall",
    )


def static_batch(
    llm,
    vocab: int,
    batch_size: int = 128,
    prompt_len: int = 512,
    output_len: int = 128,
    seed: int = 0,
    floor_inputs=None,
) -> WorkloadResult:
    """The same shape as the transformers batch-128 baseline, for a like-for-like ratio.

    The decode step time is (the run - a prefill-only run of as many other prompts of the same
    length) / (output_len - 1); with chunked prefill some decode steps of the run also carry prompt
    chunks, so it is an upper estimate of the pure decode step."""
    from engine import SamplingParams

    prompts = random_prompts(batch_size, prompt_len, prompt_len, vocab, seed)
    params = SamplingParams(max_tokens=output_len, ignore_eos=True, temperature=0.0)
    llm.generate(prompts[:4], SamplingParams(max_tokens=4, ignore_eos=True))
    # Other tokens than the timed prompts, so neither run hits the other's prefix cache.
    others = random_prompts(batch_size, prompt_len, prompt_len, vocab, seed + 1)
    prefill_s, _ = _timed_generate(
        llm, others, SamplingParams(max_tokens=1, ignore_eos=True, temperature=0.0)
    )
    run = _timed_with_idle(llm, prompts, params)
    seconds = run.seconds
    figures = {
        "output_tokens_per_s": batch_size * output_len / seconds,
        "seconds": seconds,
        "steps": run.steps,
        "prefill_seconds": prefill_s,
    }
    if output_len > 1:
        figures["decode_step_ms"] = (seconds - prefill_s) / (output_len - 1) * 1e3
    # The batch's decode graph replayed over the last step's block tables and lengths (the static
    # buffers still hold them): one pure decode step's GPU time, free of the prefill estimate above.
    graph_ms = _graph_replay_ms(llm, batch_size)
    if graph_ms is not None:
        figures["graph_replay_ms"] = graph_ms
    if run.idle is not None:
        figures["gpu_idle_fraction"] = run.idle
    figures.update(run.span_figures())
    figures.update(_floor_figures(floor_inputs, prompts, [output_len] * batch_size, seconds))
    figures.update(_decode_step_floor_figures(floor_inputs, prompt_len, output_len, batch_size, figures))
    return WorkloadResult(
        f"batch{batch_size}",
        figures,
        f"{batch_size} prompts of {prompt_len}, {output_len} output tokens each",
    )


def _decode_step_floor_figures(
    floor_inputs, prompt_len: int, output_len: int, batch_size: int, figures
) -> dict:
    """The weight-and-KV read floor of the run's mean decode step (contexts prompt_len + output_len / 2)."""
    if floor_inputs is None or "decode_step_ms" not in figures:
        return {}
    from engine.bench.floors import decode_step_floor

    context = prompt_len + output_len // 2
    floor = decode_step_floor(
        floor_inputs.cfg, [context] * batch_size, floor_inputs.ceilings, floor_inputs.dtype
    )
    result = {
        "floor_decode_step_ms": floor.seconds * 1e3,
        "floor_decode_step_weight_GB": floor.weight_bytes / 1e9,
        "floor_decode_step_kv_GB": floor.kv_bytes / 1e9,
        "decode_step_over_floor": figures["decode_step_ms"] / (floor.seconds * 1e3),
    }
    if "graph_replay_ms" in figures:
        result["graph_replay_over_floor"] = figures["graph_replay_ms"] / (floor.seconds * 1e3)
    return result
