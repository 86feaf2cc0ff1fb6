"""Start and stop a real ``chassis serve`` process on loopback (CPU, fp32), for the server tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[3]
API_KEY = "test-key"
MODEL = "tiny-qwen3"
MAX_MODEL_LEN = 512


@dataclass
class Replica:
    base_url: str
    process: subprocess.Popen
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_replica(checkpoint: Path, log_dir: Path, *extra: str) -> Replica:
    port = free_port()
    log_path = log_dir / f"serve-{port}.log"
    cmd = [
        sys.executable, "-m", "chassis", "serve", str(checkpoint),
        "--host", "127.0.0.1", "--port", str(port), "--device", "cpu", "--dtype", "float32",
        "--served-model-name", MODEL, "--api-key", API_KEY, "--max-model-len", str(MAX_MODEL_LEN),
        "--replica-id", "replica-test", "--log-level", "warning", *extra,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log_path.open("wb") as log:
        process = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env)
    replica = Replica(f"http://127.0.0.1:{port}", process, log_path)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"chassis serve exited with {process.returncode}:\n{replica.log()}")
        try:
            if httpx.get(f"{replica.base_url}/health", timeout=2).status_code == 200:
                return replica
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    stop_replica(replica)
    raise RuntimeError(f"chassis serve did not become ready in 120 s:\n{replica.log()}")


def stop_replica(replica: Replica, timeout: float = 30) -> int:
    if replica.process.poll() is None:
        replica.process.send_signal(signal.SIGTERM)
        try:
            replica.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            replica.process.kill()
            replica.process.wait()
    return replica.process.returncode
