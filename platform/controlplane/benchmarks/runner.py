"""Running one benchmark: pick the targets, record the conditions, drive the load (once, or once per
point of a sweep grid), measure, store, judge against the trend.

The load generator runs in a helper thread with its own event loop; this thread keeps the database
work (Django's ORM is synchronous and per-thread): every few seconds it saves progress and looks
whether the run was cancelled, and if so tells the load generator to stop.
"""

from __future__ import annotations

import asyncio
import logging
import threading

import httpx

from controlplane.benchmarks import conditions, regression
from controlplane.benchmarks.choices import RunState
from controlplane.benchmarks.conf import gateway_url, setting
from controlplane.benchmarks.loadgen import LoadResult, LoadSpec, Progress, chart_samples, run_load, summarize
from controlplane.benchmarks.models import BenchmarkRun, StaleRunState
from controlplane.serving.metrics import parse_engine_metrics

log = logging.getLogger(__name__)


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


def _spec(run: BenchmarkRun, point: dict | None) -> LoadSpec:
    point = point or {}
    return LoadSpec(
        workload=run.workload,
        requests=run.requests,
        concurrency=point.get("concurrency", run.concurrency),
        max_tokens=point.get("output_tokens", run.max_tokens),
        seed=run.seed,
        model=run.deployment.served_model_name,
        api_key=setting("API_KEY"),
        timeout_s=float(setting("REQUEST_TIMEOUT_S")),
        input_tokens=point.get("input_tokens"),
        prompt_salt=f"c{point['concurrency']}-o{point['output_tokens']}" if point else "",
    )


def sweep_points(sweep: dict) -> list[dict | None]:
    """The grid's points, concurrency outermost; [None] (one plain load) when there is no grid."""
    if not sweep:
        return [None]
    return [
        {"concurrency": c, "input_tokens": i, "output_tokens": o}
        for c in sweep["concurrency"]
        for i in sweep["input_tokens"]
        for o in sweep["output_tokens"]
    ]


def _drive(
    run: BenchmarkRun, urls: list[str], spec: LoadSpec, done_before: tuple[int, int]
) -> tuple[LoadResult | None, str]:
    """Run the load in a helper thread; this thread saves progress and watches for cancellation."""
    stop = threading.Event()
    progress = Progress(total=spec.requests)
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
        run.record_progress(done_before[0] + progress.completed, done_before[1] + progress.failed)
        if not stop.is_set() and run.current_state() != RunState.RUNNING:
            stop.set()
    return outcome.get("result"), outcome.get("error", "")


POINT_FIGURES = (
    "requests_ok", "requests_failed", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms",
    "output_tokens_per_s", "uncached_input_tokens_per_s", "per_user_output_tokens_per_s", "prompt_tokens",
    "prefix_cache_hit_rate",
)  # fmt: skip


def _measure(run: BenchmarkRun, targets: list[str], replica_urls: list[str]) -> tuple[dict | None, list, str]:
    """Every point of the run in turn: (results, chart samples, crash). Stops at a cancel or a crash."""
    samples: list = []
    points: list[dict] = []
    wall = 0.0
    done = (0, 0)
    for point in sweep_points(run.sweep):
        before = _prefix_cache_counters(replica_urls)
        result, crash = _drive(run, targets, _spec(run, point), done)
        after = _prefix_cache_counters(replica_urls)
        if result is None:
            return None, [], crash
        figures = summarize(result)
        figures["prefix_cache_hit_rate"] = _hit_rate(before, after)
        for sample in result.samples:  # the timeline shows the points one after another
            sample.start_s += wall
        samples.extend(result.samples)
        wall += result.wall_s
        done = (done[0] + len(result.samples), done[1] + figures["requests_failed"])
        if point is not None:
            points.append({**point, **{key: figures.get(key) for key in POINT_FIGURES}})
        if result.stopped:
            break
    if not points:
        return figures, samples, ""
    results = summarize(LoadResult(samples=samples, wall_s=wall, stopped=False))
    rates = [p["prefix_cache_hit_rate"] for p in points if p["prefix_cache_hit_rate"] is not None]
    results["prefix_cache_hit_rate"] = round(sum(rates) / len(rates), 4) if rates else None
    results["sweep_points"] = points
    return results, samples, ""


def execute(run_id: int) -> str:
    """queued -> running -> succeeded | failed; a cancelled run keeps what it measured. Safe to repeat."""
    run = (
        BenchmarkRun.objects.select_related("deployment__checkpoint", "reproduced_from")
        .filter(pk=run_id)
        .first()
    )
    if run is None:
        return "gone"
    if run.state != RunState.QUEUED:
        return f"skipped: run is {run.state}"
    if run.deployment is None:
        return _finish_failed(run, f"deployment {run.deployment_name} was deleted")
    replicas = conditions.ready_replicas(run.deployment)
    replica_urls = [replica.url for replica in replicas if replica.url]
    gateway = gateway_url()
    targets = [gateway] if gateway else replica_urls
    if not targets:
        return _finish_failed(run, f"deployment {run.deployment} has no ready replica")
    recorded = conditions.capture(run, run.deployment, replicas, conditions.replica_reports(replica_urls))
    if gateway:
        recorded["gateway"] = gateway
    source = run.reproduced_from
    changed = conditions.diff(source.conditions, recorded) if source is not None else None
    try:
        run.start(targets, recorded, changed)
    except StaleRunState as exc:
        return f"skipped: {exc}"

    results, raw_samples, crash = _measure(run, targets, replica_urls)
    if results is None:
        return _finish_failed(run, crash)
    results.update(regression.verdict(run, results))
    samples = chart_samples(raw_samples, int(setting("MAX_SAMPLES")))
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
