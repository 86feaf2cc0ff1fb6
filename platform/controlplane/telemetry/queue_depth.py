"""Celery queue depth, read from the broker when Prometheus scrapes the control plane.

Depth is a property of the broker, not of any worker, so the scrape asks the broker directly: one
passive queue declaration per queue (Redis: the list lengths; the filesystem broker: its files).
It counts messages no worker has taken yet; those a worker reserved (one per pool slot with
prefetch 1) are not in the queue any more.

    chassis_celery_queue_length{queue}   messages waiting in the queue
    chassis_celery_broker_up             1 when the broker answered this scrape, else 0
"""

from __future__ import annotations

import logging

from django.conf import settings
from prometheus_client.core import GaugeMetricFamily

log = logging.getLogger(__name__)
BROKER_TIMEOUT_S = 2


def watched_queues() -> list[str]:
    """The control plane's queue and each node agent's."""
    from controlplane.fleet.models import Node

    nodes = [node.queue for node in Node.objects.order_by("name").only("name")]
    return [settings.CELERY_TASK_DEFAULT_QUEUE, *nodes]


def _depth(channel, queue: str) -> int:
    from kombu.exceptions import ChannelError

    try:
        return channel.queue_declare(queue=queue, passive=True).message_count
    except ChannelError:  # never declared, or emptied and removed (Redis drops empty lists)
        return 0


class QueueDepthCollector:
    def collect(self):
        from controlplane.celery import app

        length = GaugeMetricFamily(
            "chassis_celery_queue_length", "Messages waiting in a Celery queue", labels=["queue"]
        )
        up = GaugeMetricFamily("chassis_celery_broker_up", "1 when the Celery broker answered this scrape")
        try:
            with app.connection_for_read() as connection:
                connection.ensure_connection(max_retries=1, timeout=BROKER_TIMEOUT_S)
                channel = connection.default_channel
                for queue in watched_queues():
                    length.add_metric([queue], float(_depth(channel, queue)))
            up.add_metric([], 1.0)
        except Exception as exc:  # a scrape must answer even when the broker does not
            log.warning("queue depth: broker unreachable: %s", exc)
            up.add_metric([], 0.0)
        yield from (length, up)
