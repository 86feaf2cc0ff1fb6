"""A 90 s headless Locust run keeps sending at a steady rate for its whole duration and fails no
request (issue 22: on urllib3-future, which grafana-client's dependencies installed in place of
urllib3, Locust's chat users went quiet after about 30 s); and, read through a real Prometheus
server scraping the replica during that run, every panel of vLLM's published Grafana dashboard has
data (the queries: tests/dashboards/vllm_dashboard.py)."""

from __future__ import annotations

import time

import pytest

from tests.dashboards.vllm_dashboard import PANELS
from tests.loadtests.locust_run import API_KEY, MODEL, run_locust
from tests.support.prometheus import Prometheus, has_data
from tests.support.waiting import wait_until

SECONDS = 90
WINDOW = 10
RATE_INTERVAL = "15s"  # what Grafana's $__rate_interval would be at least, with a 1 s scrape interval


@pytest.fixture
def prometheus(prometheus_binary, replica, tmp_path):
    server = Prometheus(prometheus_binary, tmp_path / "prometheus", [replica.url.removeprefix("http://")])
    yield server
    server.stop()


def completed_by_second(history: list[dict], name: str) -> dict[int, int]:
    """Second -> requests of ``POST name`` finished by then (Locust's full history, ~1 row a second)."""
    counts: dict[int, int] = {}
    for row in history:
        if (row["Type"], row["Name"]) == ("POST", name):
            counts[int(row["Timestamp"])] = int(row["Total Request Count"])
    return counts


def assert_steady(run: dict) -> None:
    started = min(int(row["Timestamp"]) for row in run["history"] if int(row["User Count"]) > 0)
    counts = completed_by_second(run["history"], "chat")
    ended = max(counts)
    assert ended - started >= SECONDS - 5, (started, ended)  # the history covers the whole run

    def finished_by(second: int) -> int:
        return max((n for t, n in counts.items() if t <= second), default=0)

    mean_per_window = finished_by(ended) / (ended - started) * WINDOW
    windows = {t: finished_by(t + WINDOW) - finished_by(t) for t in range(started, ended - WINDOW + 1)}
    slow = {t - started: n for t, n in windows.items() if n < mean_per_window / 2}
    assert not slow, f"10 s windows below half the mean rate ({mean_per_window:.1f}): {slow}"


def assert_every_vllm_panel_has_data(prometheus: Prometheus, started: float) -> None:
    assert len(PANELS) == 12
    for title, exprs in PANELS.items():
        for expr in exprs:
            query = expr.replace("$model_name", MODEL).replace("$__rate_interval", RATE_INTERVAL)
            wait_until(
                lambda query=query: has_data(prometheus.query_range(query, started)),
                f"data for {title!r}: {query}",
            )


@pytest.mark.serial
def test_chat_users_send_at_a_steady_rate_and_every_vllm_panel_has_data(replica, prometheus, tmp_path):
    started = time.time()
    instance = replica.url.removeprefix("http://")
    wait_until(
        lambda: prometheus.query_range(f'up{{instance="{instance}"}} == 1', started),
        "Prometheus scraping the replica",
    )
    env = {"CHASSIS_API_KEY": API_KEY, "CHASSIS_MAX_TOKENS": "8", "CHASSIS_MIN_TOKENS": "8"}
    run = run_locust(
        ["chat_stream.py"], replica.url, tmp_path / "steady", 4, SECONDS, env, "--csv-full-history"
    )
    assert run["result"].returncode == 0, run["result"].stderr[-3000:]
    post = run["rows"][("POST", "chat")]
    assert int(post["Failure Count"]) == 0 and int(post["Request Count"]) > 0, post
    assert_steady(run)
    assert_every_vllm_panel_has_data(prometheus, started)
