"""Running one benchmark: pick the targets, drive the load, measure, store, judge against the trend.

The load generator runs in a helper thread with its own event loop; this thread keeps the database
work (Django's ORM is synchronous and per-thread): every few seconds it saves progress and looks
whether the run was cancelled, and if so tells the load generator to stop.
"""

from __future__ import annotations

import asyncio
import logging
import threading

import httpx

from controlplane.benchmarks.choices import RunState
from controlplane.benchmarks.conf import gateway_url, setting
from controlplane.benchmarks.loadgen import LoadResult, LoadSpec, Progress, chart_samples, run_load, summarize
from controlplane.benchmarks.models import BenchmarkRun, StaleRunState
from controlplane.serving.choices import ReplicaState
from controlplane.serving.metrics import parse_engine_metrics
from controlplane.serving.models import Replica
from measurement import percentile

log = logging.getLogger(__name__)


def _ready_replica_urls(run: BenchmarkRun) -> list[str]:
    replicas = Replica.objects.filter(deployment=run.deployment, state=ReplicaState.READY).order_by("ordinal")
    return [replica.url for replica in replicas if replica.url]


def _prefix_cache_counters(urls: list[str]) -> tuple[float, float] | None:
    """(hits, queries) summed over the replicas; None when one of them cannot be read."""
    hits = queries = 0.0
    try:
        with httpx.Client(timeout=setting("SCRAPE_TIMEOUT_S")) as client:
            for url in urls:
                response = client.get(f"{url}/metrics")
                response.raise_for_status()
                counters = parse_engine_metrics(response.text)
                hits += counters.prefix_cache_hits_total
                queries += counters.prefix_cache_queries_total
    except (httpx.HTTPError, ValueError) as exc:
        log.warning("prefix-cache counters unreadable: %s", exc)
        return None
    return hits, queries


def _hit_rate(before: tuple[float, float] | None, after: tuple[float, float] | None) -> float | None:
    if before is None or after is None:
        return None
    queries = after[1] - before[1]
    return round((after[0] - before[0]) / queries, 4) if queries > 0 else None


def regression_verdict(run: BenchmarkRun, ttft_p50_ms: float | None) -> dict:
    """Compare with the median TTFT p50 of the schedule's previous successful runs."""
    if run.schedule_id is None or ttft_p50_ms is None:
        return {"regressed": None, "baseline_ttft_p50_ms": None}
    previous = (
        BenchmarkRun.objects.filter(schedule_id=run.schedule_id, state=RunState.SUCCEEDED)
        .exclude(pk=run.pk)
        .filter(created__lte=run.created)
        .order_by("-created", "-id")[: int(setting("REGRESSION_WINDOW"))]
    )
    history = [r.results.get("ttft_p50_ms") for r in previous]
    history = [value for value in history if value is not None]
    if not history:
        return {"regressed": None, "baseline_ttft_p50_ms": None}
    baseline = percentile(history, 50)
    limit = baseline * (1 + float(setting("REGRESSION_PCT")) / 100)
    return {"regressed": ttft_p50_ms > limit, "baseline_ttft_p50_ms": round(baseline, 3)}


def _drive(run: BenchmarkRun, urls: list[str]) -> tuple[LoadResult | None, str]:
    """Run the load in a helper thread; this thread saves progress and watches for cancellation."""
    spec = LoadSpec(
        workload=run.workload,
        requests=run.requests,
        concurrency=run.concurrency,
        max_tokens=run.max_tokens,
        seed=run.seed,
        model=run.deployment.served_model_name,
        api_key=setting("API_KEY"),
        timeout_s=float(setting("REQUEST_TIMEOUT_S")),
    )
    stop = threading.Event()
    progress = Progress(total=run.requests)
    outcome: dict = {}

    def load() -> None:
        try:
            outcome["result"] = asyncio.run(run_load(urls, spec, stop, progress))
        except Exception as exc:  # reported on the run, not lost in a thread
            log.exception("benchmark %s load generator crashed", run.pk)
            outcome["error"] = f"load generator crashed: {type(exc).__name__}: {exc}"

    thread = threading.Thread(target=load, name=f"benchmark-{run.pk}", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(float(setting("PROGRESS_EVERY_S")))
        run.record_progress(progress.completed, progress.failed)
        if not stop.is_set() and run.current_state() != RunState.RUNNING:
            stop.set()
    return outcome.get("result"), outcome.get("error", "")


def execute(run_id: int) -> str:
    """queued -> running -> succeeded | failed; a cancelled run keeps what it measured. Safe to repeat."""
    run = BenchmarkRun.objects.select_related("deployment").filter(pk=run_id).first()
    if run is None:
        return "gone"
    if run.state != RunState.QUEUED:
        return f"skipped: run is {run.state}"
    replica_urls = _ready_replica_urls(run)
    gateway = gateway_url()
    targets = [gateway] if gateway else replica_urls
    if not targets:
        try:
            run.fail(f"deployment {run.deployment} has no ready replica")
        except StaleRunState as exc:
            return f"skipped: {exc}"
        return "failed"
    try:
        run.start(targets)
    except StaleRunState as exc:
        return f"skipped: {exc}"

    before = _prefix_cache_counters(replica_urls)
    result, crash = _drive(run, targets)
    after = _prefix_cache_counters(replica_urls)
    if result is None:
        return _finish_failed(run, crash)

    results = summarize(result)
    results["prefix_cache_hit_rate"] = _hit_rate(before, after)
    results.update(regression_verdict(run, results["ttft_p50_ms"]))
    samples = chart_samples(result.samples, int(setting("MAX_SAMPLES")))
    if run.current_state() == RunState.CANCELLED:
        run.attach_partial_results(results, samples)
        return "cancelled"
    try:
        if results["requests_ok"] == 0:
            first_error = next(iter(results["errors"]), "no request was sent")
            run.fail(f"every request failed: {first_error}", results, samples)
            return "failed"
        failed = results["requests_failed"]
        run.succeed(results, samples, f"{results['requests_ok']} ok, {failed} failed" if failed else "")
    except StaleRunState:
        run.attach_partial_results(results, samples)
        return "cancelled"
    return "succeeded"


def _finish_failed(run: BenchmarkRun, reason: str) -> str:
    try:
        run.fail(reason)
    except StaleRunState:
        return "cancelled"
    return "failed"
