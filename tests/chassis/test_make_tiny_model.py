"""``chassis make-tiny-model --train-steps``: trains after writing, reports the losses, keeps stdout
to the directory."""

from __future__ import annotations

import subprocess
import sys

RUN = [sys.executable, "-m", "chassis", "make-tiny-model"]


def test_train_steps_trains_and_reports_losses(tmp_path):
    out = subprocess.run(
        [*RUN, str(tmp_path / "m"), "--arch", "qwen2", "--train-steps", "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(tmp_path / "m")
    assert "trained 2 steps: train loss" in out.stderr and "held-out loss" in out.stderr


def test_train_steps_is_documented_and_validated(tmp_path):
    help_text = subprocess.run([*RUN, "--help"], capture_output=True, text=True, check=True).stdout
    assert "--train-steps" in help_text
    bad = subprocess.run([*RUN, str(tmp_path / "x"), "--train-steps", "-1"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--train-steps must be >= 0" in bad.stderr
    assert not (tmp_path / "x").exists()
