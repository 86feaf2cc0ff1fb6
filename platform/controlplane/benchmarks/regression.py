"""Is a run worse than its history? Each watched figure against the last N successful runs of the
same schedule, outside a noise band of median ± k·MAD (scaled to a standard deviation), with a floor
of a few percent so a perfectly steady history does not flag every wobble."""

from __future__ import annotations

from controlplane.benchmarks import conditions
from controlplane.benchmarks.choices import RunState
from controlplane.benchmarks.conf import setting
from controlplane.benchmarks.models import BenchmarkRun
from measurement import MAD_TO_SIGMA, median_mad

HIGHER_IS_WORSE = "higher"
LOWER_IS_WORSE = "lower"
WATCHED = {
    "ttft_p50_ms": HIGHER_IS_WORSE,
    "ttft_p99_ms": HIGHER_IS_WORSE,
    "itl_p50_ms": HIGHER_IS_WORSE,
    "itl_p99_ms": HIGHER_IS_WORSE,
    "output_tokens_per_s": LOWER_IS_WORSE,
    "prefix_cache_hit_rate": LOWER_IS_WORSE,
}
NO_VERDICT = {"regressed": None, "baseline_ttft_p50_ms": None, "regression": None}


def baseline_runs(run: BenchmarkRun) -> list[BenchmarkRun]:
    """The schedule's previous successful runs, newest first (none for a manual run)."""
    if run.schedule_id is None:
        return []
    return list(
        BenchmarkRun.objects.filter(schedule_id=run.schedule_id, state=RunState.SUCCEEDED)
        .exclude(pk=run.pk)
        .filter(created__lte=run.created)
        .order_by("-created", "-id")[: int(setting("REGRESSION_WINDOW"))]
    )


def judge(value: float, history: list[float], direction: str) -> dict:
    median, mad = median_mad(history)
    k, floor_pct = float(setting("REGRESSION_K")), float(setting("REGRESSION_MIN_PCT"))
    band = max(k * MAD_TO_SIGMA * mad, abs(median) * floor_pct / 100)
    limit = median + band if direction == HIGHER_IS_WORSE else median - band
    regressed = value > limit if direction == HIGHER_IS_WORSE else value < limit
    return {
        "value": value,
        "median": round(median, 4),
        "mad": round(mad, 4),
        "limit": round(limit, 4),
        "worse_when": direction,
        "regressed": regressed,
    }


def verdict(run: BenchmarkRun, results: dict) -> dict:
    """Keys to merge into the run's results: ``regressed`` (None without a history), the per-figure
    judgement, and the conditions that changed since the newest baseline run."""
    baseline = baseline_runs(run)
    if not baseline:
        return dict(NO_VERDICT)
    metrics = {}
    for name, direction in WATCHED.items():
        value = results.get(name)
        history = [r.results.get(name) for r in baseline]
        history = [h for h in history if h is not None]
        if value is not None and len(history) >= int(setting("REGRESSION_MIN_RUNS")):
            metrics[name] = judge(value, history, direction)
    if not metrics:
        return dict(NO_VERDICT)
    regressed = sorted(name for name, m in metrics.items() if m["regressed"])
    ttft = metrics.get("ttft_p50_ms")
    return {
        "regressed": bool(regressed),
        "baseline_ttft_p50_ms": ttft["median"] if ttft else None,
        "regression": {
            "baseline_runs": [r.pk for r in baseline],
            "regressed_metrics": regressed,
            "metrics": metrics,
            "changed_conditions": conditions.diff(
                baseline[0].conditions, run.conditions, ignore=("replicas.ready",)
            )
            if baseline[0].conditions and run.conditions
            else [],
        },
    }
