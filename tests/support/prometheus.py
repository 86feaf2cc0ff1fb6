"""A real Prometheus server on loopback, scraping given targets every second, and its query API."""

from __future__ import annotations

import math
import subprocess
import time
from pathlib import Path

import httpx
import yaml

from tests.support.ports import free_port
from tests.support.waiting import wait_until


class Prometheus:
    def __init__(self, binary: str, root: Path, targets: list[str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [{"job_name": "replicas", "static_configs": [{"targets": targets}]}],
        }
        root.mkdir(parents=True, exist_ok=True)
        (root / "prometheus.yml").write_text(yaml.safe_dump(config))
        self._log = open(root / "prometheus.log", "wb")
        self._process = subprocess.Popen(
            [
                binary, f"--config.file={root / 'prometheus.yml'}", f"--storage.tsdb.path={root / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn",
            ],
            stdout=self._log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        wait_until(self._ready, f"Prometheus ready on {self.url} (log: {root / 'prometheus.log'})")

    def _ready(self) -> bool:
        if self._process.poll() is not None:
            raise AssertionError(f"prometheus exited with {self._process.returncode}")
        try:
            return httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def query_range(self, expr: str, start: float, end: float | None = None, step: str = "1s") -> list[dict]:
        """The series of ``expr`` over [start, end]; raises on a query Prometheus refuses."""
        params = {"query": expr, "start": start, "end": end or time.time(), "step": step}
        body = httpx.get(f"{self.url}/api/v1/query_range", params=params, timeout=10).json()
        if body.get("status") != "success":
            raise AssertionError(f"Prometheus refused {expr!r}: {body}")
        return body["data"]["result"]

    def stop(self) -> None:
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._log.close()


def has_data(series: list[dict]) -> bool:
    """Whether a query_range result holds at least one number (NaN is what an empty rate gives)."""
    return any(not math.isnan(float(value)) for one in series for _, value in one["values"])
