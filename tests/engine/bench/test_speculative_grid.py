"""``chassis bench speculative --grid`` runs tiny on the CPU: every mode at every point, the goals
checked, and speculative outputs equal to the recorded greedy ones (float32: no near-ties)."""

import json

from chassis.main import main
from engine.bench.speculative_grid import estimate_s, ordered_points

FIELDS = {
    "tokens_per_s", "seconds", "acceptance_rate", "mean_draft_len", "mismatches", "diverged",
    "drafting_steps", "steps_without_drafts",
}  # fmt: skip


def test_the_grid_reports_every_mode_and_goal_with_the_recorded_greedy_outputs(tmp_path, capsys):
    out = tmp_path / "grid.json"
    argv = ["bench", "speculative", "--grid", "--random-arch", "tiny-llama", "--device", "cpu"]
    argv += ["--acceptance", "0.8", "--batch-sizes", "1", "2", "--draft-lengths", "1", "2"]
    argv += ["--max-tokens", "6", "--json", str(out)]
    status = main(argv)
    printed = capsys.readouterr().out
    report = json.loads(out.read_text())
    assert status == (1 if any(g["passed"] is False for g in report["goals"]) else 0)
    assert "s/best" in printed and "s/off" in printed and "NOT RUN" in printed
    assert [(p["acceptance"], p["batch_size"]) for p in report["points"]] == [(0.8, 1), (0.8, 2)]
    for point in report["points"]:
        assert list(point["modes"]) == ["off", "k1", "k2", "scheduler"]
        assert point["best_fixed"] in ("k1", "k2")
        assert point["scheduler_vs_best_fixed"] > 0 and point["scheduler_vs_off"] > 0
        for mode, result in point["modes"].items():
            assert set(result) == FIELDS
            assert result["tokens_per_s"] > 0 and result["mismatches"] == 0 and result["diverged"] == 0
            assert (result["acceptance_rate"] is None) == (mode == "off") or mode == "scheduler"
    assert [g["passed"] is None for g in report["goals"]] == [False, False, True]  # no batch >= 128
    assert report["skipped"] == [] and report["elapsed_s"] > report["build_s"] > 0


def test_the_goals_anchor_points_run_first_and_estimates_err_long():
    points = ordered_points([0.2, 0.5, 0.8, 0.9], [1, 16, 64, 128, 256])
    assert points[:3] == [(0.8, 1), (0.2, 128), (0.5, 128)] and len(set(points)) == 20
    assert points[8] == (0.9, 256) and points[9] == (0.2, 1)
    assert estimate_s({}, 64) == 0.0
    assert estimate_s({1: 2.0, 128: 6.0}, 64) == 6.0  # the nearest larger batch's
    assert estimate_s({1: 2.0, 128: 6.0}, 512) == 12.0  # the largest smaller one's, scaled
    assert estimate_s({1: 2.0}, 128) < 30.0
