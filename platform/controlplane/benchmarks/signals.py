"""A deployment's deletion never takes benchmark history with it.

Its runs and schedules keep the deployment's name (the foreign keys become null); its schedules are
disabled, so they stop without vanishing, and its queued or running runs are cancelled, saying why.
"""

from __future__ import annotations

from django.db.models.signals import pre_delete
from django.dispatch import receiver

from controlplane.benchmarks.choices import ACTIVE_STATES
from controlplane.benchmarks.models import BenchmarkRun, BenchmarkSchedule, StaleRunState
from controlplane.serving.models import Deployment


@receiver(pre_delete, sender=Deployment, dispatch_uid="benchmarks-keep-history")
def keep_history(sender, instance: Deployment, **kwargs) -> None:
    BenchmarkSchedule.objects.filter(deployment=instance).update(deployment_name=instance.name)
    for schedule in BenchmarkSchedule.objects.filter(deployment=instance, enabled=True):
        schedule.stop_for_deleted_deployment()
    BenchmarkRun.objects.filter(deployment=instance, deployment_name="").update(deployment_name=instance.name)
    for run in BenchmarkRun.objects.filter(deployment=instance, state__in=ACTIVE_STATES):
        try:
            run.cancel(f"deployment {instance.name} was deleted")
        except StaleRunState:
            continue  # it finished meanwhile
