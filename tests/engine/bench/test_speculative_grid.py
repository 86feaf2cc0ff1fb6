"""``chassis bench speculative --grid`` runs tiny on the CPU: every mode at every point, the goals
checked, drafts at every step of a fixed length accepted at the forced rate; an engine built
normally has no forced acceptance."""

import argparse
import json

from chassis.main import main
from engine.bench.speculative_grid import estimate_s, ordered_points

FIELDS = {
    "tokens_per_s", "seconds", "acceptance_rate", "position_acceptance", "mean_draft_len",
    "drafted_tokens", "accepted_tokens", "decided_tokens", "drafting_steps", "steps_without_drafts",
    "verify_steps", "graphed_verify_steps", "output_tokens", "rounds", "speculator_seconds", "gc_seconds",
    "gc_full_collections", "gc_full_seconds", "steps",
}  # fmt: skip


GRID = ["bench", "speculative", "--grid", "--random-arch", "tiny-llama", "--device", "cpu"]


def _one_point(tmp_path, *options: str) -> dict:
    """The tiny grid at acceptance 0.6, batch 2, draft length 2 with ``options``; its JSON report."""
    out = tmp_path / "grid.json"
    point = ["--acceptance", "0.6", "--batch-sizes", "2", "--draft-lengths", "2"]
    main([*GRID, *point, *options, "--json", str(out)])
    return json.loads(out.read_text())


def test_the_grid_drafts_every_step_and_accepts_at_the_forced_rate(tmp_path, capsys):
    out = tmp_path / "grid.json"
    argv = ["bench", "speculative", "--grid", "--random-arch", "tiny-llama", "--device", "cpu"]
    argv += ["--acceptance", "0.6", "--batch-sizes", "1", "2", "--draft-lengths", "1", "3"]
    argv += ["--max-tokens", "8", "--json", str(out)]
    status = main(argv)
    printed = capsys.readouterr().out
    report = json.loads(out.read_text())
    assert status == (1 if any(g["passed"] is False for g in report["goals"]) else 0)
    assert "s/best" in printed and "s.nodraft" in printed and "graphed" in printed and "NOT RUN" in printed
    assert [(p["acceptance"], p["batch_size"]) for p in report["points"]] == [(0.6, 1), (0.6, 2)]
    for point in report["points"]:
        assert list(point["modes"]) == ["off", "k1", "k3", "scheduler"]
        assert point["best_fixed"] in ("k1", "k3")
        assert point["scheduler_vs_best_fixed"] > 0 and point["scheduler_vs_off"] > 0
        for mode, result in point["modes"].items():
            assert set(result) == FIELDS and result["tokens_per_s"] > 0
            if mode == "off":
                assert result["drafted_tokens"] == 0 and result["acceptance_rate"] is None
            elif mode.startswith("k"):
                assert result["drafting_steps"] > 0 and result["steps_without_drafts"] == 0
                assert result["accepted_tokens"] <= result["decided_tokens"] <= result["drafted_tokens"]
                assert result["decided_tokens"] > 0
                assert result["verify_steps"] > 0 and result["graphed_verify_steps"] == 0  # no graphs on CPU
                assert 0 < result["speculator_seconds"] < result["seconds"]
            assert 0 <= result["gc_seconds"] < result["seconds"]
            assert result["steps"] is None  # traced with --trace-steps only
        k1 = point["modes"]["k1"]  # one position per draft: accepted / drafted is p itself
        assert k1["decided_tokens"] == k1["drafted_tokens"]
    assert [g["passed"] is None for g in report["goals"]] == [False, True, True]  # no batch >= 128
    assert report["skipped"] == [] and report["elapsed_s"] > report["build_s"] > 0


def test_forced_acceptance_holds_per_position_whatever_the_model_says(tiny_llama):
    from engine import LLM
    from engine.bench.speculative_grid import GridRunner, random_prompts

    args = argparse.Namespace(draft_lengths=[3], seed=0, oracle_confidence="calibrated", max_tokens=16)
    llm = LLM(str(tiny_llama), device="cpu", dtype="float32", max_num_seqs=64, max_model_len=192)
    try:
        runner = GridRunner(llm, args)
        result = runner.run("k3", random_prompts(64, runner.vocab_size, seed=1), 0.6)
        assert llm.engine.runner.acceptance_override is None  # removed after the run
    finally:
        llm.shutdown()
    assert result.steps_without_drafts == 0 and result.drafting_steps > 0
    assert result.decided_tokens > 800
    assert abs(result.position_acceptance - 0.6) < 0.05, result


def test_an_engine_built_normally_has_no_forced_acceptance(tiny_llama):
    from engine import LLM

    llm = LLM(str(tiny_llama), device="cpu", max_model_len=64, speculative_method="ngram")
    try:
        assert llm.engine.runner.acceptance_override is None
    finally:
        llm.shutdown()


def test_the_goals_anchor_points_run_first_and_estimates_err_long():
    points = ordered_points([0.2, 0.5, 0.8, 0.9], [1, 16, 64, 128, 256])
    assert points[:3] == [(0.8, 1), (0.2, 128), (0.5, 128)] and len(set(points)) == 20
    assert points[8] == (0.9, 256) and points[9] == (0.2, 1)
    assert estimate_s({}, 64) == 0.0
    assert estimate_s({1: 2.0, 128: 6.0}, 64) == 6.0  # the nearest larger batch's
    assert estimate_s({1: 2.0, 128: 6.0}, 512) == 12.0  # the largest smaller one's, scaled
    assert estimate_s({1: 2.0}, 128) < 30.0


def test_rounds_alternate_the_modes_and_pool_them(tmp_path, capsys):
    (point,) = _one_point(tmp_path, "--max-tokens", "8", "--rounds", "3")["points"]
    assert "pooled over 3 alternating round(s)" in capsys.readouterr().out
    for result in point["modes"].values():
        assert result["rounds"] == 3 and result["output_tokens"] == 3 * 2 * 8
        assert result["tokens_per_s"] == result["output_tokens"] / result["seconds"]
    k2 = point["modes"]["k2"]
    assert k2["acceptance_rate"] == k2["accepted_tokens"] / k2["drafted_tokens"]
    assert k2["position_acceptance"] == k2["accepted_tokens"] / k2["decided_tokens"]


def test_min_seconds_adds_rounds_up_to_four_times_rounds(tmp_path, capsys):
    """A minimum no tiny run reaches: each mode runs 4 x --rounds rounds, pooled; the text says so."""
    report = _one_point(tmp_path, "--max-tokens", "4", "--rounds", "1", "--min-seconds", "3600")
    assert "(more, up to 4, until each mode ran 3600 s)" in capsys.readouterr().out
    assert report["min_seconds"] == 3600
    (point,) = report["points"]
    for result in point["modes"].values():
        assert result["rounds"] == 4 and result["output_tokens"] == 4 * 2 * 4


def test_a_negative_min_seconds_is_refused(capsys):
    assert main([*GRID, "--min-seconds", "-1"]) == 2
    assert "--min-seconds must be >= 0" in capsys.readouterr().err


def test_trace_steps_records_every_step_with_its_prediction(tmp_path):
    from engine.bench.grid_trace import summarize

    report = _one_point(tmp_path, "--max-tokens", "8", "--rounds", "2", "--trace-steps")
    (point,) = report["points"]
    assert "no trace" not in summarize(report) and "k2         plain" in summarize(report)
    for mode, result in point["modes"].items():
        steps = result["steps"]
        assert steps and all(len(step) == 5 for step in steps)
        drafted = sum(step[1] for step in steps)
        assert drafted == result["drafted_tokens"]
        assert all(step[0] >= step[2] >= 1 and step[3] > 0 for step in steps)
        if mode == "k2":  # by then the shared models have priced steps of these sizes
            assert any(step[4] is not None for step in steps)


def test_waves_run_each_batch_at_its_concurrency(tmp_path, capsys, monkeypatch):
    """--waves 3 at batch 2: six requests a mode, never more than two running; the engine's own
    limit is back afterwards."""
    from engine.scheduler.scheduler import Scheduler

    running = []
    schedule = Scheduler.schedule
    monkeypatch.setattr(
        Scheduler, "schedule", lambda self: running.append(len(self.running)) or schedule(self)
    )
    report = _one_point(tmp_path, "--max-tokens", "6", "--waves", "3")
    assert "3 waves of each batch's requests at that concurrency" in capsys.readouterr().out
    assert report["waves"] == 3
    (point,) = report["points"]
    for result in point["modes"].values():
        assert result["output_tokens"] == 3 * 2 * 6
    assert max(running) == 2  # the warm-up (one wave) and every timed run alike


def test_rounds_and_waves_below_one_are_refused(capsys):
    assert main([*GRID, "--waves", "0"]) == 2
    assert "--rounds and --waves must be >= 1" in capsys.readouterr().err


def test_pooled_rounds_sum_tokens_seconds_and_counts():
    from engine.bench.speculative_grid import ModeResult, pooled

    a = ModeResult(10.0, 2.0, 20, drafted_tokens=6, accepted_tokens=3, decided_tokens=5, mean_draft_len=2.0)
    a.acceptance_rate = 0.5
    b = ModeResult(30.0, 1.0, 30, drafted_tokens=9, accepted_tokens=6, decided_tokens=8, mean_draft_len=3.0)
    b.acceptance_rate = 6 / 9
    total = pooled([a, b])
    assert (total.output_tokens, total.seconds, total.tokens_per_s, total.rounds) == (50, 3.0, 50 / 3.0, 2)
    assert (total.drafted_tokens, total.accepted_tokens, total.decided_tokens) == (15, 9, 13)
    assert total.acceptance_rate == 9 / 15 and total.position_acceptance == 9 / 13
    assert total.mean_draft_len == 15 / 6  # 3 drafts of 2 and 3 of 3
    off = pooled([ModeResult(5.0, 1.0, 5), ModeResult(5.0, 1.0, 5)])
    assert off.acceptance_rate is None and off.mean_draft_len is None and off.drafted_tokens == 0


def test_mode_off_drafts_nothing_but_feeds_the_shared_plain_step_model(tiny_llama):
    from engine import LLM
    from engine.bench.speculative_grid import GridRunner, random_prompts

    args = argparse.Namespace(draft_lengths=[3], seed=0, oracle_confidence="calibrated", max_tokens=8)
    llm = LLM(str(tiny_llama), device="cpu", dtype="float32", max_num_seqs=4, max_model_len=192)
    try:
        runner = GridRunner(llm, args)
        result = runner.run("off", random_prompts(4, runner.vocab_size, seed=1), 0.6)
        assert llm.engine.speculator is None  # removed after the run
    finally:
        llm.shutdown()
    assert result.drafted_tokens == 0 and result.acceptance_rate is None and result.drafting_steps == 0
    verify, plain, eager = runner.models
    assert plain.steps > 0 and verify.steps == eager.steps == 0


def test_gc_pauses_count_the_collections_inside_the_block_only():
    import gc

    from engine.bench.speculative_grid import GcPauses

    with GcPauses() as pauses:
        gc.collect()
        gc.collect(0)
    inside = pauses.seconds
    gc.collect()
    assert inside > 0 and pauses.seconds == inside and pauses._callback not in gc.callbacks
    assert pauses.collections == [1, 0, 1] and 0 < pauses.full_seconds < inside


def test_every_timed_run_starts_after_the_deferred_full_collection(tmp_path, monkeypatch):
    """As a serving drive loop collects before it waits for work, the grid collects before each
    run, so the 30 s overdue collection never lands inside a mode's timed run."""
    from engine.bench import speculative, speculative_grid

    events = []
    collect, measure = speculative_grid.collect_when_idle, speculative.measure
    monkeypatch.setattr(speculative_grid, "collect_when_idle", lambda: events.append("collect") or collect())
    monkeypatch.setattr(speculative, "measure", lambda *a, **k: events.append("measure") or measure(*a, **k))
    argv = ["bench", "speculative", "--grid", "--random-arch", "tiny-llama", "--device", "cpu"]
    argv += ["--acceptance", "0.6", "--batch-sizes", "1", "--draft-lengths", "1"]
    argv += ["--max-tokens", "4", "--json", str(tmp_path / "grid.json")]
    main(argv)
    timed = [i for i, event in enumerate(events) if event == "measure"]
    assert len(timed) >= 3  # off, k1, scheduler (and any untimed warm-up run)
    assert all(events[i - 1] == "collect" for i in timed)
