"""``--profile-point ACC:BATCH`` of the speculative grid: where a point's step time goes on the device.

After the point's timed rounds, its ``off`` mode, its best fixed length and the scheduler each run
once more under ``torch.profiler`` (host and, on CUDA, device activity), untimed and on copies of the
shared step-time models, so the grid's later points decide as they would have. The engine's phases
are marked as ranges in the trace (``chassis.schedule``, ``chassis.propose``, ``chassis.launch``, …),
so ``engine.bench.gpu_timeline`` names the host work during the gaps where the device waited for the
host: for each mode, the device window, its busy time, its idle time split into host-starved and
device-side gaps, and the phases and ops that overlapped the starved gaps. A verify step is
synchronous (the host reads its tokens before it drafts the next), so its host work shows up
here as starved time, where a plain step's is hidden behind the step in flight.

The traces stay in ``--profile-dir`` when one is given (gzipped chrome traces, one per mode).
"""

from __future__ import annotations

import copy
import tempfile
from contextlib import ExitStack, contextmanager
from pathlib import Path

# (module, class, method, range name): the engine's phases, marked in the trace.
PHASES = (
    ("engine.scheduler.scheduler", "Scheduler", "schedule", "chassis.schedule"),
    ("engine.spec.speculator", "Speculator", "propose", "chassis.propose"),
    ("engine.spec.speculator", "Speculator", "observe", "chassis.observe"),
    ("engine.runner.model_runner", "ModelRunner", "launch", "chassis.launch"),
    ("engine.runner.model_runner", "ModelRunner", "_verify_step", "chassis.verify"),
    ("engine.core.engine_core", "EngineCore", "_process", "chassis.process"),
)
TOP_HOST_EVENTS = 12


def parse_point(text: str) -> tuple[float, int]:
    """``ACC:BATCH`` (e.g. ``0.9:128``) as (acceptance, batch size)."""
    try:
        acceptance, batch = text.split(":")
        point = float(acceptance), int(batch)
    except ValueError:
        raise ValueError(f"--profile-point wants ACC:BATCH (e.g. 0.9:128), got {text!r}") from None
    if not 0.0 <= point[0] <= 1.0 or point[1] < 1:
        raise ValueError(f"--profile-point {text!r}: the acceptance must be in [0, 1] and the batch >= 1")
    return point


@contextmanager
def phase_ranges():
    """The engine's phases as ``record_function`` ranges while the block runs (class methods patched
    and restored)."""
    import importlib

    from torch.profiler import record_function

    def marked(fn, name):
        def wrapper(*args, **kwargs):
            with record_function(name):
                return fn(*args, **kwargs)

        return wrapper

    with ExitStack() as undo:
        for module, cls_name, method, name in PHASES:
            cls = getattr(importlib.import_module(module), cls_name)
            original = cls.__dict__.get(method)
            if original is None:
                continue
            setattr(cls, method, marked(original, name))
            undo.callback(setattr, cls, method, original)
        yield


def profile_point(
    runner, point, modes: tuple[str, ...], prompts: list, trace_dir: Path | None, say=print
) -> dict[str, dict]:
    """Each of ``modes`` of the point once under the profiler; per mode the timeline's summary (None
    on a device without kernel events, such as the CPU) and its trace's path when kept."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from engine.bench.gpu_timeline import analyse, load_trace

    cuda = runner.llm.engine.device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    summaries: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as scratch:
        folder = trace_dir or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        for mode in modes:
            models = copy.deepcopy(runner.models)  # the timed points' models stay as they were
            with phase_ranges(), profile(activities=activities) as prof:
                result = runner.run(mode, prompts, point.acceptance, models=models)
                if cuda:
                    torch.cuda.synchronize()
            trace = folder / f"grid-{point.acceptance}-{point.batch_size}-{mode}.json.gz"
            prof.export_chrome_trace(str(trace))
            summary = {"tokens_per_s": result.tokens_per_s, "trace": str(trace) if trace_dir else None}
            try:
                timeline = analyse(load_trace(trace))
            except ValueError:  # no device events: the CPU
                summary["timeline"] = None
            else:
                summary["timeline"] = summarize(timeline)
                say(
                    f"[profile {point.acceptance}/{point.batch_size} {mode}] {timeline.format(TOP_HOST_EVENTS)}"
                )
            summaries[mode] = summary
    return summaries


def summarize(timeline) -> dict:
    """A timeline in milliseconds, with the host events that most overlapped its starved gaps."""
    ranked = sorted(timeline.host_during_starved.items(), key=lambda item: item[1], reverse=True)
    return {
        "window_ms": timeline.window_us / 1e3,
        "busy_ms": timeline.busy_us / 1e3,
        "starved_ms": timeline.starved_us / 1e3,
        "device_side_ms": timeline.device_side_us / 1e3,
        "starved_gaps": timeline.starved_gaps,
        "host_during_starved_ms": {name: us / 1e3 for name, us in ranked[:TOP_HOST_EVENTS]},
    }
