"""Benchmark clients that live in their own venvs (``make client-venvs``), and the engine's own time
to first token, which what they report must not undercut."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.replicas import REPO, Replica, scrape

TOOL_TIMEOUT_S = 600  # only bounds a hung tool; a short run takes well under a minute of its own


def tool(name: str) -> Path:
    """``.venv-<name>/bin/<name>``; a test fails (never skips) when ``make client-venvs`` has not built it."""
    path = REPO / f".venv-{name}" / "bin" / name
    if not path.exists():
        pytest.fail(f"{path} is missing: `make client-venvs` builds it from requirements-{name}.lock")
    return path


def run_tool(argv: list[str | Path], cwd: Path, **env: str) -> str:
    """Run a client to completion; its combined output, or a test failure that shows it."""
    result = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env={**os.environ, **env}, capture_output=True, text=True,
        timeout=TOOL_TIMEOUT_S,
    )  # fmt: skip
    output = result.stdout + result.stderr
    if result.returncode != 0:
        pytest.fail(f"{argv[0]} exited with {result.returncode}:\n{output[-6000:]}")
    return output


def engine_ttft(replica: Replica) -> tuple[float, int]:
    """The replica's own time to first token so far, arrival to first sampled token: (sum in seconds,
    request count), from ``vllm:time_to_first_token_seconds`` on its /metrics."""
    metrics = scrape(replica)
    name = "vllm:time_to_first_token_seconds"
    return metrics[f"{name}_sum"], int(metrics[f"{name}_count"])
