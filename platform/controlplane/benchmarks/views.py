from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from controlplane.api import audit
from controlplane.api.roles import OPERATOR
from controlplane.benchmarks import conditions, services, sweeps
from controlplane.benchmarks.choices import RunState
from controlplane.benchmarks.forms import BenchmarkRunForm, BenchmarkScheduleForm, ReproduceForm
from controlplane.benchmarks.models import BenchmarkRun, BenchmarkSchedule
from controlplane.web.access import role_required

RESULT_ROWS = [
    ("requests ok", "requests_ok", ""),
    ("requests failed", "requests_failed", ""),
    ("TTFT p50", "ttft_p50_ms", "ms"),
    ("TTFT p90", "ttft_p90_ms", "ms"),
    ("TTFT p99", "ttft_p99_ms", "ms"),
    ("inter-token latency p50", "itl_p50_ms", "ms"),
    ("inter-token latency p99", "itl_p99_ms", "ms"),
    ("output tokens / s", "output_tokens_per_s", ""),
    ("requests / s", "requests_per_s", ""),
    ("prefix-cache hit rate", "prefix_cache_hit_rate", ""),
    ("duration", "duration_s", "s"),
    ("uncached input tokens / s", "uncached_input_tokens_per_s", ""),
    ("per-user output tokens / s", "per_user_output_tokens_per_s", ""),
    ("baseline TTFT p50 (schedule median)", "baseline_ttft_p50_ms", "ms"),
]


def _runs():
    return BenchmarkRun.objects.select_related("deployment__checkpoint", "schedule", "reproduced_from")


@role_required()
def run_list(request):
    return render(request, "benchmarks/runs.html", {"runs": _runs()[:200], "form": BenchmarkRunForm()})


@require_POST
@role_required(OPERATOR)
def run_create(request):
    form = BenchmarkRunForm(request.POST)
    if not form.is_valid():
        return render(request, "benchmarks/runs.html", {"runs": _runs()[:200], "form": form}, status=400)
    run = services.create_run(request.user, **form.run_fields())
    return redirect("benchmark-run-detail", pk=run.pk)


def _run_context(run):
    rows = [(label, run.results.get(key), unit) for label, key, unit in RESULT_ROWS if key in run.results]
    return {
        "run": run,
        "result_rows": rows,
        "active": not run.is_terminal,
        "regression": run.results.get("regression"),
    }


@role_required()
def run_detail(request, pk: int):
    run = get_object_or_404(_runs(), pk=pk)
    context = _run_context(run)
    context["conditions"] = sorted(conditions.flatten(run.conditions).items())
    context["reproduce_form"] = ReproduceForm()
    context["compare"] = request.GET.get("compare", "")
    return render(request, "benchmarks/run_detail.html", context)


@role_required(OPERATOR)
def run_reproduce(request, pk: int):
    """GET: the conditions diff of reproducing the run on the chosen deployment; POST: start it."""
    source = get_object_or_404(_runs(), pk=pk)
    form = ReproduceForm(request.POST if request.method == "POST" else request.GET)
    if not form.is_valid():
        context = {
            **_run_context(source),
            "conditions": sorted(conditions.flatten(source.conditions).items()),
        }
        context["reproduce_form"] = form
        return render(request, "benchmarks/run_detail.html", context, status=400)
    deployment = form.cleaned_data["deployment"]
    if request.method == "POST":
        run = services.reproduce_run(source, deployment, request.user)
        return redirect("benchmark-run-detail", pk=run.pk)
    changed = conditions.diff(source.conditions, conditions.preview(source, deployment))
    context = {"source": source, "deployment": deployment, "changed": changed}
    return render(request, "benchmarks/reproduce.html", context)


@role_required()
def run_sweep(request, pk: int):
    """Chart data of a sweep run and the sweep runs named in ?compare=, for the two sweep charts."""
    run = get_object_or_404(_runs(), pk=pk)
    runs = sweeps.compared_runs(run, request.GET.get("compare", ""))
    return JsonResponse({"state": run.state, "runs": [sweeps.chart_series(r) for r in runs]})


@role_required()
def run_live(request, pk: int):
    """The htmx-polled part of the run page: state, progress, results."""
    run = get_object_or_404(_runs(), pk=pk)
    # 286 tells htmx to stop polling: a finished run changes no more.
    status = 286 if run.is_terminal else 200
    return render(request, "benchmarks/_run_live.html", _run_context(run), status=status)


@role_required()
def run_samples(request, pk: int):
    """Chart data: per request, start time, TTFT and mean ITL (ms), in order of sending."""
    run = get_object_or_404(BenchmarkRun, pk=pk)
    ok = [row for row in run.samples if row[3] and row[1] is not None]
    return JsonResponse(
        {
            "state": run.state,
            "start_s": [row[0] for row in ok],
            "ttft_ms": [row[1] for row in ok],
            "itl_ms": [row[2] for row in ok],
        }
    )


@require_POST
@role_required(OPERATOR)
def run_cancel(request, pk: int):
    run = get_object_or_404(BenchmarkRun, pk=pk)
    try:
        services.cancel_run(run, request.user)
    except ValidationError:
        pass  # it finished meanwhile; the page shows how
    return redirect("benchmark-run-detail", pk=pk)


@role_required()
def schedule_list(request):
    return render(
        request,
        "benchmarks/schedules.html",
        {
            "schedules": BenchmarkSchedule.objects.select_related("deployment"),
            "form": BenchmarkScheduleForm(),
        },
    )


@require_POST
@role_required(OPERATOR)
def schedule_create(request):
    form = BenchmarkScheduleForm(request.POST)
    if not form.is_valid():
        context = {"schedules": BenchmarkSchedule.objects.select_related("deployment"), "form": form}
        return render(request, "benchmarks/schedules.html", context, status=400)
    with transaction.atomic():
        form.instance.created_by = request.user
        schedule = form.save()
        audit.record(request.user, "create", schedule, form.cleaned_data)
    return redirect("benchmark-schedule-detail", pk=schedule.pk)


@role_required()
def schedule_detail(request, pk: int):
    schedule = get_object_or_404(BenchmarkSchedule.objects.select_related("deployment"), pk=pk)
    runs = schedule.runs.order_by("-created", "-id")[:50]
    return render(request, "benchmarks/schedule_detail.html", {"schedule": schedule, "runs": runs})


@role_required()
def schedule_trend(request, pk: int):
    """Chart data: TTFT p50 and output tokens/s of the schedule's successful runs, oldest first."""
    schedule = get_object_or_404(BenchmarkSchedule, pk=pk)
    runs = schedule.runs.filter(state=RunState.SUCCEEDED).order_by("-created", "-id")[:200]
    series = {"t": [], "ttft_p50_ms": [], "output_tokens_per_s": [], "regressed": [], "run": []}
    for run in reversed(list(runs)):
        series["t"].append(round(run.created.timestamp(), 3))
        series["ttft_p50_ms"].append(run.results.get("ttft_p50_ms"))
        series["output_tokens_per_s"].append(run.results.get("output_tokens_per_s"))
        series["regressed"].append(bool(run.results.get("regressed")))
        series["run"].append(run.pk)
    return JsonResponse(series)


@require_POST
@role_required(OPERATOR)
def schedule_toggle(request, pk: int):
    schedule = get_object_or_404(BenchmarkSchedule, pk=pk)
    try:
        services.set_schedule_enabled(schedule, not schedule.enabled, request.user)
    except ValidationError:
        pass  # its deployment was deleted; the page says so
    return redirect("benchmark-schedule-detail", pk=pk)
