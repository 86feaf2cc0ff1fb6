import gzip
import json

import pytest

from engine.bench.gpu_timeline import analyse, load_trace


def _event(cat, name, ts, dur, correlation=None):
    event = {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur}
    if correlation is not None:
        event["args"] = {"correlation": correlation}
    return event


def _trace():
    """Kernel 1 runs 0-10; kernel 2 was launched at 5 and runs 12-20 (a device-side gap of 2);
    kernel 3 waits for a launch at 40 after 15 us of host work, runs 42-50 (starved gap 20-42)."""
    return [
        _event("cuda_runtime", "cudaLaunchKernel", 0, 1, correlation=1),
        _event("kernel", "k1", 0, 10, correlation=1),
        _event("cuda_runtime", "cudaLaunchKernel", 5, 1, correlation=2),
        _event("kernel", "k2", 12, 8, correlation=2),
        _event("cpu_op", "aten::slow_host_op", 22, 15),
        _event("cuda_runtime", "cudaStreamSynchronize", 38, 1),
        _event("cuda_runtime", "cudaLaunchKernel", 40, 1, correlation=3),
        _event("kernel", "k3", 42, 8, correlation=3),
        {"ph": "i", "cat": "instant", "name": "marker", "ts": 3},
    ]


def test_gaps_split_into_host_starved_and_device_side():
    timeline = analyse(_trace())
    assert timeline.window_us == 50
    assert timeline.busy_us == 10 + 8 + 8
    assert timeline.device_side_us == 2
    assert timeline.starved_us == 22
    assert timeline.starved_gaps == 1
    assert timeline.idle_us == 24
    assert timeline.lead_us == 0 and timeline.tail_us == 0
    # host work between the gap's start (20) and the launch (40)
    assert timeline.host_during_starved == {"aten::slow_host_op": 15, "cudaStreamSynchronize": 1}
    assert "host-starved 0.02 ms in 1 gaps" in timeline.format()


def test_a_marked_range_over_a_starved_gap_is_named_with_the_ops_inside_it():
    events = [*_trace(), _event("user_annotation", "chassis.schedule", 21, 18)]
    timeline = analyse(events)
    assert timeline.host_during_starved["chassis.schedule"] == 18  # 21-39, inside the gap 20-40
    assert timeline.host_during_starved["aten::slow_host_op"] == 15


def test_host_work_before_the_first_kernel_and_after_the_last():
    events = [
        _event("cpu_op", "schedule", 0, 30),
        _event("cuda_runtime", "cudaLaunchKernel", 30, 1, correlation=1),
        _event("kernel", "k", 31, 10, correlation=1),
        _event("cpu_op", "detokenize", 45, 15),
    ]
    timeline = analyse(events)
    assert (timeline.lead_us, timeline.window_us, timeline.tail_us) == (31, 10, 19)


def test_overlapping_kernels_count_once():
    events = [
        _event("kernel", "a", 0, 10, correlation=1),
        _event("kernel", "b", 5, 10, correlation=2),
        _event("gpu_memcpy", "copy", 15, 5, correlation=3),
    ]
    timeline = analyse(events)
    assert timeline.busy_us == 20 and timeline.idle_us == 0


def test_reads_plain_and_gzipped_chrome_traces(tmp_path):
    plain, packed = tmp_path / "t.json", tmp_path / "t.json.gz"
    plain.write_text(json.dumps({"traceEvents": _trace()}))
    with gzip.open(packed, "wt") as handle:
        json.dump({"traceEvents": _trace()}, handle)
    assert analyse(load_trace(plain)) == analyse(load_trace(packed))


def test_a_trace_without_device_events_is_refused():
    with pytest.raises(ValueError, match="no device events"):
        analyse([_event("cpu_op", "aten::mm", 0, 5)])
