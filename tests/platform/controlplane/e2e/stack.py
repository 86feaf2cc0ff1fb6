"""The real moving parts for end-to-end tests: a control-plane Celery worker, Celery beat and a node
agent, as subprocesses on the pytest-django test database and a real Redis broker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]


def database_url(settings_dict: dict) -> str:
    user = settings_dict.get("USER") or ""
    password = f":{settings_dict['PASSWORD']}" if settings_dict.get("PASSWORD") else ""
    auth = f"{user}{password}@" if user else ""
    return f"postgres://{auth}{settings_dict.get('HOST') or '127.0.0.1'}:{settings_dict.get('PORT') or 5432}/{settings_dict['NAME']}"


class Stack:
    def __init__(self, var_dir: Path, db_url: str, broker_url: str) -> None:
        tag = uuid.uuid4().hex[:6]
        self.node = f"e2e-{tag}"
        self.queue = f"controlplane-{tag}"
        self.var_dir = var_dir
        self.env = {
            **os.environ,
            "DATABASE_URL": db_url,
            "CELERY_BROKER_URL": broker_url,
            "CELERY_RESULT_BACKEND": broker_url,
            "CELERY_TASK_DEFAULT_QUEUE": self.queue,
            "CHASSIS_VAR_DIR": str(var_dir),
            "CHASSIS_RECONCILE_INTERVAL_S": "1",
            "CHASSIS_SCRAPE_INTERVAL_S": "1",
            "CHASSIS_HEARTBEAT_CHECK_INTERVAL_S": "2",
            "CHASSIS_RELAUNCH_BACKOFF_S": "1",
            "CHASSIS_LAUNCH_GRACE_S": "5",
            "CHASSIS_SCHEDULED_STALE_S": "5",
            "PYTHONUNBUFFERED": "1",
        }
        self.processes: dict[str, subprocess.Popen] = {}

    def _start(self, name: str, argv: list[str]) -> None:
        log = open(self.var_dir / f"{name}.log", "ab")
        self.processes[name] = subprocess.Popen(
            argv, cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def start_worker(self) -> None:
        self._start("worker", [sys.executable, "-m", "celery", "-A", "controlplane", "worker", "-Q", self.queue,
                               "-n", f"{self.queue}@%h", "--pool", "threads", "-c", "2", "-l", "info",
                               "--without-gossip", "--without-mingle"])  # fmt: skip

    def start_beat(self) -> None:
        self._start("beat", [sys.executable, "-m", "celery", "-A", "controlplane", "beat", "-l", "info",
                             "-s", str(self.var_dir / "beat-schedule"), "--pidfile", str(self.var_dir / "beat.pid")])  # fmt: skip

    def start_agent(self) -> None:
        self._start(
            "agent", [sys.executable, "-m", "chassis", "agent", "--node", self.node, "--heartbeat", "1"]
        )

    def start_all(self) -> None:
        self.start_worker()
        self.start_beat()
        self.start_agent()

    def kill(self, name: str) -> None:
        """SIGKILL, as a crash or a power cut would: no cleanup runs."""
        process = self.processes.pop(name)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)

    def stop_all(self) -> None:
        for process in list(self.processes.values()):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for name, process in list(self.processes.items()):
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(5)
            self.processes.pop(name)

    def logs(self) -> str:
        return "\n".join(
            f"===== {path.name}\n{path.read_text(errors='replace')[-4000:]}"
            for path in sorted(self.var_dir.glob("*.log"))
        )
