"""``chassis bench speculative --grid`` runs tiny on the CPU: every mode at every point, the goals
checked, and speculative outputs equal to the recorded greedy ones (float32: no near-ties)."""

import json

from chassis.main import main

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
