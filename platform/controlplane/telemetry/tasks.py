import os
import socket

from celery import shared_task

from controlplane.telemetry.health import check_database


@shared_task(name="telemetry.health")
def health() -> dict:
    """Round-trip probe: proves a worker consumed a message and can reach the database."""
    return {"worker": socket.gethostname(), "pid": os.getpid(), "database": check_database().as_dict()}
