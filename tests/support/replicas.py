"""Start and stop a real ``chassis serve`` process on loopback (CPU, fp32), and read its /metrics."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from engine.executor.supervision import terminate
from tests.support.ports import free_port
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
API_KEY = "test-key"
MODEL = "tiny-qwen3"
MAX_MODEL_LEN = 512
READY_TIMEOUT_S = 120


@dataclass
class Replica:
    base_url: str
    process: subprocess.Popen
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


def start_replica(checkpoint: Path, log_dir: Path, *extra: str, env: dict[str, str] | None = None) -> Replica:
    port = free_port()
    log_path = log_dir / f"serve-{port}.log"
    cmd = [
        sys.executable, "-m", "chassis", "serve", str(checkpoint),
        "--host", "127.0.0.1", "--port", str(port), "--device", "cpu", "--dtype", "float32",
        "--served-model-name", MODEL, "--api-key", API_KEY, "--max-model-len", str(MAX_MODEL_LEN),
        "--replica-id", "replica-test", "--log-level", "warning", *extra,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    with log_path.open("wb") as log:
        process = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env)
    replica = Replica(f"http://127.0.0.1:{port}", process, log_path)

    def healthy() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"chassis serve exited with {process.returncode}:\n{replica.log()}")
        try:
            return httpx.get(f"{replica.base_url}/health", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(healthy, "chassis serve to answer /health", timeout=READY_TIMEOUT_S, poll=0.3)
    except AssertionError as exc:
        stop_replica(replica)
        raise RuntimeError(f"{exc}:\n{replica.log()}") from None
    return replica


def stop_replica(replica: Replica, timeout: float = 30) -> int:
    return terminate(replica.process, timeout)


def scrape(replica: Replica) -> dict[str, float]:
    """The replica's /metrics as sample name (+ ``{finished_reason}`` label when present) -> value."""
    text = httpx.get(replica.base_url + "/metrics").text
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            reason = sample.labels.get("finished_reason")
            values[f"{sample.name}{{{reason}}}" if reason else sample.name] = sample.value
    return values
