from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from controlplane.fleet.choices import WATCHED_NODE_STATES
from controlplane.fleet.models import Node


@shared_task(name="fleet.check_heartbeats")
def check_heartbeats() -> list[str]:
    """Celery beat: a node silent for NODE_LOST_AFTER_S is lost and its replicas failed."""
    from controlplane.serving.services import fail_replicas_on_node

    silence = timedelta(seconds=float(settings.CHASSIS_SERVING["NODE_LOST_AFTER_S"]))
    lost = []
    for node in Node.objects.filter(
        state__in=WATCHED_NODE_STATES, last_heartbeat__lt=timezone.now() - silence
    ):
        with transaction.atomic():
            node = Node.objects.select_for_update().get(pk=node.pk)
            if node.state not in WATCHED_NODE_STATES or node.last_heartbeat >= timezone.now() - silence:
                continue
            reason = f"no heartbeat for {silence.total_seconds():g}s"
            node.mark_lost(reason)
            fail_replicas_on_node(node, f"node {node.name} lost: {reason}")
        lost.append(node.name)
    return lost
