"""The engine's own step time under the serve workload's load, measured in process.

The ``serve`` target compares inter-token latency seen by HTTP clients with the engine's decode
step time at the same batch size. This drives ``EngineCore`` directly with the serve workload's
requests, keeping the same number in flight (a finished request is replaced at once, as a client
sends its next one), and times every ``step()``: with nothing between the engine and the clients,
one step is one token for every running request.
"""

from __future__ import annotations

import time

from engine.bench.workloads import WorkloadResult
from measurement import Summary


def closed_loop_step_times(
    core, work: list[tuple[list[int], int]], concurrency: int
) -> tuple[list[float], int]:
    """Seconds of each ``core.step()`` and the mean number of running requests per step."""
    from engine import SamplingParams

    queue = iter(work)

    def admit() -> None:
        item = next(queue, None)
        if item is not None:
            prompt, max_tokens = item
            core.add_request(prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0.0))

    for _ in range(concurrency):
        admit()
    times: list[float] = []
    running = 0
    while core.has_unfinished():
        running += len(core.scheduler.running)
        started = time.perf_counter()
        outputs = core.step()
        times.append(time.perf_counter() - started)
        for out in outputs:
            if out.finished:
                admit()
    return times, running // max(len(times), 1)


def serve_reference(llm, work: list[tuple[list[int], int]], concurrency: int) -> WorkloadResult:
    core = llm.engine
    closed_loop_step_times(core, work[: min(len(work), concurrency)], concurrency)  # warm-up
    times, mean_running = closed_loop_step_times(core, work, concurrency)
    ms = Summary.of(t * 1e3 for t in times)
    return WorkloadResult(
        "serve-reference",
        {
            "step_p50_ms": ms.p50,
            "step_p99_ms": ms.p99,
            "steps": ms.count,
            "mean_running_requests": mean_running,
        },
        "the serve workload's requests driven in process, the same number in flight, every step timed",
    )
