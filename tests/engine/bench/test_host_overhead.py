"""The CPU host-overhead benchmark runs the real engine loop and accounts for every microsecond."""

import json

import pytest

from engine.bench import host_overhead


@pytest.mark.parametrize("mode", [("stream", "off"), ("final", "on")])
def test_phases_add_up_to_the_step_time(tmp_path, mode):
    outputs, async_scheduling = mode
    out = tmp_path / "host.json"
    argv = ["--batch", "1", "--batch", "3", "--prompt-len", "40", "--steps", "6", "--vocab", "512"]
    argv += ["--outputs", outputs, "--async-scheduling", async_scheduling, "--json", str(out)]
    assert host_overhead.main(argv) == 0
    results = json.loads(out.read_text())["results"]
    assert [r["batch"] for r in results] == [1, 3]
    for r in results:
        phases = r["phases_us"]
        assert {"schedule", "inputs", "launch", "update", "outputs+other"} <= set(phases)
        assert phases["schedule"] > 0 and phases["inputs"] > 0  # the decode-graph input path ran
        assert sum(phases.values()) == pytest.approx(r["us_per_step"], rel=1e-6)


def test_with_a_draft_length_every_timed_step_verifies_drafts(tmp_path):
    out = tmp_path / "host.json"
    argv = ["--batch", "4", "--prompt-len", "40", "--steps", "6", "--vocab", "512", "--outputs", "final"]
    assert host_overhead.main(argv + ["--draft-len", "0", "--draft-len", "3", "--json", str(out)]) == 0
    plain, verify = json.loads(out.read_text())["results"]
    assert (plain["draft_len"], verify["draft_len"]) == (0, 3)
    assert "verify_steps" not in plain and verify["verify_steps"] == 6
    assert plain["phases_us"].get("speculator", 0.0) == 0.0 < verify["phases_us"]["speculator"]
    for r in (plain, verify):
        assert sum(r["phases_us"].values()) == pytest.approx(r["us_per_step"], rel=1e-6)


def test_the_confidence_scheduler_drafts_at_every_timed_step(tmp_path):
    out = tmp_path / "host.json"
    argv = ["--batch", "4", "--prompt-len", "40", "--steps", "6", "--vocab", "512", "--outputs", "final"]
    argv += ["--draft-len", "3", "--scheduling", "confidence", "--json", str(out)]
    assert host_overhead.main(argv) == 0
    (result,) = json.loads(out.read_text())["results"]
    assert result["scheduling"] == "confidence" and result["verify_steps"] == 6
    assert result["phases_us"]["speculator"] > 0
    assert sum(result["phases_us"].values()) == pytest.approx(result["us_per_step"], rel=1e-6)


def test_bad_arguments_are_refused(capsys):
    with pytest.raises(SystemExit):
        host_overhead.main(["--batch", "0"])
    assert "must be positive" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        host_overhead.main(["--draft-len", "-1"])
    assert "draft lengths must be >= 0" in capsys.readouterr().err
