"""Dispatch publishes tasks by name and never imports the tasks modules (which call the services
that call dispatch); the names it publishes are the names the tasks register."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
from celery import current_app
from controlplane.benchmarks import dispatch as benchmarks_dispatch
from controlplane.serving import dispatch as serving_dispatch

DISPATCH_MODULES = (benchmarks_dispatch, serving_dispatch)
PUBLISHED = {
    "controlplane.benchmarks.tasks": {benchmarks_dispatch.EXECUTE_RUN: "execute_run"},
    "controlplane.serving.tasks": {
        serving_dispatch.LAUNCH_REPLICA: "launch_replica",
        serving_dispatch.DRAIN_REPLICA: "drain_replica",
        serving_dispatch.RECONCILE_DEPLOYMENT: "reconcile_deployment",
    },
}


def imported_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.add(node.module or "")
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


@pytest.mark.parametrize("module", DISPATCH_MODULES, ids=lambda m: m.__name__)
def test_dispatch_imports_nothing_of_the_control_plane(module):
    imports = imported_modules(Path(module.__file__))
    assert not {name for name in imports if name.startswith("controlplane")}, imports
    assert not {name for name in imports if name.endswith("tasks")}, imports


@pytest.mark.parametrize("tasks_module", sorted(PUBLISHED))
def test_every_published_name_is_the_registered_task(tasks_module):
    module = importlib.import_module(tasks_module)
    for name, function in PUBLISHED[tasks_module].items():
        task = getattr(module, function)._get_current_object()  # shared_task hands out a proxy
        assert task.name == name
        assert current_app.tasks[name] is task
        assert current_app.signature(name).type is task


@pytest.mark.django_db
def test_an_eager_app_runs_the_task_a_dispatch_published(make_deployment, django_capture_on_commit_callbacks):
    importlib.import_module("controlplane.serving.tasks")
    deployment = make_deployment(replicas=1, vendor="cpu")  # no node: the reconcile launches nothing
    current_app.conf.task_always_eager = True
    try:
        with django_capture_on_commit_callbacks(execute=True) as published:
            serving_dispatch.reconcile_after_commit(deployment.pk)
    finally:
        current_app.conf.task_always_eager = False
    assert len(published) == 1
    assert list(deployment.replica_set.values_list("state", flat=True)) == ["pending"]
    deployment.refresh_from_db()
    assert deployment.placement_status == "unschedulable"
