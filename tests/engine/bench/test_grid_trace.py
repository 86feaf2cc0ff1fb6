"""``python -m engine.bench.grid_trace``: a traced grid's steps by kind, against the policy's
predictions, and the drain share of each mode's step time."""

import json

from engine.bench.grid_trace import main, mode_summary


def test_steps_split_into_plain_verify_and_drain():
    steps = [  # tokens, drafts, requests, wall ms, predicted ms
        [4, 0, 4, 2.0, None],
        [4, 0, 4, 2.0, 1.0],
        [12, 8, 4, 6.0, 3.0],
        [3, 2, 1, 2.0, None],  # one request left of four: the drain
    ]
    s = mode_summary(steps, batch_size=4)
    assert (s["plain"].steps, s["plain"].wall_ms, s["plain"].predicted_steps) == (2, 4.0, 1)
    assert (s["verify"].steps, s["verify"].wall_ms) == (2, 8.0)
    assert s["verify"].describe() == "2 x 4.00 ms (predicted 3.00, wall/pred 2.00)"
    assert s["drain_share"] == 2.0 / 12.0


def test_a_traced_grid_report_is_summarized(tmp_path, capsys):
    report = {
        "points": [
            {
                "acceptance": 0.8,
                "batch_size": 2,
                "modes": {"off": {"steps": [[2, 0, 2, 1.5, None]]}, "k1": {"steps": None}},
            }
        ]
    }
    path = tmp_path / "grid.json"
    path.write_text(json.dumps(report))
    assert main([str(path)]) == 0
    printed = capsys.readouterr().out
    assert "acceptance 0.8, batch 2" in printed
    assert "off        plain 1 x 1.50 ms; verify -; drain 0 % of step time" in printed
    assert "k1         no trace" in printed


def test_an_unreadable_report_is_a_clear_error(tmp_path, capsys):
    assert main([str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
