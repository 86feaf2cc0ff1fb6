"""ansible-lint on ansible/ with the production profile (its strictest): no finding allowed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_ansible_lint_production_profile_finds_nothing(tmp_path):
    env = {
        **os.environ,
        "ANSIBLE_HOME": str(tmp_path / "ansible-home"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "NO_COLOR": "1",
        "PATH": f"{BIN}:{os.environ['PATH']}",
    }
    result = subprocess.run(
        [str(BIN / "ansible-lint"), "--profile", "production", "--offline", "--strict", "-f", "pep8"],
        cwd=REPO / "ansible", env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 failure(s), 0 warning(s)" in result.stderr + result.stdout
    assert "Profile 'production' was required, and it passed" in result.stderr + result.stdout
