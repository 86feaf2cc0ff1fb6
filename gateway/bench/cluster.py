"""Real processes for routing benchmarks and end-to-end tests: N ``chassis serve`` replicas of one
checkpoint and one ``chassis gateway`` in front of them, on free loopback ports."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _chassis(*args: str) -> list[str]:
    return [sys.executable, "-m", "chassis.main", *args]


@dataclass
class Process:
    name: str
    argv: list[str]
    port: int
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    popen: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Process:
        log = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the process
        env = dict(os.environ, PYTHONUNBUFFERED="1", **self.env)
        self.popen = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()
        return self

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL: the abrupt death the resilience tests need."""
        if self.alive():
            self.popen.kill()
            self.popen.wait(timeout=10)

    def terminate(self) -> None:
        """SIGTERM without waiting (a second one would cut the drain short): ``reap`` waits."""
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)

    def reap(self, timeout: float = 10.0) -> None:
        """Wait for the exit, SIGKILL after ``timeout``."""
        if self.popen is None:
            return
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout=10)

    def stop(self, timeout: float = 10.0) -> None:
        self.terminate()
        self.reap(timeout)

    def wait_ready(self, path: str, deadline: float) -> None:
        last = "no answer"
        while time.monotonic() < deadline:
            if not self.alive():
                tail = self.log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{self.name} exited with {self.popen.returncode}:\n{tail}")
            try:
                response = httpx.get(f"{self.url}{path}", timeout=2.0)
                if response.status_code == 200:
                    return
                last = f"HTTP {response.status_code}"
            except httpx.HTTPError as exc:
                last = repr(exc)
            time.sleep(0.2)
        raise TimeoutError(f"{self.name} not ready at {self.url}{path}: {last}")


@dataclass
class Cluster:
    model_dir: Path
    workdir: Path
    model_name: str = "tiny"
    policy: dict | str = "cache_aware"
    serve_args: list[str] = field(default_factory=list)
    gateway_settings: dict = field(default_factory=dict)
    replicas: list[Process] = field(default_factory=list)
    gateway: Process | None = None
    expected_replicas: int = 1
    # Replica i's role (gateway/disaggregation.py), mixed beyond the list; prefill and decode
    # replicas share one KV directory under workdir, through which the KV moves.
    roles: tuple[str, ...] = ()
    # Extra environment of replica i (a step gate of its own, for instance).
    replica_env: dict[int, dict[str, str]] = field(default_factory=dict)
    # Extra ``chassis serve`` arguments of replica i (a KV disk directory of its own, say).
    replica_args: dict[int, list[str]] = field(default_factory=dict)

    def role(self, i: int) -> str:
        return self.roles[i] if i < len(self.roles) else "mixed"

    def replica_process(self, i: int, port: int | None = None) -> Process:
        port = port or free_port()
        argv = _chassis(
            "serve",
            str(self.model_dir),
            "--host", "127.0.0.1",
            "--port", str(port),
            "--device", "cpu",
            "--dtype", "float32",
            "--served-model-name", self.model_name,
            "--replica-id", f"r{i}",
            "--log-level", "warning",
            *self.serve_args,
            *self.replica_args.get(i, []),
            *self.role_args(i),
        )  # fmt: skip
        # One share of the cores each: torch's default of one thread per core in every replica
        # oversubscribes the machine, and spinning OpenMP threads steal time from the other replicas.
        threads = max(1, (os.cpu_count() or 1) // max(1, self.expected_replicas))
        env = {"OMP_NUM_THREADS": str(threads), **self.replica_env.get(i, {})}
        return Process(f"replica r{i}", argv, port, self.workdir / f"replica-r{i}.log", env)

    def role_args(self, i: int) -> list[str]:
        if self.role(i) == "mixed":
            return []
        return ["--kv-role", self.role(i), "--kv-shared-cache-dir", str(self.workdir / "shared-kv")]

    def start(self, replicas: int, timeout: float = 180.0) -> Cluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.expected_replicas = replicas
        self.replicas = [self.replica_process(i).start() for i in range(replicas)]
        deadline = time.monotonic() + timeout
        for replica in self.replicas:
            replica.wait_ready("/health", deadline)
        config = {
            "models": {
                self.model_name: {
                    "policy": self.policy,
                    "tokenizer": str(self.model_dir),
                    "replicas": [
                        {"url": r.url, "id": f"r{i}", "role": self.role(i)}
                        for i, r in enumerate(self.replicas)
                    ],
                }
            },
            **self.gateway_settings,
        }
        config_path = self.workdir / "gateway.json"
        config_path.write_text(json.dumps(config, indent=2))
        port = free_port()
        argv = _chassis(
            "gateway", "--port", str(port), "--config", str(config_path), "--log-level", "warning"
        )
        self.gateway = Process("gateway", argv, port, self.workdir / "gateway.log").start()
        self.gateway.wait_ready("/health", deadline)
        return self

    def restart_replica(self, i: int, timeout: float = 120.0) -> Process:
        old = self.replicas[i]
        old.stop()
        self.replicas[i] = self.replica_process(i, port=old.port).start()
        self.replicas[i].wait_ready("/health", time.monotonic() + timeout)
        return self.replicas[i]

    def restart_replicas(self, stop_timeout: float = 60.0, timeout: float = 180.0) -> None:
        """Every replica as an operator restarts them: SIGTERM to all, wait for each to exit (its
        engine writes its cached KV to the durable tiers first; SIGKILL after ``stop_timeout``), then
        relaunch each on its port with the same arguments and wait until all are ready."""
        for replica in self.replicas:
            replica.terminate()
        for replica in self.replicas:
            replica.reap(stop_timeout)
        self.replicas = [self.replica_process(i, port=r.port).start() for i, r in enumerate(self.replicas)]
        deadline = time.monotonic() + timeout
        for replica in self.replicas:
            replica.wait_ready("/health", deadline)
        self.wait_routable(deadline)

    def wait_routable(self, deadline: float) -> None:
        """Until the gateway routes to every replica again: its health checks ejected the ones that
        went away and re-admit them only after checks pass (a request before then finds none)."""
        if self.gateway is None:
            return
        while True:
            try:
                routable = httpx.get(f"{self.gateway.url}/health", timeout=5).json().get("routable", 0)
            except (httpx.HTTPError, ValueError):
                routable = 0
            if routable >= len(self.replicas):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the gateway routes to {routable} of {len(self.replicas)} replicas")
            time.sleep(0.2)

    def stop(self) -> None:
        """Every process drains at once, then each is waited for (each alone would add its drain)."""
        processes = [p for p in (self.gateway, *self.replicas) if p is not None]
        for process in processes:
            process.terminate()
        for process in processes:
            process.reap()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


@contextmanager
def cpu_replica(
    model_dir: str | Path, served_model_name: str, log_dir: Path, *extra_args: str, timeout: float = 120.0
) -> Iterator[Process]:
    """One ready ``chassis serve`` of ``model_dir`` on CPU (float32) at a free port, stopped on exit."""
    port = free_port()
    process = Process(
        "replica",
        _chassis(
            "serve", str(model_dir), "--port", str(port), "--device", "cpu", "--dtype", "float32",
            "--served-model-name", served_model_name, "--log-level", "warning", *extra_args,
        ),
        port,
        Path(log_dir) / "serve.log",
    )  # fmt: skip
    process.start()
    try:
        process.wait_ready("/health", time.monotonic() + timeout)
        yield process
    finally:
        process.stop()
