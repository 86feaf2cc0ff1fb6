"""Each schedule's latest verdict on the control plane's /metrics (controlplane.telemetry.metrics),
read from the database at scrape time (the worker that judged the run and the web process that
answers the scrape are different processes).

    chassis_benchmark_regression{schedule, deployment, metric}   1 when the figure regressed, else 0
    chassis_benchmark_regressed{schedule, deployment}            1 when any watched figure regressed
    chassis_benchmark_latest_run{schedule, deployment}           the id of the run judged
"""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily

from controlplane.benchmarks.choices import RunState
from controlplane.benchmarks.models import BenchmarkRun, BenchmarkSchedule


def latest_verdicts() -> list[BenchmarkRun]:
    """Per schedule, its newest successful run that has a regression verdict."""
    runs = []
    for schedule in BenchmarkSchedule.objects.order_by("name"):
        run = (
            BenchmarkRun.objects.filter(
                schedule=schedule, state=RunState.SUCCEEDED, results__regressed__isnull=False
            )
            .order_by("-created", "-id")
            .first()
        )
        if run is not None:
            runs.append(run)
    return runs


class VerdictCollector:
    def collect(self):
        per_metric = GaugeMetricFamily(
            "chassis_benchmark_regression",
            "1 when the schedule's latest run regressed on this figure against its baseline runs",
            labels=["schedule", "deployment", "metric"],
        )
        overall = GaugeMetricFamily(
            "chassis_benchmark_regressed",
            "1 when any watched figure of the schedule's latest run regressed",
            labels=["schedule", "deployment"],
        )
        latest = GaugeMetricFamily(
            "chassis_benchmark_latest_run",
            "Id of the schedule's latest judged run",
            labels=["schedule", "deployment"],
        )
        for run in latest_verdicts():
            labels = [run.schedule.name, run.deployment_name]
            overall.add_metric(labels, 1.0 if run.results.get("regressed") else 0.0)
            latest.add_metric(labels, float(run.pk))
            judged = (run.results.get("regression") or {}).get("metrics") or {}
            for name, judgement in sorted(judged.items()):
                per_metric.add_metric([*labels, name], 1.0 if judgement.get("regressed") else 0.0)
        yield from (per_metric, overall, latest)
