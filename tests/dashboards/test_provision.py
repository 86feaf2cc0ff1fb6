"""``chassis dashboards provision`` against a Grafana HTTP API on loopback.

A real Grafana cannot run here, so a real HTTP server implementing the Grafana endpoints that
provisioning uses (tests/support/fake_grafana.py) stands in for it and records every call.
The CLI runs as a real process and talks to it over httpx.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from dashboards.catalog import all_dashboards
from dashboards.panels import DATASOURCE_UID
from tests.support.fake_grafana import FakeGrafana

TOKEN = "glsa_test_token"
PROMETHEUS = "http://prometheus.example:9090"


@pytest.fixture
def grafana():
    server = FakeGrafana(TOKEN).start()
    yield server
    server.stop()


def provision(
    grafana_url: str, token: str = TOKEN, prometheus: str = PROMETHEUS
) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable, "-m", "chassis", "dashboards", "provision",
        "--grafana", grafana_url, "--token", token, "--prometheus-url", prometheus, "--timeout", "5",
    ]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_first_run_creates_second_run_changes_nothing(grafana):
    first = provision(grafana.url)
    assert first.returncode == 0, first.stderr
    assert "datasource chassis-prometheus: created" in first.stdout
    assert "dashboard chassis-engine: created" in first.stdout
    assert grafana.datasources[DATASOURCE_UID]["url"] == PROMETHEUS
    assert sorted(grafana.dashboards) == sorted(b["uid"] for b in all_dashboards())
    assert all(d["folderUid"] == "chassis" for d in grafana.dashboards.values())
    # What Grafana stores is exactly what we define (plus Grafana's own id and version).
    for board in all_dashboards():
        stored = dict(grafana.dashboards[board["uid"]]["dashboard"])
        assert stored.pop("version") == 1 and stored.pop("id")
        assert stored == board

    writes_after_first = len(grafana.writes())
    second = provision(grafana.url)
    assert second.returncode == 0, second.stderr
    assert second.stdout.count(": unchanged") == 2 + len(all_dashboards()), second.stdout
    assert len(grafana.writes()) == writes_after_first  # read-only second run
    assert len(grafana.datasources) == 1 and len(grafana.folders) == 1
    assert all(d["dashboard"]["version"] == 1 for d in grafana.dashboards.values())


def test_drift_is_overwritten_in_place(grafana):
    assert provision(grafana.url).returncode == 0
    # Someone edits a dashboard in the UI and points the data source elsewhere.
    grafana.dashboards["chassis-engine"]["dashboard"]["title"] = "edited by hand"
    grafana.datasources[DATASOURCE_UID]["url"] = "http://old:9090"

    again = provision(grafana.url)
    assert again.returncode == 0, again.stderr
    assert "dashboard chassis-engine: updated" in again.stdout
    assert "dashboard chassis-gateway: unchanged" in again.stdout
    assert "datasource chassis-prometheus: updated" in again.stdout
    stored = grafana.dashboards["chassis-engine"]["dashboard"]
    assert stored["title"] == "Chassis engine" and stored["version"] == 2
    assert grafana.datasources[DATASOURCE_UID]["url"] == PROMETHEUS
    assert len(grafana.dashboards) == len(all_dashboards()) and len(grafana.datasources) == 1
    assert ("PUT", f"/api/datasources/uid/{DATASOURCE_UID}") in grafana.calls


def test_wrong_token_is_a_clear_error(grafana):
    result = provision(grafana.url, token="wrong")
    assert result.returncode == 1
    assert "refused the token (401)" in result.stderr
    assert not grafana.dashboards and not grafana.datasources


def test_unreachable_grafana_and_bad_urls(grafana):
    url = grafana.url
    grafana.stop()
    result = provision(url)
    assert result.returncode == 1 and "Grafana at" in result.stderr
    assert provision("not-a-url").returncode == 2
    assert provision(url, prometheus="ftp://x").returncode == 2
