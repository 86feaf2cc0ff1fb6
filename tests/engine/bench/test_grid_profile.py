"""``--profile-point`` of the speculative grid: a point's modes rerun under torch.profiler with the
engine's phases marked, on copies of the shared step-time models."""

import argparse
import gzip
import json
from collections import Counter
from types import SimpleNamespace

import pytest

from chassis.main import main
from engine.bench.gpu_timeline import Timeline
from engine.bench.grid_profile import parse_point, phase_ranges, summarize

GRID = ["bench", "speculative", "--grid", "--random-arch", "tiny-llama", "--device", "cpu"]


def _ranges(trace) -> Counter:
    with gzip.open(trace, "rt") as handle:
        events = json.load(handle)["traceEvents"]
    return Counter(e["name"] for e in events if str(e.get("name", "")).startswith("chassis."))


def test_a_profiled_point_keeps_a_trace_per_mode_with_the_engines_phases(tmp_path):
    out, traces = tmp_path / "grid.json", tmp_path / "traces"
    point = ["--acceptance", "0.6", "--batch-sizes", "2", "--draft-lengths", "2", "--max-tokens", "6"]
    main([*GRID, *point, "--profile-point", "0.6:2", "--profile-dir", str(traces), "--json", str(out)])
    (measured,) = json.loads(out.read_text())["points"]
    profiles = measured["profiles"]
    assert list(profiles) == ["off", measured["best_fixed"], "scheduler"]
    for mode, profile in profiles.items():
        assert profile["timeline"] is None  # the CPU has no device events to lay out
        assert profile["tokens_per_s"] > 0
        ranges = _ranges(profile["trace"])
        assert (
            ranges["chassis.schedule"] > 0 and ranges["chassis.launch"] > 0 and ranges["chassis.process"] > 0
        )
        if mode == "k2":  # every step drafts: each is proposed for and verified
            assert ranges["chassis.verify"] > 0 and ranges["chassis.propose"] == ranges["chassis.schedule"]
        if mode == "off":
            assert ranges["chassis.verify"] == 0


def test_a_point_not_asked_for_is_not_profiled(tmp_path):
    out = tmp_path / "grid.json"
    point = ["--acceptance", "0.6", "--batch-sizes", "2", "--draft-lengths", "2", "--max-tokens", "4"]
    main([*GRID, *point, "--profile-point", "0.6:3", "--json", str(out)])
    (measured,) = json.loads(out.read_text())["points"]
    assert measured["profiles"] == {}


def test_profiled_runs_leave_the_shared_step_time_models_as_they_were(tiny_llama):
    from engine import LLM
    from engine.bench.grid_profile import profile_point
    from engine.bench.speculative_grid import GridRunner, random_prompts

    args = argparse.Namespace(draft_lengths=[2], seed=0, oracle_confidence="calibrated", max_tokens=6)
    llm = LLM(str(tiny_llama), device="cpu", dtype="float32", max_num_seqs=2, max_model_len=192)
    try:
        runner = GridRunner(llm, args)
        prompts = random_prompts(2, runner.vocab_size, seed=1)
        runner.run("k2", prompts, 0.6)
        before = [model.steps for model in runner.models]
        point = SimpleNamespace(acceptance=0.6, batch_size=2)
        profiles = profile_point(
            runner, point, ("off", "k2", "scheduler"), prompts, None, say=lambda line: None
        )
    finally:
        llm.shutdown()
    assert [model.steps for model in runner.models] == before and before[0] > 0
    assert set(profiles) == {"off", "k2", "scheduler"}
    assert all(p["trace"] is None for p in profiles.values())  # no --profile-dir: not kept


def test_the_phase_ranges_are_removed_after_the_block():
    from engine.scheduler.scheduler import Scheduler

    schedule = Scheduler.schedule
    with phase_ranges():
        assert Scheduler.schedule is not schedule
    assert Scheduler.schedule is schedule


def test_a_timeline_is_summarized_in_milliseconds_with_its_top_host_events():
    timeline = Timeline(
        window_us=10_000.0,
        busy_us=7_000.0,
        starved_us=2_500.0,
        device_side_us=500.0,
        starved_gaps=4,
        host_during_starved={"chassis.schedule": 1_200.0, "chassis.process": 800.0},
        host_calls_during_starved={"chassis.schedule": 4, "chassis.process": 4},
    )
    summary = summarize(timeline)
    assert summary["window_ms"] == 10.0 and summary["busy_ms"] == 7.0
    assert summary["starved_ms"] == 2.5 and summary["device_side_ms"] == 0.5 and summary["starved_gaps"] == 4
    assert list(summary["host_during_starved_ms"].items()) == [
        ("chassis.schedule", 1.2),
        ("chassis.process", 0.8),
    ]


@pytest.mark.parametrize("text", ["0.9", "0.9:x", "1.5:128", "0.9:0", "a:b:c"])
def test_a_malformed_profile_point_is_refused(text, capsys):
    with pytest.raises(ValueError):
        parse_point(text)
    assert main([*GRID, "--profile-point", text]) == 2
    assert "--profile-point" in capsys.readouterr().err


def test_a_profile_point_parses_to_acceptance_and_batch():
    assert parse_point("0.9:128") == (0.9, 128)
