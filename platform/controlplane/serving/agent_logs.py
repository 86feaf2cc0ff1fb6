"""A replica's log tail, read by the agent of the replica's node: the file lives on that node."""

from __future__ import annotations

from celery import current_app
from celery.exceptions import TimeoutError as CeleryTimeout

from controlplane.fleet.choices import NodeState

LOG_TAIL_TASK = "serving.replica_log_tail"  # published by name: see serving/dispatch.py
AGENT_ANSWER_TIMEOUT_S = 8.0


def fetch_log_tail(replica, lines: int = 80) -> tuple[str, str | None]:
    """(log tail, None) or ("", why there is none)."""
    node = replica.node
    if node is None or not replica.log_path:
        return "", "no log yet: the replica has not been launched on a node"
    if node.state == NodeState.LOST:
        return "", f"node {node.name} is lost: its agent cannot be asked for the log"
    result = current_app.signature(LOG_TAIL_TASK, args=[replica.pk, lines]).apply_async(queue=node.queue)
    try:
        return result.get(timeout=AGENT_ANSWER_TIMEOUT_S), None
    except CeleryTimeout:  # the task, cheap and read-only, may still run later: nobody waits for it
        return "", f"the agent of node {node.name} did not answer within {AGENT_ANSWER_TIMEOUT_S:g} s"
    finally:
        result.forget()
