"""Celery entry points: each takes primary keys, reloads rows and delegates. Safe to run twice."""

from celery import shared_task

from controlplane.serving import execution, launcher, reconciler, scraping
from controlplane.serving.choices import ACTOR_RECONCILE
from controlplane.serving.models import Replica


@shared_task(name="serving.launch_replica", acks_late=True)
def launch_replica(replica_id: int) -> str:
    """Runs on the replica's node queue (node.<name>)."""
    return execution.launch(replica_id)


@shared_task(name="serving.drain_replica", acks_late=True)
def drain_replica(replica_id: int) -> str:
    """Runs on the replica's node queue (node.<name>)."""
    return execution.drain(replica_id)


@shared_task(name="serving.reconcile_deployment")
def reconcile_deployment(deployment_id: int) -> str | None:
    return reconciler.reconcile_deployment(deployment_id, ACTOR_RECONCILE)


@shared_task(name="serving.reconcile")
def reconcile() -> dict:
    """Celery beat: desired vs actual for every deployment."""
    return reconciler.reconcile_all(ACTOR_RECONCILE)


@shared_task(name="serving.scrape_metrics")
def scrape_metrics() -> int:
    """Celery beat: one MetricSample per ready replica."""
    return scraping.scrape_all()


@shared_task(name="serving.replica_log_tail")
def replica_log_tail(replica_id: int, lines: int = 80) -> str:
    """Runs on the replica's node queue (node.<name>): the end of its engine log, read where it is."""
    log_path = Replica.objects.filter(pk=replica_id).values_list("log_path", flat=True).first()
    return launcher.log_tail(log_path, lines) if log_path else ""
