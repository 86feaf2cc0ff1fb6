"""Every panel of vLLM's published Grafana dashboard has data for a live Chassis replica, read
through a real Prometheus server scraping it (the queries: tests/dashboards/vllm_dashboard.py)."""

from __future__ import annotations

import math
import time

import httpx
import pytest

from tests.dashboards.conftest import MODEL
from tests.dashboards.vllm_dashboard import PANELS
from tests.support.prometheus import Prometheus
from tests.support.waiting import wait_until

RATE_INTERVAL = "15s"  # what Grafana's $__rate_interval would be at least, with a 1 s scrape interval


@pytest.fixture
def prometheus(prometheus_binary, replica, tmp_path):
    server = Prometheus(prometheus_binary, tmp_path / "prometheus", [replica.url.removeprefix("http://")])
    yield server
    server.stop()


def has_data(series: list[dict]) -> bool:
    return any(not math.isnan(float(value)) for one in series for _, value in one["values"])


def test_every_panel_of_vllms_dashboard_has_data(replica, prometheus):
    assert len(PANELS) == 12
    started = time.time()
    wait_until(
        lambda: prometheus.query_range(
            f'up{{instance="{replica.url.removeprefix("http://")}"}} == 1', started
        ),
        "Prometheus scraping the replica",
    )
    with httpx.Client(base_url=replica.url, timeout=60) as client:
        for i in range(4):
            body = {
                "model": MODEL,
                "messages": [{"role": "user", "content": f"Count to five, take {i}."}],
                "max_tokens": 8,
                "min_tokens": 8,
                "stream": i % 2 == 0,
                "n": 1 + i % 2,
            }
            response = client.post("/v1/chat/completions", json=body)
            assert response.status_code == 200, response.text

    for title, exprs in PANELS.items():
        for expr in exprs:
            query = expr.replace("$model_name", MODEL).replace("$__rate_interval", RATE_INTERVAL)
            wait_until(
                lambda query=query: has_data(prometheus.query_range(query, started)),
                f"data for {title!r}: {query}",
            )
