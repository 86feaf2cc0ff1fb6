"""BenchmarkRun changes state only through its methods, which refuse what the machine forbids."""

import pytest
from controlplane.benchmarks.choices import RunState as S
from controlplane.benchmarks.models import BenchmarkRun, StaleRunState
from django.core.exceptions import ValidationError

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(make_deployment):
    return BenchmarkRun.objects.create(deployment=make_deployment(), requests=4, concurrency=2)


def test_happy_path_keeps_reasons_and_timestamps(run):
    assert run.state == S.QUEUED
    run.start(["http://127.0.0.1:1"])
    assert run.state == S.RUNNING and run.started_at and "4 requests" in run.reason
    run.record_progress(2, 1)
    assert BenchmarkRun.objects.get(pk=run.pk).completed == 2
    run.succeed({"requests_ok": 3, "requests_failed": 1}, [[0.0, 1.0, None, True]])
    stored = BenchmarkRun.objects.get(pk=run.pk)
    assert stored.state == S.SUCCEEDED and stored.finished_at >= stored.started_at
    assert (
        stored.completed == 4 and stored.failed_requests == 1 and stored.samples == [[0.0, 1.0, None, True]]
    )


@pytest.mark.parametrize(
    "path, refused",
    [
        ((), "succeed"),  # queued cannot succeed without running
        (("start",), "start"),  # running cannot start again
        (("start", "succeed"), "cancel"),  # finished runs stay finished
        (("cancel",), "start"),  # a cancelled run never starts
        (("fail",), "cancel"),
    ],
)
def test_invalid_transitions_are_refused(run, path, refused):
    actions = {
        "start": lambda: run.start(["u"]),
        "succeed": lambda: run.succeed({"requests_ok": 1}, []),
        "cancel": lambda: run.cancel("test"),
        "fail": lambda: run.fail("test"),
    }
    for step in path:
        actions[step]()
    before = run.state
    with pytest.raises(ValidationError) as refusal:
        actions[refused]()
    assert "state" in refusal.value.message_dict and "cannot become" in refusal.value.message_dict["state"][0]
    assert BenchmarkRun.objects.get(pk=run.pk).state == before


def test_a_run_moved_by_someone_else_is_stale(run):
    other = BenchmarkRun.objects.get(pk=run.pk)
    other.cancel("operator cancelled")
    with pytest.raises(StaleRunState, match="is cancelled, not queued"):
        run.start(["u"])
    assert BenchmarkRun.objects.get(pk=run.pk).reason == "operator cancelled"


def test_progress_is_not_recorded_once_cancelled(run):
    run.start(["u"])
    BenchmarkRun.objects.get(pk=run.pk).cancel("stop")
    run.record_progress(3, 0)
    assert BenchmarkRun.objects.get(pk=run.pk).completed == 0
