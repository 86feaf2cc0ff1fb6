"""What a node agent does with a replica: launch it, drain it, and notice when its process dies.

Every entry point reloads the replica by primary key and acts only from the state it expects, so
running any of them twice (a redelivered message, a republished launch) does no harm.
"""

from __future__ import annotations

import logging
import time
import uuid
from datetime import timedelta
from pathlib import Path

import httpx
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from controlplane.fleet.models import Node
from controlplane.serving import launcher
from controlplane.serving.choices import HOLDING_STATES, PROCESS_STATES, ReplicaState, agent_actor
from controlplane.serving.conf import give_up_after, relaunch_backoff, setting
from controlplane.serving.metrics import parse_engine_metrics
from controlplane.serving.models import Replica, StaleReplicaState

log = logging.getLogger(__name__)
S = ReplicaState


def _fail(replica: Replica, reason: str, actor: str) -> None:
    try:
        replica.fail(
            reason, actor, backoff=relaunch_backoff(replica.launch_attempts), give_up_after=give_up_after()
        )
    except StaleReplicaState:
        pass


def _log_path(replica: Replica) -> Path:
    return Path(settings.VAR_DIR) / "replicas" / f"{replica.deployment.name}-{replica.uid}.log"


def shared_kv_dir(deployment) -> Path:
    """Where the prefill and decode replicas of one served model on this machine move KV: one
    directory per served model name, so a prefill and a decode deployment of it share it."""
    return Path(settings.VAR_DIR) / "kv-shared" / deployment.served_model_name


def launch(replica_id: int) -> str:
    with transaction.atomic():
        replica = (
            Replica.objects.select_for_update(of=("self",))
            .select_related("deployment__checkpoint", "revision__checkpoint", "node")
            .filter(pk=replica_id)
            .first()
        )
        if replica is None or replica.state != S.SCHEDULED:
            return f"skipped: replica is {replica.state if replica else 'gone'}"
        actor = agent_actor(replica.node.name)
        # Locking the node row serialises port choice between concurrent launches on this node.
        node = Node.objects.select_for_update().get(pk=replica.node_id)
        taken = (
            Replica.objects.filter(node=node, state__in=HOLDING_STATES, port__isnull=False)
            .exclude(pk=replica.pk)
            .values_list("port", flat=True)
        )
        existing = launcher.find_engine(str(replica.uid))
        port = existing.port if existing and existing.port else launcher.free_port(node.address, taken)
        replica.start_launch(port, str(_log_path(replica)), actor)
    deployment, spec = replica.deployment, replica.spec()
    if existing:
        replica.record_process(existing.pid, port)
        log.info("replica %s: adopted running engine pid %s", replica, existing.pid)
    else:
        command = launcher.build_command(
            model_dir=spec.checkpoint.path, host=node.address, port=port, vendor=deployment.vendor,
            served_model_name=deployment.served_model_name, replica_id=str(replica.uid),
            options=spec.engine_options, tp_size=spec.tp_size, ep_size=spec.ep_size,
            dp_size=spec.dp_size, role=deployment.role,
            shared_kv_dir=str(shared_kv_dir(deployment)),
        )  # fmt: skip
        indices = list(replica.accelerators.order_by("index").values_list("index", flat=True))
        pid = launcher.start_engine(
            command, launcher.engine_env(deployment.vendor, indices), Path(replica.log_path)
        )
        if not replica.record_process(pid, port):
            launcher.stop_process(pid, setting("STOP_TIMEOUT_S"))
            return "replica left launching before its process started; stopped it"
    return _wait_until_ready(replica, actor)


def _wait_until_ready(replica: Replica, actor: str) -> str:
    deadline = time.monotonic() + setting("LAUNCH_TIMEOUT_S")
    while time.monotonic() < deadline:
        replica.refresh_from_db(fields=["state"])
        if replica.state != S.LAUNCHING:
            return f"stopped waiting: replica is {replica.state}"
        if launcher.find_engine(str(replica.uid), replica.pid) is None:
            code = launcher.exit_code(replica.pid)
            tail = launcher.launch_output_tail(replica.log_path, 15)
            _fail(replica, f"engine exited (code {code}) before it was ready; log tail:\n{tail}", actor)
            return "engine exited"
        if launcher.is_healthy(replica.url):
            try:
                replica.mark_ready(f"engine answered /health at {replica.url}", actor)
            except StaleReplicaState:
                pass
            return "ready"
        time.sleep(0.5)
    launcher.stop_process(replica.pid, setting("STOP_TIMEOUT_S"))
    _fail(replica, f"engine not healthy within {setting('LAUNCH_TIMEOUT_S'):g}s; stopped it", actor)
    return "timed out"


def _requests_running(url: str) -> float | None:
    try:
        return parse_engine_metrics(httpx.get(f"{url}/metrics", timeout=2).text).requests_running
    except (httpx.HTTPError, ValueError):
        return None


def drain(replica_id: int) -> str:
    replica = Replica.objects.select_related("node").filter(pk=replica_id).first()
    if replica is None or replica.state != S.DRAINING:
        return f"skipped: replica is {replica.state if replica else 'gone'}"
    actor = agent_actor(replica.node.name) if replica.node else "agent"
    engine = launcher.find_engine(str(replica.uid), replica.pid)
    outcome = "no engine process was running"
    if engine is not None:
        url = replica.url
        try:
            httpx.post(f"{url}/admin/drain", timeout=5)
        except httpx.HTTPError as exc:
            log.warning("replica %s: POST /admin/drain failed: %s", replica, exc)
        deadline = time.monotonic() + setting("DRAIN_TIMEOUT_S")
        running = _requests_running(url)
        while running and time.monotonic() < deadline:
            time.sleep(0.5)
            running = _requests_running(url)
        waited = (
            f"{running:g} requests still running at the drain timeout; "
            if running
            else "in-flight requests done; "
        )
        outcome = waited + launcher.stop_process(engine.pid, setting("STOP_TIMEOUT_S"))
    try:
        replica.stop(f"drained: {outcome}", actor)
    except StaleReplicaState:
        return "replica moved while draining"
    return outcome


def observe_node(node: Node) -> None:
    """Called from the agent's heartbeat: notice dead engines, pick up launches a restart orphaned,
    stop engine processes whose replica no longer wants them."""
    actor = agent_actor(node.name)
    launcher.reap_children()
    grace = timedelta(seconds=setting("LAUNCH_GRACE_S"))
    for replica in Replica.objects.filter(node=node, state__in=PROCESS_STATES).select_related("node"):
        engine = launcher.find_engine(str(replica.uid), replica.pid)
        if engine is None:
            if replica.state == S.DRAINING:
                try:
                    replica.stop("engine process exited while draining", actor)
                except StaleReplicaState:
                    pass
            elif replica.pid is not None or timezone.now() - replica.state_changed_at > grace:
                code = launcher.exit_code(replica.pid) if replica.pid else None
                what = (
                    f"engine process {replica.pid} exited (code {code})"
                    if replica.pid
                    else "launch was interrupted before the engine started"
                )
                _fail(replica, what, actor)
        elif replica.state == S.LAUNCHING:
            if replica.pid != engine.pid:
                replica.record_process(engine.pid, engine.port or replica.port)
            if replica.port and launcher.is_healthy(replica.url):
                try:
                    replica.mark_ready(f"engine answered /health at {replica.url} (seen by the agent)", actor)
                except StaleReplicaState:
                    pass
    _stop_unwanted_engines(node)


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def _stop_unwanted_engines(node: Node) -> None:
    running = launcher.running_engines()
    if not running:
        return
    wanted = {
        str(uid)
        for uid in Replica.objects.filter(node=node, state__in=HOLDING_STATES).values_list("uid", flat=True)
    }
    # Only engines whose replica this database knows: another installation's engines are left alone.
    candidates = [replica_id for replica_id in running if _is_uuid(replica_id)]
    known = {str(uid) for uid in Replica.objects.filter(uid__in=candidates).values_list("uid", flat=True)}
    for replica_id in known - wanted:
        log.info(
            "stopping engine pid %s: replica %s is no longer wanted on %s",
            running[replica_id].pid,
            replica_id,
            node,
        )
        launcher.stop_process(running[replica_id].pid, setting("STOP_TIMEOUT_S"))
