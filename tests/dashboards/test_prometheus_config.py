"""dashboards/prometheus: the scrape config and rules, by structure and by promtool.

promtool comes from Debian's ``prometheus`` package; scripts/install-system-tools.sh (run by
``make test``) installs just that binary.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

PROMETHEUS_DIR = Path(__file__).resolve().parents[2] / "dashboards" / "prometheus"


def config() -> dict:
    return yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())


def test_scrape_jobs_cover_replicas_gateway_and_control_plane():
    jobs = {job["job_name"]: job for job in config()["scrape_configs"]}
    assert {"chassis-replicas", "chassis-gateway", "chassis-control-plane"} <= set(jobs)
    assert jobs["chassis-replicas"]["file_sd_configs"][0]["files"] == ["targets/replicas.json"]
    assert jobs["chassis-gateway"]["file_sd_configs"][0]["files"] == ["targets/gateways.json"]
    probe = jobs["chassis-control-plane"]
    assert probe["metrics_path"] == "/probe" and probe["params"] == {"module": ["http_2xx"]}
    assert probe["file_sd_configs"][0]["files"] == ["targets/control-plane.json"]
    # The target URL becomes the probe's ?target=, and the scrape goes to the blackbox exporter.
    assert {"source_labels": ["__address__"], "target_label": "__param_target"} in probe["relabel_configs"]
    # The control plane's /metrics (benchmark verdicts) is scraped from the same target file.
    metrics = jobs["chassis-control-plane-metrics"]
    assert metrics["metrics_path"] == "/metrics"
    assert metrics["file_sd_configs"][0]["files"] == ["targets/control-plane.json"]


def test_rule_files_exist_and_alerts_are_well_formed():
    files = config()["rule_files"]
    assert files and all((PROMETHEUS_DIR / f).is_file() for f in files)
    alerts = {}
    for f in files:
        for group in yaml.safe_load((PROMETHEUS_DIR / f).read_text())["groups"]:
            assert group["name"] and group["rules"]
            for rule in group["rules"]:
                assert ("record" in rule) != ("alert" in rule) and rule["expr"]
                if "alert" in rule:
                    alerts[rule["alert"]] = rule
    assert {
        "ChassisTTFTP99High",
        "ChassisKVCacheUsageHigh",
        "ChassisReplicaDown",
        "ChassisBenchmarkRegression",
    } <= set(alerts)
    for rule in alerts.values():
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}
        assert rule["annotations"]["summary"]


def test_promtool_accepts_the_config_and_rules(promtool):
    result = subprocess.run(
        [promtool, "check", "config", "prometheus.yml"], cwd=PROMETHEUS_DIR, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 rule files found" in result.stdout


def test_alert_rules_fire_on_the_series_they_are_for(promtool):
    """Rule unit tests (rules/tests/*.test.yml): TTFT p99, KV usage, replica-down and benchmark
    regression alerts fire on synthetic series and stay quiet on healthy ones."""
    tests = sorted(str(p) for p in (PROMETHEUS_DIR / "rules" / "tests").glob("*.test.yml"))
    assert any(t.endswith("chassis-benchmarks.test.yml") for t in tests)
    result = subprocess.run([promtool, "test", "rules", *tests], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_celery_workers_are_scraped_on_the_control_plane_host_at_the_worker_metrics_port():
    import re

    job = {job["job_name"]: job for job in config()["scrape_configs"]}["chassis-celery-workers"]
    assert job["file_sd_configs"][0]["files"] == ["targets/control-plane.json"]
    (relabel,) = job["relabel_configs"]
    assert relabel["target_label"] == "__address__"

    def address(target: str) -> str:  # Prometheus anchors the regex and expands $1 the same way
        match = re.fullmatch(relabel["regex"], target)
        return relabel["replacement"].replace("$1", match.group(1))

    assert address("http://10.0.0.5:8000/health") == "10.0.0.5:9808"
    assert address("https://cp.example.org/health") == "cp.example.org:9808"
    assert address("http://[fd00::5]:8000/health") == "[fd00::5]:9808"
