"""Every metric a dashboard panel or a Prometheus rule queries is one Chassis really exports.

Replica names come from a REAL ``chassis serve`` process's /metrics; gateway names from the
gateway's metrics module (its families, expanded the way prometheus_client exposes them); the
control plane's from its /metrics after a request, and the Celery workers' from the module whose
families they serve.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from dashboards.catalog import all_dashboards
from dashboards.panels import expressions

RULES_DIR = Path(__file__).resolve().parents[2] / "dashboards" / "prometheus" / "rules"
# Made by Prometheus itself (scrape health) and by the blackbox exporter: used by alerts only.
PROMETHEUS_MADE = {"up", "probe_success"}
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
             "and", "or", "unless", "inf", "nan"}  # fmt: skip
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression (Grafana's label_values(metric, label) included)."""
    expr = re.sub(r"label_values\(([^,{)]+)(\{[^}]*\})?(,[^)]*)?\)", r"\1\2", expr)
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)  # label values, $variables
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    names = set()
    for match in _IDENT.finditer(expr):
        rest = expr[match.end() :].lstrip()
        if rest.startswith("(") or match.group() in _KEYWORDS:
            continue  # a function call or a keyword
        if match.start() > 0 and (expr[match.start() - 1].isdigit() or expr[match.start() - 1] == "."):
            continue  # part of a number such as 1e-5
        names.add(match.group())
    return names


def rule_files() -> list[dict]:
    return [yaml.safe_load(path.read_text()) for path in sorted(RULES_DIR.glob("*.yml"))]


def rules() -> list[dict]:
    return [rule for doc in rule_files() for group in doc["groups"] for rule in group["rules"]]


def replica_series_names(base_url: str) -> set[str]:
    # One finished request first, so the histograms and counters have observations, as in production.
    body = {"model": "tiny-dash", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    assert httpx.post(f"{base_url}/v1/chat/completions", json=body, timeout=60).status_code == 200
    text = httpx.get(f"{base_url}/metrics", timeout=10).text
    return {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}


SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def expanded(families) -> set[str]:
    """Series names of metric families, as prometheus_client exposes them (with or without samples)."""
    return {family.name + suffix for family in families for suffix in SUFFIXES[family.type]}


def expert_parallel_series_names() -> set[str]:
    """An expert-parallel replica's own families (rendered by the replica's collector from a stand-in
    report: the dashboard's replica is dense; tests/engine/distributed/test_ep_serve.py reads them
    from a real --ep 2 replica)."""
    from engine.server.metrics import _EngineStatsCollector

    report = {"layers.1.mlp": {"rank_tokens": [3.0, 1.0], "imbalance_ratio": 1.5, "moves": 1}}
    return expanded(_EngineStatsCollector("m", lambda: None)._expert_parallel_families(report))


def sliding_window_series_names() -> set[str]:
    """The series of a replica whose sliding-window layers keep a pool of their own (the dashboard's
    replica has none; tests/engine/server/test_metrics.py checks their values)."""
    from engine.outputs import EngineStats
    from engine.server.metrics import ServerMetrics

    stats = EngineStats(0, 0, 0.5, 10, 5, 0, 0, 0, 0, 0, window_blocks_total=8, window_kv_usage=0.5)
    text = generate_latest(ServerMetrics("m", lambda: stats).registry).decode()
    return {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}


def gateway_series_names() -> set[str]:
    from gateway.metrics import GatewayMetrics

    return expanded(GatewayMetrics().registry.collect())


def control_plane_series_names(client) -> set[str]:
    assert client.get("/health").status_code == 200  # a request and its queries, as in production
    return expanded(text_string_to_metric_families(client.get("/metrics").content.decode()))


def celery_worker_series_names() -> set[str]:
    from controlplane.telemetry.celery_metrics import DURATION, TASKS

    return expanded([*TASKS.describe(), *DURATION.describe()])


def test_the_name_extractor_finds_what_it_should():
    expr = (
        'histogram_quantile(0.99, sum by (le, model_name) (rate(vllm:ttft_bucket{model_name=~"$m"}'
        "[$__rate_interval]))) / on (instance) group_left foo_total > 1e-5"
    )
    assert metric_names(expr) == {"vllm:ttft_bucket", "foo_total"}
    assert metric_names('label_values(vllm:num_requests_running{model_name=~"$m"}, instance)') == {
        "vllm:num_requests_running"
    }


@pytest.mark.django_db
def test_dashboards_and_rules_query_only_exported_metrics(replica, client):
    control_plane = control_plane_series_names(client)
    assert {
        "django_http_requests_total_by_view_transport_method_total",
        "django_db_execute_total",
    } <= control_plane
    exported = (
        replica_series_names(replica.url)
        | expert_parallel_series_names()
        | sliding_window_series_names()
        | gateway_series_names()
        | control_plane
        | celery_worker_series_names()
    )
    assert "vllm:time_to_first_token_seconds_bucket" in exported  # the replica really exported them
    recorded = {rule["record"] for rule in rules() if "record" in rule}

    used_by_dashboards = set().union(*(metric_names(e) for b in all_dashboards() for e in expressions(b)))
    assert {
        "vllm:inter_token_latency_seconds_bucket", "chassis_gateway_requests_total",
        "chassis_celery_tasks_total", "chassis_celery_queue_length",
    } <= used_by_dashboards  # fmt: skip
    assert used_by_dashboards - exported == set()

    for rule in rules():
        used = metric_names(rule["expr"])
        assert used, rule
        unknown = used - exported - recorded - (PROMETHEUS_MADE if "alert" in rule else set())
        assert unknown == set(), f"{rule.get('record') or rule.get('alert')} queries {unknown}"


def test_dashboard_expressions_parse_as_promql(tmp_path, promtool):
    """promtool parses each panel query, with Grafana's variables replaced by what Grafana sends."""
    substitutions = {
        "$__rate_interval": "1m", "$model_name": ".*", "$instance": ".*", "$model": ".*", "$task": ".*",
    }  # fmt: skip
    group_rules = []
    for board in all_dashboards():
        for i, expr in enumerate(expressions(board)):
            if expr.startswith("label_values("):
                continue  # a Grafana function, not PromQL
            for variable, value in substitutions.items():
                expr = expr.replace(variable, value)
            assert "$" not in expr, expr
            group_rules.append({"record": f"check:{board['uid'].replace('-', '_')}:{i}", "expr": expr})
    path = tmp_path / "panels.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": group_rules}]}))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(group_rules)} rules found" in result.stdout
