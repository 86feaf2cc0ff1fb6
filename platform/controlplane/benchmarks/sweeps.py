"""A sweep's two charts, as series any number of runs can be drawn in together.

- prefill: uncached input tokens/s against TTFT p50 (ms); better is up and to the left;
- decode: output tokens/s against per-user output tokens/s; better is up and to the right.

Each run gives its points and its Pareto front: the points no other point of the run beats on both
axes, in x order, so fronts of several runs compare at a glance.
"""

from __future__ import annotations

from controlplane.benchmarks.models import BenchmarkRun

CHARTS = {
    # name: (x figure, y figure, is a smaller x better)
    "prefill": ("ttft_p50_ms", "uncached_input_tokens_per_s", True),
    "decode": ("per_user_output_tokens_per_s", "output_tokens_per_s", False),
}


def pareto_front(points: list[tuple[float, float]], smaller_x_better: bool) -> list[tuple[float, float]]:
    """The points not dominated by another (y: larger is better), sorted by x ascending."""
    # Walk from the best x to the worst; a point joins the front when its y beats every y before it.
    ordered = sorted(set(points), key=lambda p: (p[0] if smaller_x_better else -p[0], -p[1]))
    front, best_y = [], float("-inf")
    for x, y in ordered:
        if y > best_y:
            front.append((x, y))
            best_y = y
    return sorted(front)


def chart_series(run: BenchmarkRun) -> dict:
    """{"id", "label", chart name: {"points": [[x, y, label]], "front": [[x, y]]}} of one run."""
    series: dict = {"id": run.pk, "label": f"#{run.pk} {run.deployment_name}"}
    points = run.results.get("sweep_points") or []
    for name, (x_key, y_key, smaller_x_better) in CHARTS.items():
        drawn = [
            [p[x_key], p[y_key], f"c{p['concurrency']} in{p['input_tokens']} out{p['output_tokens']}"]
            for p in points
            if p.get(x_key) is not None and p.get(y_key) is not None
        ]
        front = pareto_front([(x, y) for x, y, _ in drawn], smaller_x_better)
        series[name] = {"points": drawn, "front": [list(p) for p in front]}
    return series


def compared_runs(run: BenchmarkRun, compare: str) -> list[BenchmarkRun]:
    """``run`` first, then the sweep runs named in ``compare`` ("12,15"); bad ids are ignored."""
    ids = [int(part) for part in compare.split(",") if part.strip().isdigit()][:5]
    others = BenchmarkRun.objects.filter(pk__in=ids).exclude(pk=run.pk).exclude(sweep={}).order_by("id")
    return [run, *others]
