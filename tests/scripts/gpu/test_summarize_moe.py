"""``scripts/gpu/summarize_moe.py``: the batch-128 decode step read three ways against its floor."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts" / "gpu"))

import summarize_moe  # noqa: E402


def test_the_batch128_step_is_read_as_run_estimate_graph_replay_and_median_gpu_span():
    figures = {
        "engine_batch128_decode_step_ms": 22.58,
        "engine_batch128_floor_decode_step_ms": 7.82,
        "engine_batch128_graph_replay_ms": 11.39,
        "engine_batch128_step_span_p50_ms": 11.44,
    }
    rows = {row[0]: row for row in summarize_moe.shape_rows("deepseek-v2-lite", figures)}
    assert rows["batch128 decode step ms, run estimate (512 in, 128 out)"][5] == "2.89x floor"
    assert rows["batch128 decode graph replay ms (one pure decode step)"][5] == "1.46x floor"
    assert rows["batch128 decode step ms, the run's median GPU span"][5] == "1.46x floor"
    assert rows["batch128 decode step ms, the run's median GPU span"][6] == "<= 1.6x floor"


def test_a_missing_figure_prints_as_a_dash():
    rows = {row[0]: row for row in summarize_moe.shape_rows("deepseek-v2-lite", {})}
    assert rows["batch128 decode step ms, the run's median GPU span"][1] == "-"
