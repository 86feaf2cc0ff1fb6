"""On CPU against real ``chassis serve`` replicas (tiny qwen3): a 3 × 2 × 2 sweep fills both sweep
charts, and a scheduled run on a deliberately slowed replica (max_num_seqs=1) is flagged against the
schedule's earlier runs, shows what changed, sets the /metrics verdict, and that scrape fires the
alert rule in promtool."""

import subprocess
from datetime import timedelta

import pytest
import yaml
from controlplane.benchmarks.models import BenchmarkRun, BenchmarkSchedule
from controlplane.benchmarks.scheduling import run_due_schedules
from controlplane.benchmarks.tasks import execute_run
from django.utils import timezone

from gateway.bench.cluster import cpu_replica
from tests.dashboards.test_prometheus_config import PROMETHEUS_DIR
from tests.platform.controlplane.benchmarks.conftest import MODEL

pytestmark = pytest.mark.django_db
GRID = {"concurrency": [1, 2, 4], "input_tokens": [16, 64], "output_tokens": [4, 12]}


@pytest.fixture(scope="module")
def slow_replica(tiny_model_dir, tmp_path_factory):
    """The same checkpoint, one sequence at a time: the 'slowed revision'."""
    root = tmp_path_factory.mktemp("slow-replica")
    with cpu_replica(
        tiny_model_dir, MODEL, root, "--num-gpu-blocks", "512", "--max-num-seqs", "1"
    ) as process:
        yield process


def test_cpu_sweep_fills_both_charts(engine_replica, ready_replica_row, login):
    run = BenchmarkRun.objects.create(
        deployment=ready_replica_row(engine_replica.url), sweep=GRID, requests=4, concurrency=1, seed=2
    )
    assert execute_run(run.pk) == "succeeded"
    run.refresh_from_db()
    points = run.results["sweep_points"]
    assert len(points) == 12 and run.completed == 48 == run.total_requests
    assert [(p["concurrency"], p["input_tokens"], p["output_tokens"]) for p in points[:2]] == [
        (1, 16, 4),
        (1, 16, 12),
    ]
    for point in points:
        assert point["requests_ok"] == 4 and point["uncached_input_tokens_per_s"] > 0
        assert point["per_user_output_tokens_per_s"] > 0 and point["output_tokens_per_s"] > 0
    longer = [p["input_tokens"] for p in points if p["concurrency"] == 1 and p["output_tokens"] == 4]
    assert longer == [16, 64]
    recorded = run.conditions
    assert recorded["workload"]["sweep"] == GRID and recorded["workload"]["seed"] == 2
    assert recorded["versions"]["engine"] and recorded["versions"]["torch"] and recorded["dtype"] == "float32"
    assert recorded["engine_config"]["num_gpu_blocks"] == 512 and recorded["replicas"]["ready"] == 1
    assert recorded["checkpoint"]["id"] == run.deployment.checkpoint_id and "digest" in recorded["checkpoint"]
    assert recorded["replica_errors"] == []
    charts = login("viewer").get(f"/benchmarks/{run.pk}/sweep.json").json()["runs"][0]
    assert len(charts["prefill"]["points"]) == 12 and len(charts["decode"]["points"]) == 12
    assert charts["prefill"]["front"] and charts["decode"]["front"]


def scheduled_run(schedule: BenchmarkSchedule, minute: int) -> BenchmarkRun:
    """What beat does at ``minute`` past the schedule's start, then what the worker does."""
    created = run_due_schedules(schedule.starts_at + timedelta(minutes=minute, seconds=1))
    assert len(created) == 1
    assert execute_run(created[0]) == "succeeded"
    return BenchmarkRun.objects.get(pk=created[0])


def test_scheduled_run_on_a_slowed_replica_is_a_regression(
    engine_replica, slow_replica, ready_replica_row, client, promtool, settings
):
    from controlplane.serving.models import Replica

    # Two CPU cores shared with the rest of the suite: a wide floor, so only a real slowdown counts.
    settings.CHASSIS_BENCHMARKS = {**settings.CHASSIS_BENCHMARKS, "REGRESSION_MIN_PCT": 60.0}

    deployment = ready_replica_row(engine_replica.url)
    schedule = BenchmarkSchedule.objects.create(
        name="nightly", deployment=deployment, interval_minutes=1, requests=16, concurrency=8, max_tokens=16,
        starts_at=timezone.now() - timedelta(hours=1),
    )  # fmt: skip
    baseline = [scheduled_run(schedule, minute) for minute in range(4)]
    assert [run.results["regressed"] for run in baseline[:3]] == [None] * 3  # too few runs to judge
    assert baseline[3].results["regression"]["changed_conditions"] == []  # same conditions as before

    # The slowed revision: max_num_seqs=1 on the deployment, and its replica is the one serving so.
    deployment.engine_options = {"max_num_seqs": 1}
    deployment.save()
    host, port = slow_replica.url.removeprefix("http://").rsplit(":", 1)
    Replica.objects.filter(deployment=deployment).update(host=host, port=int(port))
    slowed = scheduled_run(schedule, 4)

    regression = slowed.results["regression"]
    assert slowed.results["regressed"] is True, regression
    assert regression["baseline_runs"] == [run.pk for run in reversed(baseline)]
    assert "ttft_p50_ms" in regression["regressed_metrics"]
    throughput = regression["metrics"]["output_tokens_per_s"]
    assert throughput["value"] < throughput["median"]  # slower too, if not always past the wide floor
    changed = {c["key"]: c for c in regression["changed_conditions"]}
    assert changed["engine_config.max_num_seqs"]["after"] == 1
    assert changed["engine_options.max_num_seqs"] == {
        "key": "engine_options.max_num_seqs",
        "before": None,
        "after": 1,
    }

    page = client.get(f"/benchmarks/{slowed.pk}/")
    assert page.status_code == 302  # the run page needs a login; the metrics do not
    scrape = client.get("/metrics").content.decode()
    series = [line for line in scrape.splitlines() if line.startswith("chassis_benchmark_regression{")]
    assert (
        'chassis_benchmark_regression{deployment="tiny",metric="ttft_p50_ms",schedule="nightly"} 1.0'
        in series
    )

    # The scraped series, held for five minutes, fire the alert rule.
    rules = PROMETHEUS_DIR / "rules" / "chassis-alerts.yml"
    inputs = "\n".join(
        f"      - series: '{line.rsplit(' ', 1)[0]}'\n        values: '{line.rsplit(' ', 1)[1]}x5'"
        for line in series
    )
    test_file = PROMETHEUS_DIR / "rules" / "tests" / ".scraped-benchmark.test.yml"
    description = yaml.safe_load(rules.read_text())
    rule = next(
        r for g in description["groups"] for r in g["rules"] if r.get("alert") == "ChassisBenchmarkRegression"
    )
    expected = "\n".join(
        f"          - exp_labels: {{severity: warning, schedule: nightly, deployment: tiny, metric: {name}}}\n"
        f"            exp_annotations:\n"
        f"              summary: 'Benchmark schedule nightly on tiny regressed on {name}'\n"
        f"              description: '{rule['annotations']['description']}'"
        for name in sorted(regression["regressed_metrics"])
    )
    test_file.write_text(
        f"rule_files: [{rules}]\nevaluation_interval: 30s\ntests:\n  - interval: 1m\n    input_series:\n{inputs}\n"
        f"    alert_rule_test:\n      - eval_time: 2m\n        alertname: ChassisBenchmarkRegression\n"
        f"        exp_alerts:\n{expected}\n"
    )
    try:
        result = subprocess.run([promtool, "test", "rules", str(test_file)], capture_output=True, text=True)
    finally:
        test_file.unlink()
    assert result.returncode == 0, result.stdout + result.stderr
