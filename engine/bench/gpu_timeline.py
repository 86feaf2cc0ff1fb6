"""Where the GPU sat idle in a torch.profiler trace, and what the host was doing then.

A kernel cannot start before the host call that launches it. An idle gap whose next kernel was
launched after the gap began is host-starved: the device waited for the host, and the host work
that overlaps the gap (torch ops, CUDA runtime calls) is what the wall time paid for. A gap whose
next kernel was already queued is device-side (a dependency, a copy, an event wait).

Reads the JSON that ``torch.profiler.profile.export_chrome_trace`` writes: complete events
(``"ph": "X"``) with ``cat`` ``kernel``/``gpu_memcpy``/``gpu_memset`` on the device and
``cuda_runtime``/``cuda_driver``/``cpu_op`` on the host, linked by ``args.correlation``.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

DEVICE_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
LAUNCH_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})
# user_annotation: record_function ranges (the grid's profile marks the engine's phases with them).
HOST_CATEGORIES = frozenset({"cpu_op", "user_annotation", "cuda_runtime", "cuda_driver"})


@dataclass
class Timeline:
    window_us: float  # first device event's start to the last one's end
    busy_us: float  # union of the device events in the window
    starved_us: float  # idle while the next launch had not been made yet
    device_side_us: float  # idle with the next kernel already launched
    starved_gaps: int
    lead_us: float = 0.0  # the first host event to the first device event (host work before any kernel)
    tail_us: float = 0.0  # the last device event's end to the last host event's end
    host_during_starved: dict[str, float] = field(default_factory=dict)  # host event name -> overlap us
    host_calls_during_starved: dict[str, int] = field(default_factory=dict)

    @property
    def idle_us(self) -> float:
        return self.window_us - self.busy_us

    def format(self, top: int = 20) -> str:
        lines = [
            f"device window {self.window_us / 1e3:.2f} ms: kernels busy {self.busy_us / 1e3:.2f} ms, idle "
            f"{self.idle_us / 1e3:.2f} ms = host-starved {self.starved_us / 1e3:.2f} ms in {self.starved_gaps} gaps"
            f" + device-side {self.device_side_us / 1e3:.2f} ms; host alone before the first kernel "
            f"{self.lead_us / 1e3:.2f} ms, after the last {self.tail_us / 1e3:.2f} ms",
            "host events overlapping the starved gaps (us, events; nested ops each count their overlap):",
        ]
        ranked = sorted(self.host_during_starved.items(), key=lambda item: item[1], reverse=True)[:top]
        lines += [
            f"  {us:10.1f} us {self.host_calls_during_starved[name]:6d}x  {name[:100]}" for name, us in ranked
        ]
        return "\n".join(lines)


def load_trace(path: Path) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as handle:
        data = json.load(handle)
    return data["traceEvents"] if isinstance(data, dict) else data


def analyse(events: list[dict]) -> Timeline:
    complete = [e for e in events if e.get("ph") == "X" and "ts" in e and "dur" in e]
    device = sorted((e for e in complete if e.get("cat") in DEVICE_CATEGORIES), key=lambda e: float(e["ts"]))
    if not device:
        raise ValueError("the trace has no device events (was CUDA activity profiled?)")
    launches = {
        _correlation(e): e
        for e in complete
        if e.get("cat") in LAUNCH_CATEGORIES and _correlation(e) is not None
    }
    host = sorted((e for e in complete if e.get("cat") in HOST_CATEGORIES), key=lambda e: float(e["ts"]))
    window_start = float(device[0]["ts"])
    busy = starved = device_side = 0.0
    gaps = 0
    overlap: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    run_start, run_end = window_start, window_start + float(device[0]["dur"])
    for event in device[1:]:
        start, end = float(event["ts"]), float(event["ts"]) + float(event["dur"])
        if start <= run_end:
            run_end = max(run_end, end)
            continue
        busy += run_end - run_start
        launch = launches.get(_correlation(event))
        gap_end = start
        if launch is not None and float(launch["ts"]) > run_end:
            starved += gap_end - run_end
            gaps += 1
            _add_overlaps(host, run_end, float(launch["ts"]), overlap, calls)
        else:
            device_side += gap_end - run_end
        run_start, run_end = start, end
    busy += run_end - run_start
    host_start = min((float(e["ts"]) for e in host), default=window_start)
    host_end = max((float(e["ts"]) + float(e["dur"]) for e in host), default=run_end)
    return Timeline(
        window_us=run_end - window_start,
        busy_us=busy,
        starved_us=starved,
        device_side_us=device_side,
        starved_gaps=gaps,
        lead_us=max(0.0, window_start - host_start),
        tail_us=max(0.0, host_end - run_end),
        host_during_starved=dict(overlap),
        host_calls_during_starved=dict(calls),
    )


def _correlation(event: dict):
    return (event.get("args") or {}).get("correlation")


def _add_overlaps(host: list[dict], start: float, stop: float, overlap: dict, calls: dict) -> None:
    for event in host:
        event_start = float(event["ts"])
        if event_start >= stop:
            break
        shared = min(stop, event_start + float(event["dur"])) - max(start, event_start)
        if shared > 0:
            overlap[event["name"]] += shared
            calls[event["name"]] += 1
