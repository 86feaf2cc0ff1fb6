"""Run Locust headless as a real process and read its CSV statistics."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

MODEL = "tiny-load"  # the test replica's served model name and API key
API_KEY = "load-key"
LOADTESTS = Path(__file__).resolve().parents[2] / "loadtests"


def run_locust(
    files: list[str], host: str, out: Path, users: int, seconds: int, env: dict[str, str], *extra: str
) -> dict:
    """``locust --headless``; returns {(type, name): row of <out>_stats.csv} and the process result;
    with ``--csv-full-history`` in ``extra``, also "history": the rows of <out>_stats_history.csv."""
    cmd = [
        sys.executable, "-m", "locust", "-f", ",".join(str(LOADTESTS / f) for f in files),
        "--headless", "-u", str(users), "-r", str(users), "-t", f"{seconds}s", "--host", host,
        "--csv", str(out), "--only-summary", "--stop-timeout", "10", "--loglevel", "WARNING", *extra,
    ]  # fmt: skip
    result = subprocess.run(
        cmd, capture_output=True, text=True, timeout=seconds + 60, env={**os.environ, **env}, cwd=out.parent
    )
    stats_path = Path(f"{out}_stats.csv")
    assert stats_path.exists(), f"locust wrote no CSV (rc {result.returncode}):\n{result.stderr[-3000:]}"
    with stats_path.open(newline="") as handle:
        rows = {(row["Type"], row["Name"]): row for row in csv.DictReader(handle)}
    found = {"rows": rows, "result": result}
    history_path = Path(f"{out}_stats_history.csv")
    if history_path.exists():
        with history_path.open(newline="") as handle:
            found["history"] = list(csv.DictReader(handle))
    return found
