"""`chassis up` on embedded defaults (SQLite, filesystem broker) brings the control plane up."""

import os
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_up_on_embedded_defaults_is_healthy_and_worker_answers(tmp_path):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"}
    }
    env["CHASSIS_VAR_DIR"] = str(tmp_path / "var")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "engine.cli",
            "up",
            "--exit-when-ready",
            "--no-beat",
            "--port",
            str(_free_port()),
            "--worker-concurrency",
            "1",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "database sqlite reachable, broker filesystem reachable" in result.stdout
    assert "Celery worker(s) answered ping" in result.stdout
    assert (tmp_path / "var" / "chassis.sqlite3").exists()
